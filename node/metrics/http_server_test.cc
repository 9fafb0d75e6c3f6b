// The HTTP endpoint over real sockets on 127.0.0.1 (ephemeral ports), with
// a plain POSIX client so the test does not share the server's HTTP code.
#include "node/metrics/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sb::metrics {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// A blocking client socket with a 5 s receive timeout (a broken server
// fails the test instead of hanging it).
class Client {
 public:
  explicit Client(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    connect_errno_ = connected_ ? 0 : errno;
  }
  ~Client() {
    if (fd_ >= 0) ::close(fd_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool connected() const { return connected_; }

  // Closes with a reset (SO_LINGER 0), as load balancers close their
  // health-check connections to skip TIME_WAIT.
  void reset() {
    linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    ::close(fd_);
    fd_ = -1;
  }
  int connect_errno() const { return connect_errno_; }

  bool send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // One response; nullopt if the connection closed (or timed out) first.
  // head: the response to a HEAD request carries no body.
  std::optional<Response> response(bool head = false) {
    size_t end;
    while ((end = pending_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill()) return std::nullopt;
    }
    Response r;
    const std::string head_text = pending_.substr(0, end + 2);
    pending_.erase(0, end + 4);
    size_t line_end = head_text.find("\r\n");
    const std::string status_line = head_text.substr(0, line_end);
    if (status_line.size() < 12 || status_line.rfind("HTTP/1.", 0) != 0) return std::nullopt;
    r.status = std::stoi(status_line.substr(9, 3));
    for (size_t p = line_end + 2; p < head_text.size();) {
      const size_t e = head_text.find("\r\n", p);
      const std::string line = head_text.substr(p, e - p);
      p = e + 2;
      const size_t colon = line.find(':');
      if (colon == std::string::npos) return std::nullopt;
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t v = colon + 1;
      while (v < line.size() && line[v] == ' ') ++v;
      r.headers[name] = line.substr(v);
    }
    if (!head && r.headers.count("content-length")) {
      const size_t len = std::stoul(r.headers["content-length"]);
      while (pending_.size() < len) {
        if (!fill()) return std::nullopt;
      }
      r.body = pending_.substr(0, len);
      pending_.erase(0, len);
    }
    return r;
  }

  std::optional<Response> request(const std::string& method, const std::string& path,
                                  const std::string& extra_headers = "") {
    if (!send(method + " " + path + " HTTP/1.1\r\nHost: test\r\n" + extra_headers + "\r\n")) {
      return std::nullopt;
    }
    return response(method == "HEAD");
  }

  // True if the peer closes (EOF or reset) within `limit`; data is skipped.
  bool closed_within(std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    }
  }

  // Bytes already buffered or arriving within `limit` (HEAD must send none).
  bool nothing_more_within(std::chrono::milliseconds limit) {
    if (!pending_.empty()) return false;
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(limit.count())) == 0;
  }

  // Everything still buffered or arriving until the peer closes (EOF or
  // reset); nullopt if it stays open for `limit`.
  std::optional<std::string> rest_until_close(std::chrono::milliseconds limit) {
    std::string rest = std::move(pending_);
    pending_.clear();
    const auto deadline = Clock::now() + limit;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return rest;
      if (n > 0) rest.append(buf, static_cast<size_t>(n));
    }
  }

 private:
  bool fill() {
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    pending_.append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  int connect_errno_ = 0;
  std::string pending_;
};

// What the handlers serve; the test flips it.
struct Backend {
  std::atomic<bool> ready{true};
  std::atomic<int> throw_mode{0};  // 0: none, 1: std::runtime_error, 2: an int
  std::atomic<int> metrics_calls{0};
};

constexpr const char* kBody = "# HELP sb_up Up.\n# TYPE sb_up gauge\nsb_up 1\n";

HttpHandlers handlers_for(Backend& b) {
  HttpHandlers h;
  h.metrics = [&b]() -> std::string {
    ++b.metrics_calls;
    if (b.throw_mode == 1) throw std::runtime_error("counter snapshot failed");
    if (b.throw_mode == 2) throw 42;
    return kBody;
  };
  h.health = [&b](std::string* why) {
    if (b.throw_mode != 0) throw std::runtime_error("health probe failed");
    if (b.ready) return true;
    *why = "fib not loaded";
    return false;
  };
  return h;
}

std::unique_ptr<HttpServer> start_server(Backend& b, HttpOptions opts = {}) {
  auto r = HttpServer::start("127.0.0.1:0", handlers_for(b), opts);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  std::unique_ptr<HttpServer> s = std::move(r).value();
  REQUIRE(s->port() != 0);
  return s;
}

template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 3000ms) {
  const auto deadline = Clock::now() + limit;
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

TEST_CASE("metrics http: GET /metrics serves the handler's text", "[metrics][http]") {
  Backend b;
  auto srv = start_server(b);
  Client c(srv->port());
  REQUIRE(c.connected());
  auto r = c.request("GET", "/metrics");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->header("content-type") == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(r->header("content-length") == std::to_string(std::string(kBody).size()));
  CHECK(r->body == kBody);
  CHECK(b.metrics_calls == 1);
  // RFC 9110 6.6.1: Date, as IMF-fixdate, of about now.
  const std::string date = r->header("date");
  INFO("Date: " << date);
  REQUIRE(date.size() == 29);
  std::tm tm{};
  const char* end = strptime(date.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  REQUIRE(end != nullptr);
  CHECK(*end == '\0');
  const long skew = long(timegm(&tm)) - long(std::time(nullptr));
  CHECK(skew <= 1);
  CHECK(skew >= -5);

  auto q = c.request("GET", "/metrics?name[]=sb_up");  // query strings are ignored
  REQUIRE(q);
  CHECK(q->status == 200);
  CHECK(q->body == kBody);
}

TEST_CASE("metrics http: /health answers 200 ready or 503 with the reason", "[metrics][http]") {
  Backend b;
  auto srv = start_server(b);
  Client c(srv->port());
  auto r = c.request("GET", "/health");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == "ready\n");
  CHECK(r->header("content-type") == "text/plain; charset=utf-8");

  b.ready = false;
  r = c.request("GET", "/health");
  REQUIRE(r);
  CHECK(r->status == 503);
  CHECK(r->body == "fib not loaded\n");
}

TEST_CASE("metrics http: unknown paths 404, other methods 405 with Allow", "[metrics][http]") {
  Backend b;
  auto srv = start_server(b);
  Client c(srv->port());
  auto r = c.request("GET", "/nope");
  REQUIRE(r);
  CHECK(r->status == 404);
  CHECK(r->header("date").size() == 29);  // error answers are dated too
  r = c.request("GET", "/");
  REQUIRE(r);
  CHECK(r->status == 404);
  r = c.request("GET", "/metricsx");
  REQUIRE(r);
  CHECK(r->status == 404);

  for (const char* method : {"POST", "PUT", "DELETE", "OPTIONS"}) {
    for (const char* path : {"/metrics", "/health"}) {
      INFO(method << " " << path);
      r = c.request(method, path);
      REQUIRE(r);
      CHECK(r->status == 405);
      CHECK(r->header("allow") == "GET, HEAD");
    }
  }
  // A body is read and discarded: the connection stays usable.
  REQUIRE(c.send("POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"));
  r = c.response();
  REQUIRE(r);
  CHECK(r->status == 405);
  CHECK(b.metrics_calls == 0);
  r = c.request("GET", "/metrics");
  REQUIRE(r);
  CHECK(r->status == 200);
}

TEST_CASE("metrics http: HEAD sends the headers of GET and no body", "[metrics][http]") {
  Backend b;
  auto srv = start_server(b);
  Client c(srv->port());
  auto r = c.request("HEAD", "/metrics");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->header("content-type") == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(r->header("content-length") == std::to_string(std::string(kBody).size()));
  CHECK(c.nothing_more_within(100ms));

  b.ready = false;
  r = c.request("HEAD", "/health");
  REQUIRE(r);
  CHECK(r->status == 503);
  CHECK(r->header("content-length") == "15");  // "fib not loaded\n"
  CHECK(c.nothing_more_within(100ms));

  // The connection is still in step: a GET after the HEADs parses cleanly.
  r = c.request("GET", "/metrics");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == kBody);
}

// RFC 9110 9.3.2: the answer to HEAD carries no content, whatever its
// status; the errors answered before the handlers (413 for a body over the
// limit, 400 for a broken body) too, once the request line said HEAD.
TEST_CASE("metrics http: an error answer to a HEAD request carries no body either", "[metrics][http]") {
  Backend b;
  auto srv = start_server(b);
  // The status of a HEAD request's error answer; nothing follows it.
  auto head_error = [&](const std::string& request, int status) {
    Client c(srv->port());
    REQUIRE(c.send(request));
    auto r = c.response(true);
    REQUIRE(r);
    CHECK(r->status == status);
    const std::optional<std::string> rest = c.rest_until_close(2000ms);
    REQUIRE(rest);
    CHECK(*rest == "");
  };
  SECTION("413: a body over the limit") {
    head_error("HEAD /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n", 413);
  }
  SECTION("400: a broken chunked body") {
    head_error("HEAD /health HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400);
  }
  SECTION("a GET with the same error still gets the reason") {
    Client c(srv->port());
    REQUIRE(c.send("GET /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n"));
    auto r = c.response();
    REQUIRE(r);
    CHECK(r->status == 413);
    CHECK(r->body == "Payload Too Large\n");
  }
}

// RFC 9112 3.2.2: a server MUST accept the absolute-form of the request
// target ("GET http://host:port/metrics"), as a client sends it through a
// proxy or a probe configured with the full URL does.
TEST_CASE("metrics http: absolute-form request targets are served like origin-form ones", "[metrics][http]") {
  Backend b;
  auto srv = start_server(b);
  Client c(srv->port());
  const std::string authority = "127.0.0.1:" + std::to_string(srv->port());
  auto r = c.request("GET", "http://" + authority + "/metrics");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->header("content-type") == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(r->body == kBody);
  r = c.request("GET", "HTTP://" + authority + "/health?verbose=1");  // the scheme is case-insensitive
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == "ready\n");
  r = c.request("HEAD", "http://" + authority + "/metrics");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->header("content-length") == std::to_string(std::string(kBody).size()));
  CHECK(c.nothing_more_within(100ms));
  r = c.request("POST", "http://" + authority + "/metrics");
  REQUIRE(r);
  CHECK(r->status == 405);
  // Other paths stay 404, the authority's empty path is "/".
  for (const std::string& t : std::vector<std::string>{"http://" + authority + "/nope", "http://" + authority,
                               "http://" + authority + "?/metrics", std::string("http://x/metricsx"),
                               std::string("ftp://x/metrics"), std::string("http:/metrics"),
                               std::string("/http://x/metrics")}) {
    INFO(t);
    r = c.request("GET", t);
    REQUIRE(r);
    CHECK(r->status == 404);
  }
  CHECK(b.metrics_calls == 2);
}

TEST_CASE("metrics http: keep-alive serves several requests on one connection", "[metrics][http]") {
  Backend b;
  auto srv = start_server(b);
  Client c(srv->port());
  auto r1 = c.request("GET", "/metrics");
  auto r2 = c.request("GET", "/health");
  REQUIRE(r1);
  REQUIRE(r2);
  CHECK(r1->status == 200);
  CHECK(r2->status == 200);
  CHECK(srv->stats().requests == 2);

  SECTION("pipelined: both requests in one write") {
    REQUIRE(c.send("GET /health HTTP/1.1\r\nHost: t\r\n\r\nGET /metrics HTTP/1.1\r\nHost: t\r\n\r\n"));
    auto a = c.response();
    auto z = c.response();
    REQUIRE(a);
    REQUIRE(z);
    CHECK(a->body == "ready\n");
    CHECK(z->body == kBody);
  }
  SECTION("Connection: close is honoured") {
    auto r = c.request("GET", "/health", "Connection: close\r\n");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(c.closed_within(2000ms));
  }
  SECTION("HTTP/1.0 without keep-alive: one request, then close") {
    Client d(srv->port());
    REQUIRE(d.send("GET /health HTTP/1.0\r\n\r\n"));
    auto r = d.response();
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(d.closed_within(2000ms));
  }
}

TEST_CASE("metrics http: oversized or malformed requests are refused, the server survives", "[metrics][http]") {
  Backend b;
  auto srv = start_server(b);

  SECTION("a 7 KiB header is fine") {
    Client c(srv->port());
    auto r = c.request("GET", "/metrics", "X-Pad: " + std::string(7 * 1024, 'a') + "\r\n");
    REQUIRE(r);
    CHECK(r->status == 200);
  }
  SECTION("a 10 KiB header: 431 or a closed connection") {
    Client c(srv->port());
    c.send("GET /metrics HTTP/1.1\r\nHost: t\r\nX-Pad: " + std::string(10 * 1024, 'a') + "\r\n\r\n");
    auto r = c.response();
    if (r) CHECK(r->status == 431);
    CHECK(c.closed_within(2000ms));
    CHECK(eventually([&] { return srv->stats().errors >= 1; }));
  }
  SECTION("an endless header line") {
    Client c(srv->port());
    c.send("GET /metrics HTTP/1.1\r\nX-Pad: ");
    for (int i = 0; i < 64 && c.send(std::string(4096, 'b')); ++i) {
    }
    CHECK(c.closed_within(2000ms));
  }
  SECTION("garbage: 400 and close") {
    Client c(srv->port());
    c.send("HELLO THERE\r\n\r\n");
    auto r = c.response();
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(c.closed_within(2000ms));
  }
  SECTION("HTTP/1.1 without Host, or with two: 400 and close (RFC 9112 3.2)") {
    const char* bad[] = {"GET /metrics HTTP/1.1\r\n\r\n",
                         "GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                         "GET /health HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n"};
    for (const char* req : bad) {
      INFO(req);
      Client c(srv->port());
      c.send(req);
      auto r = c.response();
      REQUIRE(r);
      CHECK(r->status == 400);
      CHECK(c.closed_within(2000ms));
    }
    CHECK(srv->stats().requests == 0);
    CHECK(srv->stats().errors == 3);
  }
  SECTION("a body over the limit: 413") {
    Client c(srv->port());
    c.send("POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n");
    auto r = c.response();
    REQUIRE(r);
    CHECK(r->status == 413);
  }
  Client after(srv->port());
  auto r = after.request("GET", "/metrics");
  REQUIRE(r);
  CHECK(r->status == 200);
}

TEST_CASE("metrics http: a slow client is cut off after the read timeout", "[metrics][http]") {
  Backend b;
  HttpOptions opts;
  opts.read_timeout = 200ms;
  auto srv = start_server(b, opts);

  SECTION("half a request") {
    Client c(srv->port());
    const auto t0 = Clock::now();
    REQUIRE(c.send("GET /metrics HTTP/1.1\r\nHo"));
    CHECK(c.closed_within(3000ms));
    CHECK(Clock::now() - t0 >= 150ms);
    CHECK(eventually([&] { return srv->stats().timeouts == 1; }));
  }
  SECTION("a connection that never sends") {
    Client c(srv->port());
    CHECK(c.closed_within(3000ms));
    CHECK(eventually([&] { return srv->stats().timeouts == 1; }));
  }
  SECTION("an idle keep-alive connection is closed but not counted") {
    Client c(srv->port());
    auto r = c.request("GET", "/health");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(c.closed_within(3000ms));
    std::this_thread::sleep_for(50ms);
    CHECK(srv->stats().timeouts == 0);
  }
  SECTION("the timer restarts for each request") {
    Client c(srv->port());
    for (int i = 0; i < 5; ++i) {
      std::this_thread::sleep_for(60ms);  // 300 ms in all > the timeout
      auto r = c.request("GET", "/health");
      REQUIRE(r);
      CHECK(r->status == 200);
    }
  }
  Client after(srv->port());
  auto r = after.request("GET", "/health");
  REQUIRE(r);
  CHECK(r->status == 200);
}

TEST_CASE("metrics http: at most 64 connections, further ones answered 503, closed and counted", "[metrics][http]") {
  Backend b;
  HttpOptions opts;
  opts.read_timeout = 30000ms;  // the 64 idle clients must not time out
  auto srv = start_server(b, opts);
  REQUIRE(opts.max_connections == 64);
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 64; ++i) {
    held.push_back(std::make_unique<Client>(srv->port()));
    REQUIRE(held.back()->connected());
  }
  // Accepted in order: the 65th finds the table full, and is told so.
  Client extra(srv->port());
  const auto said = extra.rest_until_close(3000ms);
  REQUIRE(said);
  CHECK(said->rfind("HTTP/1.1 503 Service Unavailable\r\n", 0) == 0);
  CHECK(said->find("\r\nRetry-After: 1\r\n") != std::string::npos);
  CHECK(said->find("\r\n\r\ntoo many connections\n") != std::string::npos);
  CHECK(eventually([&] { return srv->stats().rejected_connections == 1; }));

  // The held ones are served.
  auto r = held[0]->request("GET", "/health");
  REQUIRE(r);
  CHECK(r->status == 200);

  // Freeing one slot admits a new client.
  held[1].reset();
  bool served = eventually([&] {
    Client c(srv->port());
    auto x = c.request("GET", "/health");
    return x && x->status == 200;
  });
  CHECK(served);
}

// A load balancer's HTTP check reads its answer and closes the connection
// with a reset (SO_LINGER 0, no TIME_WAIT), a TCP check connects and resets:
// routine closes between requests, like a FIN there, not errors (else
// sb_http_errors_total grows with every check and is useless to alert on).
// A reset in the middle of a request is still one.
TEST_CASE("metrics http: a reset between requests is a close, not an error", "[metrics][http]") {
  Backend b;
  auto srv = start_server(b);
  {
    Client c(srv->port());
    auto r = c.request("GET", "/health");
    REQUIRE(r);
    CHECK(r->status == 200);
    c.reset();
  }
  {
    Client c(srv->port());
    REQUIRE(c.connected());
    c.reset();
  }
  // Served after both resets were sent; then time for the server to see them.
  Client after(srv->port());
  auto r = after.request("GET", "/health");
  REQUIRE(r);
  CHECK(r->status == 200);
  std::this_thread::sleep_for(200ms);
  CHECK(srv->stats().errors == 0);
  CHECK(srv->stats().timeouts == 0);

  Client mid(srv->port());
  r = mid.request("GET", "/health");
  REQUIRE(r);
  REQUIRE(mid.send("GET /metrics HTTP/1.1\r\nHo"));  // half of the next request
  std::this_thread::sleep_for(50ms);
  mid.reset();
  CHECK(eventually([&] { return srv->stats().errors == 1; }));
  std::this_thread::sleep_for(100ms);
  CHECK(srv->stats().errors == 1);
}

TEST_CASE("metrics http: a throwing handler gets a 500, the server keeps serving", "[metrics][http]") {
  Backend b;
  auto srv = start_server(b);
  Client c(srv->port());
  b.throw_mode = 1;
  auto r = c.request("GET", "/metrics");
  REQUIRE(r);
  CHECK(r->status == 500);
  r = c.request("GET", "/health");
  REQUIRE(r);
  CHECK(r->status == 500);
  b.throw_mode = 2;  // not even a std::exception
  r = c.request("GET", "/metrics");
  REQUIRE(r);
  CHECK(r->status == 500);
  CHECK(srv->stats().errors == 3);

  b.throw_mode = 0;
  r = c.request("GET", "/metrics");  // same connection
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == kBody);
  CHECK(srv->stats().requests == 4);
}

TEST_CASE("metrics http: malformed listen strings are rejected, naming the value", "[metrics][http]") {
  Backend b;
  for (const char* listen :
       {"", "127.0.0.1", "127.0.0.1:", ":9100", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:+80",
        "127.0.0.1:80x", "127.0.0.1:0x50", "127.0.0.1:999999", "localhost:9100", "::1:9100",
        "[::1]:9100", "1.2.3:9100", "256.1.1.1:9100", " 127.0.0.1:9100", "127.0.0.1 :9100",
        "127.0.0.1:9100:1"}) {
    INFO("listen = '" << listen << "'");
    auto r = HttpServer::start(listen, handlers_for(b));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
    CHECK(r.status().message().find("\"" + std::string(listen) + "\"") != std::string::npos);
    // The check without binding (sb-node's config validation) agrees.
    const Status c = HttpServer::check_listen(listen);
    CHECK(c.code() == StatusCode::kInvalidArgument);
    CHECK(c.message() == r.status().message());
  }
  for (const char* listen : {"127.0.0.1:0", "0.0.0.0:9100", "198.18.16.1:65535"}) {
    INFO("listen = '" << listen << "'");
    CHECK(HttpServer::check_listen(listen).ok());
  }
}

TEST_CASE("metrics http: bind failures name the address", "[metrics][http]") {
  Backend b;
  auto first = start_server(b);
  const std::string taken = "127.0.0.1:" + std::to_string(first->port());
  auto r = HttpServer::start(taken, handlers_for(b));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kIo);
  CHECK(r.status().message().find(taken) != std::string::npos);

  auto n = HttpServer::start("192.0.2.1:0", handlers_for(b));  // TEST-NET-1: not ours
  REQUIRE_FALSE(n.ok());
  CHECK(n.status().code() == StatusCode::kIo);
  CHECK(n.status().message().find("192.0.2.1:0") != std::string::npos);
}

TEST_CASE("metrics http: missing handlers and zero limits are rejected", "[metrics][http]") {
  Backend b;
  HttpHandlers h = handlers_for(b);
  h.health = nullptr;
  auto r = HttpServer::start("127.0.0.1:0", h);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kInvalidArgument);

  HttpOptions opts;
  opts.max_connections = 0;
  auto z = HttpServer::start("127.0.0.1:0", handlers_for(b), opts);
  REQUIRE_FALSE(z.ok());
  CHECK(z.status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("metrics http: stop() is idempotent and closes everything", "[metrics][http]") {
  Backend b;
  auto srv = start_server(b);
  const uint16_t port = srv->port();
  Client busy(port);
  REQUIRE(busy.send("GET /metrics HTTP/1.1\r\n"));  // half a request in flight
  Client idle(port);
  auto r = idle.request("GET", "/health");
  REQUIRE(r);

  const auto t0 = Clock::now();
  srv->stop();
  CHECK(Clock::now() - t0 < 2000ms);  // does not wait for the 5 s timeout
  srv->stop();
  CHECK(busy.closed_within(2000ms));
  CHECK(idle.closed_within(2000ms));
  Client late(port);
  CHECK_FALSE(late.connected());
  CHECK(late.connect_errno() == ECONNREFUSED);
  CHECK(srv->port() == port);
  CHECK(srv->stats().requests == 1);

  std::thread other([&] { srv->stop(); });  // from another thread too
  other.join();
  srv.reset();  // and the destructor after it
}

TEST_CASE("metrics http: stats() read while clients are served", "[metrics][http]") {
  Backend b;
  auto srv = start_server(b);
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done) (void)srv->stats();
  });
  std::vector<std::thread> clients;
  for (int t = 0; t < 2; ++t) {
    clients.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        Client c(srv->port());
        auto r = c.request("GET", "/metrics");
        if (!r || r->status != 200) break;
      }
    });
  }
  for (auto& t : clients) t.join();
  CHECK(srv->stats().requests == 100);
  srv->stop();
  done = true;
  reader.join();
}

}  // namespace
}  // namespace sb::metrics

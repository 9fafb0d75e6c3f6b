#include "node/metrics/http_server.h"

#include <atomic>
#include <cassert>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <exception>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace sb::metrics {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr std::string_view kPromContentType = "text/plain; version=0.0.4; charset=utf-8";
constexpr std::string_view kTextContentType = "text/plain; charset=utf-8";
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(100);

Result<tcp::endpoint> parse_listen(const std::string& listen) {
  auto bad = [&](std::string_view what) {
    return Status::InvalidArgument("HTTP listen address \"" + listen + "\": " + std::string(what) +
                                   " (expected ADDR:PORT, ADDR an IPv4 address, e.g. 127.0.0.1:9100)");
  };
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return bad("no ':PORT'");
  const std::string addr = listen.substr(0, colon);
  const std::string_view port_s = std::string_view(listen).substr(colon + 1);
  if (addr.empty()) return bad("empty address");
  bool digits = !port_s.empty() && port_s.size() <= 5;
  for (char c : port_s) digits = digits && c >= '0' && c <= '9';
  unsigned port = 0;
  if (!digits || std::from_chars(port_s.data(), port_s.data() + port_s.size(), port).ec != std::errc() ||
      port > 65535) {
    return bad("port '" + std::string(port_s) + "' is not a number in 0..65535");
  }
  boost::system::error_code ec;
  const asio::ip::address_v4 a = asio::ip::make_address_v4(addr, ec);
  if (ec) return bad("'" + addr + "' is not an IPv4 address");
  return tcp::endpoint(a, static_cast<uint16_t>(port));
}

// The path of a request target without its query: origin-form
// ("/metrics?x=1") or absolute-form ("http://host:9100/metrics", which
// RFC 9112 3.2.2 says a server MUST accept; its empty path is "/").
std::string_view target_path(std::string_view target) {
  for (std::string_view scheme : {std::string_view("http://"), std::string_view("https://")}) {
    if (target.size() < scheme.size()) continue;
    bool match = true;
    for (size_t i = 0; i < scheme.size() && match; ++i) {
      const char c = target[i] >= 'A' && target[i] <= 'Z' ? char(target[i] - 'A' + 'a') : target[i];
      match = c == scheme[i];
    }
    if (!match) continue;
    target.remove_prefix(scheme.size());
    const size_t p = target.find_first_of("/?");
    if (p == std::string_view::npos || target[p] == '?') return "/";
    target.remove_prefix(p);
    break;
  }
  return target.substr(0, target.find('?'));
}

// RFC 9110 5.6.7 IMF-fixdate of `t` ("Sun, 06 Nov 1994 08:49:37 GMT"),
// spelled out rather than strftime'd so no locale can change the names.
std::string imf_fixdate(std::time_t t) {
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return "Thu, 01 Jan 1970 00:00:00 GMT";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s, %02d %s %04d %02d:%02d:%02d GMT", kDays[tm.tm_wday % 7], tm.tm_mday,
                kMonths[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return buf;
}

}  // namespace

// ---- the server state, shared by the accept loop and the sessions ---------
// Everything but the atomics and the mutex is touched by the server thread
// only (start() sets it up before the thread exists; stop() tears it down
// after the join).
struct HttpServer::Impl {
  Handlers handlers;
  Options opts;
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> rejected{0};
  std::atomic<uint64_t> timeouts{0};
  size_t active = 0;  // open sessions
  uint16_t port = 0;

  // Destroyed by stop() after the join: the io_context destroys the pending
  // handlers, hence the sessions (they decrement `active` above, which is
  // why Io lives apart from and inside Impl).
  struct Io {
    asio::io_context ioc{1};
    tcp::acceptor acceptor{ioc};
    asio::steady_timer accept_retry{ioc};
  };
  std::unique_ptr<Io> io;
  std::thread thread;
  std::mutex stop_mu;

  void do_accept();
  void on_accept(const beast::error_code& ec, tcp::socket s);
  void run();
};

namespace {

// One connection: read a request, answer it, repeat while keep-alive.
// Owned by the shared_ptrs in its pending completion handlers.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpServer::Impl* srv, tcp::socket s)
      : srv_(srv),
        stream_(std::move(s)),
        buf_(static_cast<size_t>(srv->opts.max_header_bytes + srv->opts.max_body_bytes) + 4096) {
    ++srv_->active;
  }
  ~Session() { --srv_->active; }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start() { read_request(); }

 private:
  using Request = http::request<http::string_body>;
  using Response = http::response<http::string_body>;

  void read_request() {
    parser_.emplace();
    parser_->header_limit(srv_->opts.max_header_bytes);
    parser_->body_limit(srv_->opts.max_body_bytes);
    stream_.expires_after(srv_->opts.read_timeout);
    http::async_read(stream_, buf_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(const beast::error_code& ec) {
    if (ec) {
      if (ec == http::error::end_of_stream) return close_gracefully();  // closed between requests
      // Reset between requests (no byte of a new one): a load balancer's
      // health check closes so (SO_LINGER 0) after its answer, or right
      // after connecting; as routine as the FIN above, not an error.
      if (ec == asio::error::connection_reset && !parser_->got_some()) return;
      if (ec == beast::error::timeout) {
        // The stream has closed the socket. An idle keep-alive connection
        // that already got its answers is routine, not a slow client.
        if (parser_->got_some() || served_ == 0) ++srv_->timeouts;
        return;
      }
      if (ec == http::error::header_limit) return reply_error(http::status::request_header_fields_too_large);
      if (ec == http::error::body_limit) return reply_error(http::status::payload_too_large);
      const bool parse_error = ec.category() == http::make_error_code(http::error::bad_method).category();
      if (parse_error && ec != http::error::partial_message) return reply_error(http::status::bad_request);
      ++srv_->errors;  // reset or closed mid-request: nobody to answer
      return;
    }
    const Request& req = parser_->get();
    // RFC 9112 3.2: a server MUST answer 400 to an HTTP/1.1 request
    // without a Host field, or with more than one (HTTP/1.0 may omit it).
    const size_t hosts = req.count(http::field::host);
    if (hosts > 1 || (hosts == 0 && req.version() >= 11)) return reply_error(http::status::bad_request);
    ++srv_->requests;
    close_after_ = !req.keep_alive();
    res_ = route(req);
    write_response();
  }

  Response route(const Request& req) {
    const std::string_view path = target_path(std::string_view(req.target().data(), req.target().size()));
    const bool head = req.method() == http::verb::head;
    Response res{http::status::ok, req.version()};
    std::string_view content_type = kTextContentType;
    std::string body;
    if (path != "/metrics" && path != "/health") {
      res.result(http::status::not_found);
      body = "not found\n";
    } else if (req.method() != http::verb::get && !head) {
      res.result(http::status::method_not_allowed);
      res.set(http::field::allow, "GET, HEAD");
      body = "method not allowed\n";
    } else {
      try {
        if (path == "/metrics") {
          body = srv_->handlers.metrics();
          content_type = kPromContentType;
        } else {
          std::string why;
          if (srv_->handlers.health(&why)) {
            body = "ready\n";
          } else {
            res.result(http::status::service_unavailable);
            body = (why.empty() ? std::string("not ready") : std::move(why)) + "\n";
          }
        }
      } catch (...) {
        ++srv_->errors;
        res.result(http::status::internal_server_error);
        content_type = kTextContentType;
        body = "internal error\n";
      }
    }
    res.set(http::field::server, "sb-node");
    res.set(http::field::content_type, beast::string_view(content_type.data(), content_type.size()));
    res.keep_alive(!close_after_);
    // HEAD: the length GET would send, and no body.
    res.content_length(body.size());
    if (!head) res.body() = std::move(body);
    return res;
  }

  // Answers a request that could not be read, then closes. Once its
  // request line was parsed and said HEAD (a body over the limit, header
  // fields past the header limit, a broken field or chunked body), the
  // answer has the Content-Length of the reason but no content, as every
  // answer to HEAD (RFC 9110 9.3.2). Before that (a garbage or overlong
  // request line) the method is unknown and the reason is sent.
  void reply_error(http::status status) {
    ++srv_->errors;
    const bool head = parser_ && parser_->get().method() == http::verb::head;
    res_ = Response{status, 11};
    res_.set(http::field::server, "sb-node");
    res_.set(http::field::content_type, beast::string_view(kTextContentType.data(), kTextContentType.size()));
    std::string body = std::string(http::obsolete_reason(status)) + "\n";
    close_after_ = true;
    res_.keep_alive(false);
    res_.content_length(body.size());
    if (!head) res_.body() = std::move(body);
    write_response();
  }

  void write_response() {
    // RFC 9110 6.6.1: an origin server with a clock MUST send Date.
    res_.set(http::field::date, imf_fixdate(std::time(nullptr)));
    stream_.expires_after(srv_->opts.write_timeout);
    http::async_write(stream_, res_,
                      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_write(ec); });
  }

  void on_write(const beast::error_code& ec) {
    if (ec) {
      if (ec == beast::error::timeout) {
        ++srv_->timeouts;
      } else {
        ++srv_->errors;
      }
      return;
    }
    ++served_;
    if (close_after_) return close_gracefully();
    res_ = {};
    read_request();
  }

  // FIN after the last response; the socket closes with the session.
  void close_gracefully() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  HttpServer::Impl* srv_;
  beast::tcp_stream stream_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  Response res_;
  bool close_after_ = false;
  uint64_t served_ = 0;
};

}  // namespace

void HttpServer::Impl::do_accept() {
  io->acceptor.async_accept([this](beast::error_code ec, tcp::socket s) { on_accept(ec, std::move(s)); });
}

void HttpServer::Impl::on_accept(const beast::error_code& ec, tcp::socket s) {
  if (ec == asio::error::operation_aborted || !io->acceptor.is_open()) return;
  if (ec) {
    // EMFILE, ENOBUFS, ...: retry later rather than spin.
    ++errors;
    io->accept_retry.expires_after(kAcceptRetryDelay);
    io->accept_retry.async_wait([this](beast::error_code e) {
      if (!e) do_accept();
    });
    return;
  }
  try {
    if (active >= opts.max_connections) {
      ++rejected;
      // Say why before closing (a prober then sees "busy", not a dead
      // node): one short write that never blocks the server's thread;
      // bytes the client already sent are read first, so the close is a
      // FIN, not a reset that could discard the answer. Best effort.
      static constexpr char k503[] =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 21\r\n"
          "Retry-After: 1\r\nConnection: close\r\n\r\ntoo many connections\n";
      beast::error_code ignored;
      s.non_blocking(true, ignored);
      char sink[1024];
      for (int i = 0; i < 16 && s.read_some(asio::buffer(sink), ignored) > 0; ++i) {
      }  // at most 16 KiB: a client that keeps sending cannot hold the thread
      s.write_some(asio::buffer(k503, sizeof k503 - 1), ignored);
      s.shutdown(tcp::socket::shutdown_send, ignored);
      s.close(ignored);
    } else {
      std::make_shared<Session>(this, std::move(s))->start();
    }
  } catch (...) {
    ++errors;
  }
  do_accept();
}

void HttpServer::Impl::run() {
  for (;;) {
    try {
      io->ioc.run();  // returns when stop() stops the io_context
      return;
    } catch (...) {
      ++errors;  // the handler that threw is gone (and its session with it)
    }
  }
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::check_listen(const std::string& listen) { return parse_listen(listen).status(); }

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& listen, Handlers h, Options opts) {
  if (!h.metrics || !h.health) {
    return Status::InvalidArgument("HTTP server: both handlers (metrics, health) are required");
  }
  if (opts.max_connections == 0 || opts.max_header_bytes == 0 || opts.read_timeout.count() <= 0 ||
      opts.write_timeout.count() <= 0) {
    return Status::InvalidArgument("HTTP server: limits and timeouts must be positive");
  }
  Result<tcp::endpoint> ep = parse_listen(listen);
  if (!ep.ok()) return ep.status();
  try {
    auto impl = std::make_unique<Impl>();
    impl->handlers = std::move(h);
    impl->opts = opts;
    impl->io = std::make_unique<Impl::Io>();
    tcp::acceptor& acc = impl->io->acceptor;
    beast::error_code ec;
    auto fail = [&](std::string_view step) {
      return Status::Io("HTTP server: " + std::string(step) + " " + listen + ": " + ec.message());
    };
    if (acc.open(ep->protocol(), ec); ec) return fail("socket for");
    if (acc.set_option(asio::socket_base::reuse_address(true), ec); ec) return fail("SO_REUSEADDR on");
    if (acc.bind(*ep, ec); ec) return fail("cannot bind");
    if (acc.listen(asio::socket_base::max_listen_connections, ec); ec) return fail("cannot listen on");
    const tcp::endpoint local = acc.local_endpoint(ec);
    if (ec) return fail("getsockname of");
    impl->port = local.port();
    impl->do_accept();
    // The server owns the Impl before the thread exists: if the thread
    // cannot start, its destructor still tears everything down.
    std::unique_ptr<HttpServer> srv(new HttpServer(std::move(impl)));
    Impl* raw = srv->impl_.get();
    srv->impl_->thread = std::thread([raw] { raw->run(); });
    return srv;
  } catch (const std::exception& e) {
    return Status::Internal("HTTP server on " + listen + ": " + e.what());
  }
}

uint16_t HttpServer::port() const { return impl_->port; }

void HttpServer::stop() {
  std::lock_guard<std::mutex> lock(impl_->stop_mu);
  if (!impl_->io) return;
  assert(std::this_thread::get_id() != impl_->thread.get_id() && "HttpServer::stop() from a handler");
  impl_->io->ioc.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->io.reset();  // closes the listening socket and every connection
}

HttpStats HttpServer::stats() const {
  HttpStats s;
  s.requests = impl_->requests.load(std::memory_order_relaxed);
  s.errors = impl_->errors.load(std::memory_order_relaxed);
  s.rejected_connections = impl_->rejected.load(std::memory_order_relaxed);
  s.timeouts = impl_->timeouts.load(std::memory_order_relaxed);
  return s;
}

}  // namespace sb::metrics

// node/metrics/http_server.h: the operators' HTTP endpoint of sb-node.
//
//   GET  /metrics  200, Content-Type "text/plain; version=0.0.4;
//                  charset=utf-8", body = Handlers::metrics()
//   GET  /health   200 "ready\n" when Handlers::health(&why) is true, else
//                  503 with body why + "\n" ("not ready\n" if why is empty)
//   HEAD on both   the same status and headers (Content-Length of the body
//                  GET would return), no body; no answer to a HEAD request
//                  has a body, the 400/413/431 below included
//   other paths    404;  other methods on the two paths: 405 + "Allow: GET, HEAD"
//   a handler that throws: 500 "internal error\n" (counted in errors)
// A query string ("/metrics?x=1") is ignored; the absolute form of the
// target ("http://host:9100/metrics", RFC 9112 3.2.2) is served as its
// path. HTTP/1.1 keep-alive (and HTTP/1.0 "Connection: keep-alive") is
// honoured.
//
// Contract
//   - ONE background thread with its own io_context serves every
//     connection; start() binds and listens on the caller's thread (so
//     address errors come back as a Status), then starts that thread.
//   - THE HANDLERS RUN ON THE SERVER THREAD, one call at a time, never on
//     the caller's thread. They must be thread-safe with respect to the
//     data plane and the control thread whose state they read: read
//     counters that lcores publish (atomics, per-lcore slots summed on
//     read, core/seqlock.h snapshots), never take a lock an lcore takes,
//     and return quickly (a slow handler delays every other client; it is
//     not interrupted). They may throw: the client gets a 500.
//   - Nothing escapes the thread: exceptions from handlers, Asio or Beast
//     are caught and counted (HttpStats::errors); the server keeps serving.
//   - stop() stops the thread, joins it and closes the listening socket and
//     every connection. Idempotent, callable from any thread except the
//     server thread (REQUIRES: not from inside a handler); the destructor
//     calls it. stats() and port() remain valid after stop().
//   - Thread safety: start/stop/stats/port may be called from any thread;
//     stats() reads atomics (each field is exact, the set is not one
//     snapshot).
//
// Limits (an appliance endpoint: a misbehaving client must not hold it)
//   - request header (request line + fields): HttpOptions::max_header_bytes
//     (8 KiB): larger -> 431 and the connection is closed.
//   - request body: max_body_bytes (8 KiB; GET/HEAD carry none): larger ->
//     413 and close. Malformed requests -> 400 and close.
//   - read timeout (5 s) per request: the whole request must arrive within
//     it, and an idle keep-alive connection is closed after it. A request
//     that times out half-read counts in `timeouts`; an idle keep-alive
//     connection closed after at least one response does not. Writing a
//     response has its own write_timeout (5 s), counted in `timeouts` too.
//   - at most max_connections (64) connections at once: further ones are
//     accepted, answered 503 "too many connections" (Retry-After: 1, one
//     non-blocking write: best effort) and closed at once, counted in
//     rejected_connections. A
//     failing accept() (EMFILE, ...) is counted in errors and retried
//     after 100 ms.
//   - IPv4 only, plain HTTP (no TLS, no authentication): bind it to a
//     management address.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"

namespace sb::metrics {

struct HttpHandlers {
  // The Prometheus text body (node/metrics/prom_text.h builds it).
  std::function<std::string()> metrics;
  // true: ready. false: not ready; *why (never null, empty on entry) says
  // why, in one line, for the operator.
  std::function<bool(std::string* why)> health;
};

struct HttpOptions {
  std::chrono::milliseconds read_timeout{5000};
  std::chrono::milliseconds write_timeout{5000};
  size_t max_connections = 64;
  uint32_t max_header_bytes = 8 * 1024;
  uint64_t max_body_bytes = 8 * 1024;
};

struct HttpStats {
  uint64_t requests = 0;              // requests parsed and answered (any status)
  uint64_t errors = 0;                // 400/413/431/500 answers, I/O errors (a reset mid-request or
                                      // mid-answer; not one between requests), caught exceptions
  uint64_t rejected_connections = 0;  // answered 503 and closed at accept: max_connections reached
  uint64_t timeouts = 0;              // half-read requests and slow writes cut off
};

class HttpServer {
 public:
  using Handlers = HttpHandlers;
  using Options = HttpOptions;

  // listen: "ADDR:PORT", ADDR a dotted-quad IPv4 address, PORT 0..65535
  // (0: an ephemeral port, see port()). Errors: kInvalidArgument for a
  // malformed listen string, missing handlers or a zero limit; kIo when the
  // address cannot be bound (in use, not local, privileged port), naming it.
  static Result<std::unique_ptr<HttpServer>> start(const std::string& listen, Handlers h,
                                                   Options opts = {});
  // The listen-string check start() makes, without binding: Ok or the same
  // kInvalidArgument. sb-node validates node.metrics with it before EAL
  // init, so a malformed address is a configuration error (exit 3).
  static Status check_listen(const std::string& listen);

  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;  // the bound port (the ephemeral one for PORT 0)
  void stop();
  HttpStats stats() const;

  struct Impl;  // node/metrics/http_server.cc; keeps Boost out of this header

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sb::metrics

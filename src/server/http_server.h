// HttpServer: the asynchronous HTTP/1.1 transport (Boost.Beast on Asio, C++20 coroutines).
//
// A few threads run one io_context; each connection is one coroutine on its own strand, so
// thousands of idle or streaming connections cost a coroutine frame and a socket each, never a
// thread. Per connection: keep-alive, request size limits (413 before the body is read when
// Content-Length says so, "Expect: 100-continue" honoured; 431 for headers), read/idle/write
// timeouts, a cap on open connections (429 with Retry-After beyond it), streamed
// chunked replies (SSE), and a watch on the socket while a reply is being produced so a client
// that disconnects cancels its request at once.
//
// Shutdown (begin_shutdown, SIGTERM/SIGINT when installed): stop accepting, close idle
// connections, let in-flight replies finish for up to drain_timeout_s, then cancel what is left,
// close everything and return from wait().
// This file must not know about routes, JSON or generation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "server/http_types.h"

namespace fg::server {

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0: an ephemeral port (see HttpServer::port())
  int threads = 2;
  size_t max_body_bytes = 8u << 20;
  size_t max_header_bytes = 16u << 10;
  // Open connections at most; one more is answered 429 (Retry-After) and closed at once.
  int64_t max_connections = 4096;
  double read_timeout_s = 30.0;   // one request, first byte to last
  double idle_timeout_s = 75.0;   // a keep-alive connection waiting for its next request
  double write_timeout_s = 60.0;  // one write to a slow client
  double drain_timeout_s = 30.0;  // shutdown: how long in-flight replies may still run
  // Builds the error reply for transport-level failures (malformed HTTP, body too large,
  // shutting down) so each API can answer in its own error shape. Required.
  std::function<HttpResponse(int status, const std::string& message, const std::string& path)> error_reply;
};

class HttpServer {
 public:
  HttpServer(HttpServerConfig config, RequestHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens, then runs the threads. kIo (with the address) when the bind fails.
  Status start();
  // The bound port (useful with port 0).
  uint16_t port() const;
  // SIGTERM and SIGINT start a graceful shutdown. Call after start().
  void install_signal_handlers();
  // Thread-safe; idempotent.
  void begin_shutdown();
  // Blocks until the server has shut down and its threads have exited.
  void wait();

  bool draining() const;

  struct Impl;  // implementation detail (http_server.cc)
  int64_t open_connections() const;
  // Replies still being produced (a reply source started and not finished).
  int64_t active_replies() const;
  // Connections answered 429 because --max-connections were open.
  int64_t refused_connections() const;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fg::server

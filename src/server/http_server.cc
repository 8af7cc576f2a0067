// The Beast/Asio HTTP/1.1 transport (see http_server.h for what it promises).
//
// Each connection is a coroutine on its own strand. While a reply is being produced the
// connection waits on one timer (`wake_`) that three things cancel: the reply source having new
// output, the socket watch seeing the peer leave, and shutdown. Everything that touches a session
// runs on its strand, so a session has no locks.
#include "server/http_server.h"  // (via http_types.h) <utility> before Boost 1.74 asio, whose awaitable.hpp needs std::exchange

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <limits>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/http_request_parser.h"

namespace fg::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

namespace {

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

// Thousands of streaming connections need thousands of descriptors; the soft limit is often 1024.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

constexpr size_t kLingerDiscardBytes = 64u << 20;  // read at most this much of a refused body

}  // namespace

class Session;

// Wakers may be called from engine threads after the server is gone; they post only while alive.
struct PostGuard {
  std::mutex mu;
  bool alive = true;
};

struct HttpServer::Impl {
  Impl(HttpServerConfig c, RequestHandler h)
      : cfg(std::move(c)), handler(std::move(h)), ioc(std::max(1, cfg.threads)), acceptor(ioc), drain_timer(ioc) {}

  net::awaitable<void> accept_loop();
  net::awaitable<void> refuse_connection(tcp::socket socket);
  void session_ended(uint64_t id);
  template <class F>
  void for_each_session(F&& f);
  void stop_if_drained();
  void on_drain_timeout();

  HttpServerConfig cfg;
  RequestHandler handler;
  net::io_context ioc;
  tcp::acceptor acceptor;
  net::steady_timer drain_timer;
  std::unique_ptr<net::signal_set> signals;
  std::vector<std::thread> threads;
  std::atomic<bool> draining{false};
  std::atomic<int64_t> active_replies{0};
  std::atomic<int64_t> refused_connections{0};
  mutable std::mutex mu;
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions;  // guarded by mu
  uint64_t next_session = 0;                                      // guarded by mu
  uint16_t bound_port = 0;
  std::shared_ptr<PostGuard> guard = std::make_shared<PostGuard>();
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  // The server's Impl outlives every session: sessions are coroutine frames owned by its io_context.
  Session(HttpServer::Impl* server, tcp::socket socket, uint64_t id)
      : server_(server),
        stream_(std::move(socket)),
        wake_(stream_.get_executor()),
        read_timer_(stream_.get_executor()),
        id_(id) {}

  net::any_io_executor executor() { return stream_.get_executor(); }
  uint64_t id() const { return id_; }
  net::awaitable<void> run();

  // Both run on the session's strand.
  void close_if_idle() {
    if (idle_) stream_.cancel();
  }
  void abort_reply() {
    if (source_) source_->cancel();
    close_if_idle();
    wake_.cancel();
  }

 private:
  net::awaitable<bool> serve_one(bool first);
  net::awaitable<void> send(http::response<http::string_body> res);
  net::awaitable<void> send_error(int status, const std::string& message, const std::string& path);
  net::awaitable<void> linger_close();
  net::awaitable<void> produce(Reply& reply, unsigned version, bool keep_alive);
  std::function<void()> make_waker();
  void arm_read_timer(double seconds_from_now);
  void start_watch();
  net::awaitable<void> stop_watch();
  net::awaitable<void> wait_wake() {
    error_code ec;
    wake_.expires_at(net::steady_timer::time_point::max());
    co_await wake_.async_wait(net::redirect_error(net::use_awaitable, ec));
  }

  HttpServer::Impl* server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  net::steady_timer wake_;
  // Read deadline. Beast's own stream timeout closes the socket, which would leave no way to
  // answer 408; this timer only cancels the pending read.
  net::steady_timer read_timer_;
  bool read_timed_out_ = false;
  uint64_t id_;
  bool idle_ = true;       // waiting for (or reading) a request
  bool watching_ = false;  // a read that detects the peer leaving is pending
  bool peer_gone_ = false;
  ReplySource* source_ = nullptr;
};

static net::awaitable<void> run_session(std::shared_ptr<Session> s) {
  co_await s->run();
}

net::awaitable<void> Session::run() {
  bool first = true;
  try {
    while (!server_->draining.load() && co_await serve_one(first)) first = false;
  } catch (const std::exception& e) {
    spdlog::warn("http: connection {} ended by an exception: {}", id_, e.what());
  }
  error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream_.socket().close(ec);
  server_->session_ended(id_);
}

net::awaitable<void> Session::send(http::response<http::string_body> res) {
  error_code ec;
  res.set(http::field::server, "flashgen");
  res.prepare_payload();
  stream_.expires_after(seconds(server_->cfg.write_timeout_s));
  co_await http::async_write(stream_, res, net::redirect_error(net::use_awaitable, ec));
  if (ec) peer_gone_ = true;
}

net::awaitable<void> Session::send_error(int status, const std::string& message, const std::string& path) {
  HttpResponse r = server_->cfg.error_reply(status, message, path);
  http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
  res.set(http::field::content_type, r.content_type);
  for (auto& [k, v] : r.headers) res.set(k, v);
  res.keep_alive(false);
  res.body() = std::move(r.body);
  co_await send(std::move(res));
}

// After refusing a request whose body was not read: stop sending, then read and drop what the
// client still sends (bounded), so it can finish writing and read our answer instead of a reset.
net::awaitable<void> Session::linger_close() {
  error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  std::vector<char> sink(64 << 10);
  size_t total = 0;
  stream_.expires_after(seconds(2.0));
  while (total < kLingerDiscardBytes) {
    size_t n = co_await stream_.async_read_some(net::buffer(sink), net::redirect_error(net::use_awaitable, ec));
    if (ec) break;
    total += n;
  }
}

void Session::arm_read_timer(double seconds_from_now) {
  read_timed_out_ = false;
  read_timer_.expires_after(seconds(seconds_from_now));
  std::weak_ptr<Session> weak = shared_from_this();
  read_timer_.async_wait([weak](error_code ec) {
    if (ec) return;  // re-armed or cancelled
    if (auto s = weak.lock()) {
      s->read_timed_out_ = true;
      error_code ignored;
      s->stream_.socket().cancel(ignored);
    }
  });
}

std::function<void()> Session::make_waker() {
  // The waker holds no executor: it may be destroyed on an engine thread after the io_context is
  // gone, and a strand executor must not outlive its service (destroying one then is undefined;
  // UBSan caught it at shutdown). While the server is alive it posts to the io_context, and that
  // handler, on an io thread, posts the wake to the session's strand.
  std::weak_ptr<Session> weak = shared_from_this();
  net::io_context* ioc = &server_->ioc;
  std::shared_ptr<PostGuard> guard = server_->guard;
  return [weak, ioc, guard] {
    std::lock_guard<std::mutex> lock(guard->mu);
    if (!guard->alive) return;
    net::post(*ioc, [weak] {
      if (auto s = weak.lock()) net::post(s->stream_.get_executor(), [s] { s->wake_.cancel(); });
    });
  };
}

// A read on the idle socket while a reply is produced: it completes only when the peer closes
// (error), or sends the next pipelined request (kept in buffer_ for the next parse).
void Session::start_watch() {
  watching_ = true;
  auto self = shared_from_this();
  stream_.socket().async_read_some(buffer_.prepare(4096), [self](error_code ec, size_t n) {
    self->watching_ = false;
    if (!ec) {
      self->buffer_.commit(n);
    } else if (ec != net::error::operation_aborted) {
      self->peer_gone_ = true;
    }
    self->wake_.cancel();
  });
}

net::awaitable<void> Session::stop_watch() {
  if (!watching_) co_return;
  error_code ec;
  stream_.socket().cancel(ec);
  while (watching_) co_await wait_wake();
}

net::awaitable<void> Session::produce(Reply& reply, unsigned version, bool keep_alive) {
  ReplySource& src = *reply.source;
  source_ = &src;
  ++server_->active_replies;
  error_code ec;
  if (reply.streamed) {
    http::response<http::empty_body> res{static_cast<http::status>(reply.head.status), version};
    res.set(http::field::server, "flashgen");
    res.set(http::field::content_type, reply.head.content_type);
    for (auto& [k, v] : reply.head.headers) res.set(k, v);
    res.keep_alive(keep_alive);
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    stream_.expires_after(seconds(server_->cfg.write_timeout_s));
    co_await http::async_write_header(stream_, sr, net::redirect_error(net::use_awaitable, ec));
    if (ec) peer_gone_ = true;
  }
  src.start(make_waker());
  if (!peer_gone_) start_watch();
  std::string out, body;
  bool cancelled = false;
  for (;;) {
    out.clear();
    const bool done = src.poll(out);
    bool suspended = false;  // wakes during a suspension are lost: poll again before waiting
    if (!out.empty()) {
      if (!reply.streamed) {
        body += out;
      } else if (!peer_gone_) {
        stream_.expires_after(seconds(server_->cfg.write_timeout_s));
        co_await net::async_write(stream_, http::make_chunk(net::buffer(out)),
                                  net::redirect_error(net::use_awaitable, ec));
        suspended = true;
        if (ec) peer_gone_ = true;
      }
    }
    if (done) break;
    if (peer_gone_ && !cancelled) {
      cancelled = true;
      src.cancel();
      continue;
    }
    if (!suspended) co_await wait_wake();
  }
  co_await stop_watch();
  source_ = nullptr;
  --server_->active_replies;
  if (peer_gone_) co_return;
  if (reply.streamed) {
    stream_.expires_after(seconds(server_->cfg.write_timeout_s));
    co_await net::async_write(stream_, http::make_chunk_last(), net::redirect_error(net::use_awaitable, ec));
    if (ec) peer_gone_ = true;
    co_return;
  }
  HttpResponse head = src.final_head();
  http::response<http::string_body> res{static_cast<http::status>(head.status), version};
  res.set(http::field::content_type, head.content_type);
  for (auto& [k, v] : head.headers) res.set(k, v);
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  co_await send(std::move(res));
}

// Reads and answers one request. Returns whether the connection stays open.
net::awaitable<bool> Session::serve_one(bool first) {
  const HttpServerConfig& cfg = server_->cfg;
  idle_ = true;
  RequestParser parser;
  configure_request_parser(parser, cfg);
  error_code ec;
  stream_.expires_never();
  arm_read_timer(first ? cfg.read_timeout_s : cfg.idle_timeout_s);
  co_await http::async_read_header(stream_, buffer_, parser, net::redirect_error(net::use_awaitable, ec));
  if (!ec && content_length_too_large(parser, cfg)) ec = http::error::body_limit;
  if (!ec && !parser.is_done()) {
    limit_request_body(parser, cfg);
    idle_ = false;
    arm_read_timer(cfg.read_timeout_s);
    auto& hdr = parser.get();
    if (beast::iequals(hdr[http::field::expect], "100-continue")) {
      http::response<http::empty_body> cont{http::status::continue_, hdr.version()};
      co_await http::async_write(stream_, cont, net::redirect_error(net::use_awaitable, ec));
    }
    if (!ec) co_await http::async_read(stream_, buffer_, parser, net::redirect_error(net::use_awaitable, ec));
  }
  idle_ = false;
  read_timer_.cancel();
  if (ec == net::error::operation_aborted && read_timed_out_) ec = beast::error::timeout;
  std::string path = request_path(parser);
  if (ec) {
    const TransportError te = transport_error_for(ec, parser, buffer_.size() > 0, cfg);
    if (te.answer) {
      co_await send_error(te.status, te.message, path);
      // The unread rest of a refused request: drain it so the client reads our answer.
      if (te.status == 413 || te.status == 431) co_await linger_close();
    }
    co_return false;
  }

  const bool msg_keep_alive = parser.get().keep_alive();
  const unsigned version = parser.get().version();
  HttpRequest req = release_request(parser, path);
  {
    error_code rec;
    auto ep = stream_.socket().remote_endpoint(rec);
    if (!rec) req.remote = ep.address().to_string() + ":" + std::to_string(ep.port());
  }
  const bool keep_alive = msg_keep_alive && !server_->draining.load();

  Reply reply;
  std::string handler_error;
  try {
    reply = server_->handler(std::move(req));
  } catch (const std::exception& e) {
    handler_error = e.what();
  }
  if (!handler_error.empty()) {
    spdlog::error("http: handler for {} threw: {}", path, handler_error);
    co_await send_error(500, "Internal error: " + handler_error, path);
    co_return false;
  }
  if (reply.source) {
    co_await produce(reply, version, keep_alive);
  } else {
    http::response<http::string_body> res{static_cast<http::status>(reply.head.status), version};
    res.set(http::field::content_type, reply.head.content_type);
    for (auto& [k, v] : reply.head.headers) res.set(k, v);
    res.keep_alive(keep_alive);
    res.body() = std::move(reply.head.body);
    co_await send(std::move(res));
  }
  co_return keep_alive && !peer_gone_;
}

net::awaitable<void> HttpServer::Impl::accept_loop() {
  net::steady_timer backoff(ioc);
  for (;;) {
    tcp::socket socket(net::make_strand(ioc));
    error_code ec;
    co_await acceptor.async_accept(socket, net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (!acceptor.is_open() || draining.load()) co_return;
      // Out of descriptors or a transient error: back off instead of spinning.
      spdlog::warn("http: accept failed: {}", ec.message());
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(net::redirect_error(net::use_awaitable, ec));
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    std::shared_ptr<Session> session;
    bool full = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      full = int64_t(sessions.size()) >= cfg.max_connections;
      if (!full) {
        session = std::make_shared<Session>(this, std::move(socket), next_session++);
        sessions.emplace(session->id(), session);
      }
    }
    if (full) {
      auto ex = socket.get_executor();
      net::co_spawn(ex, refuse_connection(std::move(socket)), net::detached);
      continue;
    }
    net::co_spawn(session->executor(), run_session(session), net::detached);
  }
}

// Over --max-connections: answer 429 before reading anything, then close. The answer goes out
// at once (a client is usually still sending), and what the client sends meanwhile is read and
// dropped for a moment so it sees the answer rather than a reset. Refused connections are few
// and short-lived: they hold a descriptor for about a second at most.
net::awaitable<void> HttpServer::Impl::refuse_connection(tcp::socket socket) {
  ++refused_connections;
  beast::tcp_stream stream(std::move(socket));
  HttpResponse r = cfg.error_reply(429,
                                   "The server is at its limit of " + std::to_string(cfg.max_connections) +
                                       " open connections (--max-connections); retry later.",
                                   "");
  http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
  res.set(http::field::server, "flashgen");
  res.set(http::field::content_type, r.content_type);
  for (auto& [k, v] : r.headers) res.set(k, v);
  res.keep_alive(false);
  res.body() = std::move(r.body);
  res.prepare_payload();
  error_code ec;
  stream.expires_after(std::chrono::seconds(1));
  co_await http::async_write(stream, res, net::redirect_error(net::use_awaitable, ec));
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  std::array<char, 4096> sink;
  while (!ec) co_await stream.async_read_some(net::buffer(sink), net::redirect_error(net::use_awaitable, ec));
  stream.socket().close(ec);
}

template <class F>
void HttpServer::Impl::for_each_session(F&& f) {
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [id, weak] : sessions)
      if (auto s = weak.lock()) live.push_back(std::move(s));
  }
  for (auto& s : live) net::post(s->executor(), [s, f] { f(*s); });
}

void HttpServer::Impl::session_ended(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu);
    sessions.erase(id);
  }
  if (draining.load()) stop_if_drained();
}

void HttpServer::Impl::stop_if_drained() {
  std::lock_guard<std::mutex> lock(mu);
  if (sessions.empty()) ioc.stop();
}

void HttpServer::Impl::on_drain_timeout() {
  spdlog::warn("http: drain timeout ({} s) reached; cancelling {} in-flight replies", cfg.drain_timeout_s,
               active_replies.load());
  for_each_session([](Session& s) { s.abort_reply(); });
  // Cancelled replies end within a step or two; never wait on a stuck client forever.
  drain_timer.expires_after(std::chrono::seconds(5));
  drain_timer.async_wait([this](error_code ec) {
    if (!ec) ioc.stop();
  });
}

HttpServer::HttpServer(HttpServerConfig config, RequestHandler handler)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(handler))) {}

HttpServer::~HttpServer() {
  if (!impl_->threads.empty()) {
    begin_shutdown();
    wait();
  }
  std::lock_guard<std::mutex> lock(impl_->guard->mu);
  impl_->guard->alive = false;
}

Status HttpServer::start() {
  raise_fd_limit();
  Impl& im = *impl_;
  error_code ec;
  auto address = net::ip::make_address(im.cfg.host, ec);
  if (ec) return invalid_argument("--host '" + im.cfg.host + "' is not an IP address: " + ec.message());
  tcp::endpoint ep(address, im.cfg.port);
  im.acceptor.open(ep.protocol(), ec);
  if (!ec) im.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) im.acceptor.bind(ep, ec);
  if (!ec) im.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status(ErrorCode::kIo,
                  "cannot listen on " + im.cfg.host + ":" + std::to_string(im.cfg.port) + ": " + ec.message());
  }
  im.bound_port = im.acceptor.local_endpoint().port();
  net::co_spawn(im.ioc, im.accept_loop(), net::detached);
  for (int i = 0; i < std::max(1, im.cfg.threads); ++i) im.threads.emplace_back([&im] { im.ioc.run(); });
  return Status::ok();
}

uint16_t HttpServer::port() const {
  return impl_->bound_port;
}

void HttpServer::install_signal_handlers() {
  Impl& im = *impl_;
  im.signals = std::make_unique<net::signal_set>(im.ioc, SIGTERM, SIGINT);
  im.signals->async_wait([this](error_code ec, int signo) {
    if (ec) return;
    spdlog::info("http: received {}, draining (up to {} s)", signo == SIGTERM ? "SIGTERM" : "SIGINT",
                 impl_->cfg.drain_timeout_s);
    begin_shutdown();
  });
}

void HttpServer::begin_shutdown() {
  if (impl_->draining.exchange(true)) return;
  Impl* im = impl_.get();
  net::post(im->ioc, [im] {
    error_code ec;
    im->acceptor.close(ec);
    if (im->signals) im->signals->cancel(ec);
    im->for_each_session([](Session& s) { s.close_if_idle(); });
    im->drain_timer.expires_after(seconds(im->cfg.drain_timeout_s));
    im->drain_timer.async_wait([im](error_code e) {
      if (!e) im->on_drain_timeout();
    });
    im->stop_if_drained();
  });
}

void HttpServer::wait() {
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
  impl_->threads.clear();
}

bool HttpServer::draining() const {
  return impl_->draining.load();
}

int64_t HttpServer::open_connections() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return int64_t(impl_->sessions.size());
}

int64_t HttpServer::active_replies() const {
  return impl_->active_replies.load();
}

int64_t HttpServer::refused_connections() const {
  return impl_->refused_connections.load();
}

}  // namespace fg::server

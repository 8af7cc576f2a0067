// A tiny blocking HTTP/1.1 client over POSIX sockets for the server tests: enough to send raw
// bytes (malformed requests, oversized bodies), read chunked SSE replies, and drop a connection
// mid-stream. Loopback only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace fg::server::testing {

struct RawResponse {
  int status = 0;
  std::string headers;  // raw header block, lower-cased
  std::string body;     // de-chunked
  bool complete = false;
};

class TestConnection {
 public:
  // rcvbuf > 0: the socket's receive buffer in bytes, set before connecting (a small one makes
  // the server's writes stall as soon as the client stops reading).
  explicit TestConnection(uint16_t port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
    int one = 1;
    if (fd_ >= 0) setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~TestConnection() { close(); }
  bool ok() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool send_all(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += size_t(n);
    }
    return true;
  }

  // Reads more bytes into buf_ (waits up to timeout_ms); false on EOF/error/timeout.
  bool fill(int timeout_ms = 10000) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return false;
    char tmp[16384];
    ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0) return false;
    buf_.append(tmp, size_t(n));
    return true;
  }

  // Reads one whole response (Content-Length or chunked). With stop_after, returns as soon as
  // the body contains that string (the rest stays unread).
  RawResponse read_response(const std::string& stop_after = "", int timeout_ms = 10000) {
    RawResponse r;
    size_t hend;
    while ((hend = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!fill(timeout_ms)) return r;
    std::string head = buf_.substr(0, hend);
    buf_.erase(0, hend + 4);
    r.status = std::stoi(head.substr(9, 3));
    for (char& c : head) c = char(std::tolower(static_cast<unsigned char>(c)));
    r.headers = head;
    if (r.status == 100) return read_response(stop_after, timeout_ms);
    if (head.find("transfer-encoding: chunked") != std::string::npos) {
      for (;;) {
        size_t le;
        while ((le = buf_.find("\r\n")) == std::string::npos)
          if (!fill(timeout_ms)) return r;
        const size_t len = std::stoul(buf_.substr(0, le), nullptr, 16);
        while (buf_.size() < le + 2 + len + 2)
          if (!fill(timeout_ms)) return r;
        r.body += buf_.substr(le + 2, len);
        buf_.erase(0, le + 2 + len + 2);
        if (len == 0) break;
        if (!stop_after.empty() && r.body.find(stop_after) != std::string::npos) return r;
      }
      r.complete = true;
      return r;
    }
    size_t cl = 0;
    auto p = head.find("content-length: ");
    if (p != std::string::npos) cl = std::stoul(head.substr(p + 16));
    while (buf_.size() < cl)
      if (!fill(timeout_ms)) return r;
    r.body = buf_.substr(0, cl);
    buf_.erase(0, cl);
    r.complete = true;
    return r;
  }

  // Reads and drops whatever arrives until the server closes the connection; true when that
  // (EOF or reset) happens within timeout_ms.
  bool drains_to_close(int timeout_ms = 10000) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    char tmp[65536];
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0) return false;
      if (::recv(fd_, tmp, sizeof(tmp), 0) <= 0) return true;
    }
  }

  // True when the server closed the connection (EOF) within timeout_ms.
  bool closed_by_peer(int timeout_ms = 5000) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return false;
    char tmp[4096];
    ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
    return n <= 0;
  }

 private:
  int fd_ = -1;
  std::string buf_;
};

inline std::string post_request(const std::string& path, const std::string& body, bool keep_alive = true) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n" + (keep_alive ? "" : "Connection: close\r\n") + "\r\n" + body;
}

inline std::string get_request(const std::string& path) {
  return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
}

}  // namespace fg::server::testing

// Transport-neutral HTTP request and reply types: the routes build these and never see Beast, so
// only http_server.cc pays Beast's compile time and the protocol code is testable on its own.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fg::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path plus query, e.g. "/v1/models"
  std::string path;    // target without the query
  std::string content_type;
  std::string authorization;  // the Authorization header, "" when absent
  std::string body;
  std::string remote;  // peer address, for logs
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
};

// A reply whose body is produced later, by generation events (SSE streams, or a JSON body that
// is ready only when generation ends). The transport owns it and drives it from one thread at a
// time (the connection's strand):
//   start(wake) once -> [wake() from any thread] -> poll() ... until poll() returns true.
// cancel() is called when the client goes away or the server stops waiting; the source must then
// finish soon (poll() returning true), without further output being required to reach anyone.
class ReplySource {
 public:
  virtual ~ReplySource() = default;
  // `wake` may be called from any thread, any number of times, also after the source finished.
  virtual void start(std::function<void()> wake) = 0;
  // Appends body bytes ready now to `out`; returns true once the body is complete.
  virtual bool poll(std::string& out) = 0;
  virtual void cancel() = 0;
  // Deferred replies only: the status, content type and headers, valid after poll() returned
  // true (the body is everything poll() appended).
  virtual HttpResponse final_head() { return {}; }
};

struct Reply {
  HttpResponse head;                    // immediate reply, or the head of a streamed one
  std::unique_ptr<ReplySource> source;  // null: `head` is the whole reply
  bool streamed = false;                // true: send `head` now, then the source's output as chunks (SSE);
                                        // false with a source: wait for completion, then send final_head()
};

using RequestHandler = std::function<Reply(HttpRequest&&)>;

}  // namespace fg::server

// Runs one request through an ApiServer the way the transport does (handle, then drive the reply
// source to completion) and checks what must hold for every input: the handler does not throw,
// the status is one the API documents for a client's mistake or success (never 5xx with a backend
// that cannot fail), the body is JSON (or server-sent events of JSON), and nothing stays in flight.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_util.h"
#include "server/api_server.h"

namespace fg::fuzz {

inline bool is_json_or_sse(const std::string& body, bool streamed) {
  if (!streamed) return nlohmann::json::accept(body);
  // "data: {...}\n\n" events (OpenAI, ending with data: [DONE]) or "data:{...}\n\n" (TGI).
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) return false;
    std::string_view ev(body.data() + pos, end - pos);
    if (ev.substr(0, 5) != "data:") return false;
    ev.remove_prefix(5);
    if (!ev.empty() && ev[0] == ' ') ev.remove_prefix(1);
    if (ev != "[DONE]" && !nlohmann::json::accept(ev)) return false;
    pos = end + 2;
  }
  return true;
}

inline void run_api_request(server::ApiServer& api, server::HttpRequest&& req) {
  server::Reply reply = api.handle(std::move(req));
  int status = reply.head.status;
  std::string body = reply.head.body;
  if (reply.source) {
    reply.source->start([] {});
    std::string out;
    bool done = false;
    for (int i = 0; i < 4 && !done; ++i) done = reply.source->poll(out);
    FG_FUZZ_CHECK(done);  // the synchronous backend delivered everything within submit()
    if (reply.streamed) {
      body = reply.head.body + out;
    } else {
      const server::HttpResponse head = reply.source->final_head();
      status = head.status;
      body = out;
    }
  }
  FG_FUZZ_CHECK(status == 200 || status == 400 || status == 401 || status == 404 || status == 405 || status == 413 ||
                status == 422 || status == 429);
  FG_FUZZ_CHECK(is_json_or_sse(body, reply.streamed && status == 200) ||
                reply.head.content_type.rfind("text/plain", 0) == 0);
  reply.source.reset();
  FG_FUZZ_CHECK(api.in_flight() == 0);
}

}  // namespace fg::fuzz

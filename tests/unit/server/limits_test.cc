// The server's security settings and request limits, route by route, without HTTP: the API key
// (401 in each API's shape, /health open, constant-time comparison), prompt and output token caps,
// stop-string size, JSON nesting, the concurrent and queued request caps (429 with Retry-After),
// and the 4xx each gives. Transport limits (connections, header and body size, timeouts) are in
// http_test.cc.
#include <gtest/gtest.h>

#include <condition_variable>
#include <nlohmann/json.hpp>

#include "server/api_server.h"
#include "server/request_body.h"
#include "unit/server/fake_backend.h"

namespace fg::server {
namespace {

using nlohmann::json;
using testing::FakeBackend;
using testing::run_reply_source;

HttpRequest request(const std::string& method, const std::string& path, const std::string& body = "",
                    const std::string& authorization = "") {
  HttpRequest r;
  r.method = method;
  r.path = r.target = path;
  r.body = body;
  r.authorization = authorization;
  return r;
}

// Drives a reply to completion (the transport's loop, with a condition variable as the waker).
std::pair<int, std::string> finish(Reply& r) {
  if (!r.source) return {r.head.status, r.head.body};
  HttpResponse head;
  std::string body = run_reply_source(r, &head);
  return {head.status, body};
}

std::string header(const Reply& r, const std::string& name) {
  for (const auto& [k, v] : r.head.headers)
    if (k == name) return v;
  return "";
}

const std::string kComp = R"({"model":"fake-model","prompt":"hi","max_tokens":2})";

class LimitsTest : public ::testing::Test {
 protected:
  LimitsTest() : backend_(FakeBackend::Options{}) {}
  std::unique_ptr<ApiServer> make(ApiServerConfig c) {
    c.log_requests = false;
    return std::make_unique<ApiServer>(backend_, c);
  }
  FakeBackend backend_;
};

TEST_F(LimitsTest, ApiKeyGuardsEveryRouteButHealth) {
  ApiServerConfig c;
  c.api_key = "sk-secret";
  auto api = make(c);
  for (const char* path : {"/v1/models", "/metrics", "/info", "/nope"}) {
    Reply r = api->handle(request("GET", path));
    EXPECT_EQ(r.head.status, 401) << path;
    EXPECT_EQ(header(r, "WWW-Authenticate"), "Bearer") << path;
  }
  // OpenAI shape on OpenAI routes, TGI shape on TGI routes; nothing reached the backend.
  Reply o = api->handle(request("POST", "/v1/completions", kComp));
  EXPECT_EQ(o.head.status, 401);
  EXPECT_EQ(json::parse(o.head.body)["error"]["code"], "invalid_api_key");
  Reply t = api->handle(request("POST", "/generate", R"({"inputs":"hi"})", "Bearer sk-wrong"));
  EXPECT_EQ(t.head.status, 401);
  EXPECT_TRUE(json::parse(t.head.body)["error"].is_string());
  EXPECT_EQ(backend_.submitted(), 0);
  // /health stays open for load balancers.
  EXPECT_EQ(api->handle(request("GET", "/health")).head.status, 200);
  // The right key, with the scheme in any case and stray spaces, passes.
  Reply ok = api->handle(request("POST", "/v1/completions", kComp, "Bearer sk-secret"));
  EXPECT_EQ(finish(ok).first, 200);
  EXPECT_EQ(api->handle(request("GET", "/v1/models", "", "bearer  sk-secret ")).head.status, 200);
  // Near misses are refused: a prefix, a longer key, another scheme, the bare key.
  for (const char* auth : {"Bearer sk-secre", "Bearer sk-secret2", "Basic sk-secret", "sk-secret", "Bearer"})
    EXPECT_EQ(api->handle(request("GET", "/v1/models", "", auth)).head.status, 401) << auth;
}

TEST_F(LimitsTest, WithoutAKeyNothingIsRequired) {
  auto api = make({});
  EXPECT_EQ(api->handle(request("GET", "/v1/models", "", "Bearer whatever")).head.status, 200);
  EXPECT_EQ(api->handle(request("GET", "/metrics")).head.status, 200);
}

TEST_F(LimitsTest, PromptTokenCapIs400WithTheFlagNamed) {
  ApiServerConfig c;
  c.limits.max_prompt_tokens = 8;
  auto api = make(c);
  Reply r = api->handle(request("POST", "/v1/completions", R"({"model":"m","prompt":"0123456789"})"));
  ASSERT_EQ(r.head.status, 400);
  const json e = json::parse(r.head.body)["error"];
  EXPECT_EQ(e["code"], "context_length_exceeded");
  EXPECT_NE(e["message"].get<std::string>().find("--max-prompt-tokens"), std::string::npos);
  // TGI: 422; and /info reports the cap.
  EXPECT_EQ(api->handle(request("POST", "/generate", R"({"inputs":"0123456789"})")).head.status, 422);
  EXPECT_EQ(json::parse(api->handle(request("GET", "/info")).head.body)["max_input_tokens"], 8);
  // Within the cap it runs (7 bytes + BOS).
  Reply ok = api->handle(request("POST", "/v1/completions", R"({"model":"m","prompt":"0123456","max_tokens":1})"));
  EXPECT_EQ(finish(ok).first, 200);
}

TEST_F(LimitsTest, OutputTokenCapRefusesLargerAsksAndCapsDefaults) {
  ApiServerConfig c;
  c.limits.max_output_tokens = 5;
  auto api = make(c);
  Reply r = api->handle(request("POST", "/v1/completions", R"({"model":"m","prompt":"hi","max_tokens":6})"));
  ASSERT_EQ(r.head.status, 400);
  EXPECT_EQ(json::parse(r.head.body)["error"]["param"], "max_tokens");
  EXPECT_EQ(
      api->handle(request("POST", "/generate", R"({"inputs":"hi","parameters":{"max_new_tokens":6}})")).head.status,
      422);
  // Chat's default (no limit) and TGI's default (100) are capped to 5 tokens.
  Reply chat = api->handle(
      request("POST", "/v1/chat/completions", R"({"model":"m","messages":[{"role":"user","content":"hi"}]})"));
  auto [status, body] = finish(chat);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(json::parse(body)["usage"]["completion_tokens"], 5);
  Reply tgi = api->handle(request("POST", "/generate", R"({"inputs":"hi","parameters":{"details":true}})"));
  auto [tstatus, tbody] = finish(tgi);
  ASSERT_EQ(tstatus, 200);
  EXPECT_EQ(json::parse(tbody)["details"]["generated_tokens"], 5);
}

TEST_F(LimitsTest, LongStopStringsAreRefused) {
  ApiServerConfig c;
  c.limits.max_stop_bytes = 16;
  auto api = make(c);
  const std::string long_stop(17, 's');
  Reply r = api->handle(
      request("POST", "/v1/completions", json{{"model", "m"}, {"prompt", "hi"}, {"stop", {"ok", long_stop}}}.dump()));
  ASSERT_EQ(r.head.status, 400);
  EXPECT_EQ(json::parse(r.head.body)["error"]["param"], "stop");
  Reply t =
      api->handle(request("POST", "/generate", json{{"inputs", "hi"}, {"parameters", {{"stop", {long_stop}}}}}.dump()));
  EXPECT_EQ(t.head.status, 422);
  Reply ok = api->handle(request("POST", "/v1/completions",
                                 json{{"model", "m"}, {"prompt", "hi"}, {"stop", std::string(16, 's')}}.dump()));
  EXPECT_EQ(finish(ok).first, 200);
}

TEST_F(LimitsTest, DeeplyNestedBodiesAreRefusedBeforeParsing) {
  auto api = make({});
  const std::string deep = R"({"model":"m","prompt":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  Reply r = api->handle(request("POST", "/v1/completions", deep));
  ASSERT_EQ(r.head.status, 400);
  EXPECT_NE(json::parse(r.head.body)["error"]["message"].get<std::string>().find("deeper than 64"), std::string::npos);
  // Brackets inside strings do not count; escaped quotes do not end a string.
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[\"[[[[", "b": [[1]]})"), 3);
  EXPECT_EQ(json_nesting_depth("[]"), 1);
  EXPECT_EQ(json_nesting_depth("\"[[\""), 0);
  // The chat route (whose messages reach the template engine) is guarded the same way.
  std::string msg = R"({"model":"m","messages":[{"role":"user","content":"x","extra":)" + std::string(70, '[') +
                    std::string(70, ']') + "}]}";
  EXPECT_EQ(api->handle(request("POST", "/v1/chat/completions", msg)).head.status, 400);
}

TEST_F(LimitsTest, ChatTemplateLimitIs400NotRetryLater) {
  auto api = make({});
  for (const char* path : {"/v1/chat/completions", "/tokenize"}) {
    Reply r = api->handle(
        request("POST", path, R"({"model":"m","messages":[{"role":"user","content":"__template_limit__"}]})"));
    ASSERT_EQ(r.head.status, 400) << path << " " << r.head.body;
    EXPECT_EQ(json::parse(r.head.body)["error"]["code"], "chat_template_limit") << path;
    EXPECT_EQ(header(r, "Retry-After"), "") << path;
  }
}

TEST_F(LimitsTest, ConcurrentCapAnswers429WithRetryAfter) {
  ApiServerConfig c;
  c.max_concurrent_requests = 1;
  auto api = make(c);
  backend_.set_tick_us(20000);
  Reply held =
      api->handle(request("POST", "/v1/completions", R"({"model":"m","prompt":"hi","max_tokens":300,"stream":true})"));
  ASSERT_TRUE(held.source);
  for (const char* path : {"/v1/completions", "/generate"}) {
    Reply r = api->handle(request("POST", path, path[1] == 'v' ? kComp : R"({"inputs":"hi"})"));
    EXPECT_EQ(r.head.status, 429) << path;
    EXPECT_EQ(header(r, "Retry-After"), "1") << path;
  }
  held.source->cancel();
  finish(held);
  held.source.reset();
  EXPECT_EQ(api->in_flight(), 0);
  Reply again = api->handle(request("POST", "/v1/completions", kComp));
  EXPECT_EQ(finish(again).first, 200);
}

TEST_F(LimitsTest, QueuedCapCountsRequestsThatHaveNotStarted) {
  ApiServerConfig c;
  c.max_queued_requests = 2;
  auto api = make(c);
  backend_.set_tick_us(200000);  // the first token takes 0.2 s: requests stay queued meanwhile
  std::vector<Reply> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(
        api->handle(request("POST", "/v1/completions", R"({"model":"m","prompt":"hi","max_tokens":2,"stream":true})")));
    ASSERT_TRUE(held.back().source);
  }
  Reply r = api->handle(request("POST", "/v1/completions", kComp));
  EXPECT_EQ(r.head.status, 429);
  EXPECT_EQ(json::parse(r.head.body)["error"]["code"], "queue_full");
  EXPECT_NE(json::parse(r.head.body)["error"]["message"].get<std::string>().find("--max-queued-requests"),
            std::string::npos);
  EXPECT_EQ(header(r, "Retry-After"), "1");
  // Once they produce output they no longer count as queued.
  backend_.set_tick_us(200);
  for (Reply& h : held) EXPECT_EQ(finish(h).first, 200);
  held.clear();
  Reply ok = api->handle(request("POST", "/v1/completions", kComp));
  EXPECT_EQ(finish(ok).first, 200);
  EXPECT_NE(api->handle(request("GET", "/metrics")).head.body.find("flashgen_requests_queued 0"), std::string::npos);
}

}  // namespace
}  // namespace fg::server

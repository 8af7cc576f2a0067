// ApiServer routes against the FakeBackend, without HTTP: validation errors and their shapes,
// OpenAI and TGI reply objects (whole and streamed), usage, stop strings, seeds, queue limits,
// cancellation, /metrics, /tokenize, /detokenize.
#include <gtest/gtest.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "server/api_server.h"
#include "server/utf8.h"
#include "unit/server/fake_backend.h"

namespace fg::server {
namespace {

using nlohmann::json;
using testing::FakeBackend;
using testing::run_reply_source;

HttpRequest post(const std::string& path, const std::string& body) {
  HttpRequest r;
  r.method = "POST";
  r.path = r.target = path;
  r.body = body;
  return r;
}

HttpRequest get(const std::string& path) {
  HttpRequest r;
  r.method = "GET";
  r.path = r.target = path;
  return r;
}

// A complete (non-streamed) reply of `api`: status and parsed body.
std::pair<int, json> call_api(ApiServer& api, HttpRequest req) {
  Reply r = api.handle(std::move(req));
  if (!r.source) return {r.head.status, json::parse(r.head.body)};
  HttpResponse head;
  std::string body = run_reply_source(r, &head);
  return {head.status, json::parse(body)};
}

class ApiTest : public ::testing::Test {
 protected:
  ApiTest() : backend_(FakeBackend::Options{}), api_(backend_, config()) {}
  static ApiServerConfig config() {
    ApiServerConfig c;
    c.log_requests = false;
    return c;
  }
  std::pair<int, json> call(HttpRequest req) { return call_api(api_, std::move(req)); }
  FakeBackend backend_;
  ApiServer api_;
};

// The JSON objects of a server-sent event stream, [DONE] left out.
std::vector<json> sse_chunks(const std::string& body) {
  std::vector<json> chunks;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    const std::string d = body.substr(pos + 6, end - pos - 6);
    if (d != "[DONE]") chunks.push_back(json::parse(d));
    pos = end;
  }
  return chunks;
}

void expect_openai_error(const std::pair<int, json>& r, int status, const std::string& param) {
  EXPECT_EQ(r.first, status) << r.second.dump();
  ASSERT_TRUE(r.second.contains("error")) << r.second.dump();
  const json& e = r.second["error"];
  EXPECT_TRUE(e["message"].is_string());
  EXPECT_FALSE(e["message"].get<std::string>().empty());
  EXPECT_TRUE(e.contains("type") && e.contains("param") && e.contains("code"));
  if (param.empty()) {
    EXPECT_TRUE(e["param"].is_null()) << e.dump();
  } else {
    EXPECT_EQ(e["param"], param) << e.dump();
  }
}

TEST_F(ApiTest, MalformedJsonIs400) {
  expect_openai_error(call(post("/v1/completions", "{\"model\": ")), 400, "");
  expect_openai_error(call(post("/v1/completions", "[1, 2]")), 400, "");
  expect_openai_error(call(post("/v1/completions", "")), 400, "");
}

// A number JSON can write but a double cannot hold is a client error (400), not an internal one
// (it once escaped as an exception, answered 500; found by the api_request fuzz target, input in
// fuzz/regressions/api_request/).
TEST_F(ApiTest, NumberTooLargeForADoubleIs400) {
  auto r = call(post("/v1/completions", R"({"model":"fake-model","prompt":"x","temperature":1e400})"));
  expect_openai_error(r, 400, "");
  EXPECT_EQ(r.second["error"]["code"], "invalid_json");
  auto t = call(post("/generate", R"({"inputs":"x","parameters":{"top_p":-1e999}})"));
  EXPECT_EQ(t.first, 422);
}

TEST_F(ApiTest, InvalidUtf8Is400) {
  std::string body = "{\"model\": \"fake-model\", \"prompt\": \"a\xff\xfe\"}";
  auto r = call(post("/v1/completions", body));
  expect_openai_error(r, 400, "");
  EXPECT_EQ(r.second["error"]["code"], "invalid_utf8");
  // A lone surrogate escape is refused by the JSON parser.
  expect_openai_error(call(post("/v1/completions", R"({"model":"fake-model","prompt":"\ud800"})")), 400, "");
}

TEST_F(ApiTest, WrongTypesNameTheParameter) {
  auto r = call(post("/v1/completions", R"({"model":"fake-model","prompt":"hi","max_tokens":"ten"})"));
  expect_openai_error(r, 400, "max_tokens");
  EXPECT_EQ(r.second["error"]["code"], "invalid_type");
  expect_openai_error(call(post("/v1/chat/completions", R"({"model":"fake-model","messages":"hi"})")), 400, "messages");
  expect_openai_error(
      call(post("/v1/chat/completions",
                R"({"model":"fake-model","messages":[{"role":"user","content":"x"}],"temperature":"hot"})")),
      400, "temperature");
  expect_openai_error(call(post("/v1/completions", R"({"model":"fake-model","prompt":"hi","stop":[1]})")), 400, "stop");
  expect_openai_error(call(post("/v1/completions", R"({"model":"fake-model","prompt":{"a":1}})")), 400, "prompt");
  expect_openai_error(call(post("/v1/completions", R"({"model":"fake-model","prompt":"hi","stream":"yes"})")), 400,
                      "stream");
}

TEST_F(ApiTest, UnknownFieldsAreRejectedMissingOnesNamed) {
  auto r = call(post("/v1/completions", R"({"model":"fake-model","prompt":"hi","frobnicate":1})"));
  expect_openai_error(r, 400, "frobnicate");
  expect_openai_error(call(post("/v1/chat/completions", R"({"model":"fake-model"})")), 400, "messages");
  expect_openai_error(call(post("/v1/completions", R"({"prompt":"hi"})")), 400, "model");
  expect_openai_error(
      call(post(
          "/v1/chat/completions",
          R"({"model":"fake-model","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}})")),
      400, "stream_options");
}

TEST_F(ApiTest, AnyModelNameIsAcceptedAndTheServedNameReported) {
  // As text-generation-inference with one model: clients that send a placeholder name work.
  auto r = call(post("/v1/completions", R"({"model":"tgi","prompt":"hi","max_tokens":2})"));
  EXPECT_EQ(r.first, 200) << r.second.dump();
  EXPECT_EQ(r.second["model"], "fake-model");
  auto chat = call(
      post("/v1/chat/completions", R"({"model":"gpt-9","messages":[{"role":"user","content":"x"}],"max_tokens":2})"));
  EXPECT_EQ(chat.first, 200) << chat.second.dump();
  EXPECT_EQ(chat.second["model"], "fake-model");
  EXPECT_EQ(call(get("/v1/models/gpt-9")).first, 404) << "only served names have a model card";
}

TEST_F(ApiTest, CompletionWithZeroMaxTokensGeneratesNothing) {
  auto r = call(post("/v1/completions", R"({"model":"fake-model","prompt":"hello","max_tokens":0,"echo":true})"));
  ASSERT_EQ(r.first, 200) << r.second.dump();
  EXPECT_EQ(r.second["choices"][0]["text"], "hello");
  EXPECT_EQ(r.second["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r.second["usage"]["completion_tokens"], 0);
}

TEST(ApiModelNames, StrictModelNameRefusesOthersAndAliasesAnswer) {
  FakeBackend::Options o;
  o.aliases = {"fake-alias", "other-alias"};
  FakeBackend backend(o);
  ApiServerConfig c;
  c.log_requests = false;
  c.strict_model_name = true;
  ApiServer api(backend, c);
  auto call = [&](HttpRequest req) { return call_api(api, std::move(req)); };
  auto unknown = call(post("/v1/completions", R"({"model":"gpt-9","prompt":"hi"})"));
  EXPECT_EQ(unknown.first, 404);
  EXPECT_EQ(unknown.second["error"]["code"], "model_not_found");
  EXPECT_EQ(call(post("/v1/chat/completions", R"({"model":"tgi","messages":[{"role":"user","content":"x"}]})")).first,
            404);
  // An alias is served and reported back as the client named it.
  auto alias = call(post("/v1/completions", R"({"model":"other-alias","prompt":"hi","max_tokens":2})"));
  EXPECT_EQ(alias.first, 200) << alias.second.dump();
  EXPECT_EQ(alias.second["model"], "other-alias");
  auto models = call(get("/v1/models"));
  ASSERT_EQ(models.first, 200);
  ASSERT_EQ(models.second["data"].size(), 3u);
  EXPECT_EQ(models.second["data"][0]["id"], "fake-model");
  EXPECT_EQ(models.second["data"][1]["id"], "fake-alias");
  EXPECT_EQ(call(get("/v1/models/fake-alias")).second["id"], "fake-alias");
}

// min_tokens reaches the backend (whose EOS then waits for it) and is checked against max_tokens
// and constraints, which decide where the output ends themselves.
TEST(ApiMinTokens, ReachTheBackendAndAreValidated) {
  FakeBackend::Options o;
  o.eos_after = 2;
  FakeBackend backend(o);
  ApiServerConfig c;
  c.log_requests = false;
  ApiServer api(backend, c);
  auto call = [&](HttpRequest req) { return call_api(api, std::move(req)); };
  auto plain = call(post("/v1/completions", R"({"model":"fake-model","prompt":"hi","max_tokens":10,"temperature":0})"));
  ASSERT_EQ(plain.first, 200) << plain.second.dump();
  EXPECT_EQ(plain.second["usage"]["completion_tokens"], 3);  // two letters and the EOS
  EXPECT_EQ(plain.second["choices"][0]["finish_reason"], "stop");
  auto held = call(post("/v1/completions",
                        R"({"model":"fake-model","prompt":"hi","max_tokens":10,"min_tokens":6,"temperature":0})"));
  ASSERT_EQ(held.first, 200) << held.second.dump();
  EXPECT_EQ(held.second["choices"][0]["text"].get<std::string>().size(), 6u);
  EXPECT_EQ(held.second["choices"][0]["finish_reason"], "stop");
  auto chat = call(post("/v1/chat/completions",
                        R"({"model":"fake-model","messages":[{"role":"user","content":"x"}],"min_tokens":4,
                                "max_tokens":8,"temperature":0})"));
  ASSERT_EQ(chat.first, 200) << chat.second.dump();
  EXPECT_EQ(chat.second["choices"][0]["message"]["content"].get<std::string>().size(), 4u);
  const int64_t before = backend.submitted();
  expect_openai_error(
      call(post("/v1/completions", R"({"model":"fake-model","prompt":"hi","max_tokens":5,"min_tokens":6})")), 400,
      "min_tokens");
  expect_openai_error(call(post("/v1/completions", R"({"model":"fake-model","prompt":"hi","min_tokens":-1})")), 400,
                      "min_tokens");
  expect_openai_error(
      call(post("/v1/chat/completions", R"({"model":"fake-model","messages":[{"role":"user","content":"x"}],
                                  "min_tokens":3,"response_format":{"type":"json_object"}})")),
      400, "min_tokens");
  EXPECT_EQ(backend.submitted(), before);  // nothing reached the backend
}

// truncate_prompt_tokens: only the prompt's last tokens run (and are echoed and counted).
TEST_F(ApiTest, TruncatePromptTokensKeepsTheLastTokens) {
  const std::string body = R"({"model":"fake-model","prompt":"abcdefghij","max_tokens":0,"echo":true)";
  auto full = call(post("/v1/completions", body + "}"));
  ASSERT_EQ(full.first, 200) << full.second.dump();
  EXPECT_EQ(full.second["choices"][0]["text"], "abcdefghij");
  auto cut = call(post("/v1/completions", body + R"(,"truncate_prompt_tokens":4})"));
  ASSERT_EQ(cut.first, 200) << cut.second.dump();
  EXPECT_EQ(cut.second["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(cut.second["choices"][0]["text"], "ghij");
  auto same = call(post("/v1/completions", body + R"(,"truncate_prompt_tokens":100})"));
  EXPECT_EQ(same.second["usage"]["prompt_tokens"], full.second["usage"]["prompt_tokens"]);
  EXPECT_EQ(same.second["choices"][0]["text"], "abcdefghij");
  auto chat = call(
      post("/v1/chat/completions", R"({"model":"fake-model","messages":[{"role":"user","content":"a long question"}],
                                                  "max_tokens":2,"truncate_prompt_tokens":5})"));
  ASSERT_EQ(chat.first, 200) << chat.second.dump();
  EXPECT_EQ(chat.second["usage"]["prompt_tokens"], 5);
  expect_openai_error(call(post("/v1/completions", body + R"(,"truncate_prompt_tokens":0})")), 400,
                      "truncate_prompt_tokens");
}

TEST_F(ApiTest, MaxTokensRangeAndContextLength) {
  expect_openai_error(call(post("/v1/completions", R"({"model":"fake-model","prompt":"hi","max_tokens":-1})")), 400,
                      "max_tokens");
  auto huge = call(post("/v1/completions", R"({"model":"fake-model","prompt":"hi","max_tokens":1000000000000})"));
  expect_openai_error(huge, 400, "max_tokens");
  EXPECT_EQ(huge.second["error"]["code"], "context_length_exceeded");
  // A prompt longer than the context (max_model_len 512 bytes).
  json body = {{"model", "fake-model"}, {"prompt", std::string(600, 'x')}};
  auto longp = call(post("/v1/completions", body.dump()));
  EXPECT_EQ(longp.first, 400);
  EXPECT_EQ(longp.second["error"]["code"], "context_length_exceeded");
  expect_openai_error(
      call(post("/v1/chat/completions",
                R"({"model":"fake-model","messages":[{"role":"user","content":"x"}],"max_completion_tokens":0})")),
      400, "max_completion_tokens");
  EXPECT_EQ(backend_.submitted(), 0);  // nothing reached the backend
}

TEST_F(ApiTest, CompletionWithUsageAndLogprobs) {
  auto r = call(post("/v1/completions",
                     R"({"model":"fake-model","prompt":"hello","max_tokens":5,"temperature":0,"logprobs":2})"));
  ASSERT_EQ(r.first, 200) << r.second.dump();
  const json& b = r.second;
  EXPECT_EQ(b["object"], "text_completion");
  EXPECT_EQ(b["model"], "fake-model");
  ASSERT_EQ(b["choices"].size(), 1u);
  // Greedy fake: letters from 'a' + (prompt_len + k) % 26, prompt = BOS + 5 bytes = 6.
  EXPECT_EQ(b["choices"][0]["text"], "ghijk");
  EXPECT_EQ(b["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(b["usage"]["prompt_tokens"], 6);
  EXPECT_EQ(b["usage"]["completion_tokens"], 5);
  EXPECT_EQ(b["usage"]["total_tokens"], 11);
  EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const json& lp = b["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 5u);
  EXPECT_EQ(lp["tokens"][0], "g");
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(lp["text_offset"][1], 1);
}

TEST_F(ApiTest, EchoWithLogprobsLeadsWithThePromptsTokens) {
  // The fake gives every prompt token but the first logprob -1.
  auto r =
      call(post("/v1/completions",
                R"({"model":"fake-model","prompt":"hey","max_tokens":2,"temperature":0,"echo":true,"logprobs":1})"));
  ASSERT_EQ(r.first, 200) << r.second.dump();
  const json& c = r.second["choices"][0];
  EXPECT_EQ(c["text"], "hey" + std::string("ef"));
  const json& lp = c["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 6u);  // BOS, h, e, y, then two generated
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["tokens"][1], "h");
  EXPECT_EQ(lp["token_logprobs"][1], -1.0);
  EXPECT_EQ(lp["top_logprobs"][1].size(), 1u);
  EXPECT_EQ(lp["tokens"][4], "e");
  EXPECT_EQ(r.second["usage"]["completion_tokens"], 2);
}

TEST_F(ApiTest, StopStringIsCutAndReported) {
  auto r = call(post("/v1/completions",
                     R"({"model":"fake-model","prompt":"hello","max_tokens":10,"temperature":0,"stop":["ij"]})"));
  ASSERT_EQ(r.first, 200);
  EXPECT_EQ(r.second["choices"][0]["text"], "gh");
  EXPECT_EQ(r.second["choices"][0]["finish_reason"], "stop");
}

TEST_F(ApiTest, SeedIsReproducibleAndNChoicesDiffer) {
  const std::string req = R"({"model":"fake-model","prompt":"x","max_tokens":12,"temperature":1.0,"seed":42,"n":2})";
  auto a = call(post("/v1/completions", req));
  auto b = call(post("/v1/completions", req));
  ASSERT_EQ(a.first, 200);
  ASSERT_EQ(a.second["choices"].size(), 2u);
  EXPECT_EQ(a.second["choices"][0]["text"], b.second["choices"][0]["text"]);
  EXPECT_EQ(a.second["choices"][1]["text"], b.second["choices"][1]["text"]);
  EXPECT_NE(a.second["choices"][0]["text"], a.second["choices"][1]["text"]);
  EXPECT_EQ(a.second["usage"]["completion_tokens"], 24);
  EXPECT_EQ(a.second["usage"]["prompt_tokens"], 2);  // counted once for both choices
}

TEST_F(ApiTest, ContinuousUsageStatsGiveEveryChunkTheUsageSoFar) {
  Reply r = api_.handle(post("/v1/completions", R"({"model":"fake-model","prompt":"hi","max_tokens":4,"temperature":0,
      "stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}})"));
  ASSERT_TRUE(r.source);
  const std::vector<json> chunks = sse_chunks(run_reply_source(r));
  ASSERT_GE(chunks.size(), 3u);
  int64_t last = 0;
  for (const json& c : chunks) {
    ASSERT_TRUE(c["usage"].is_object()) << c.dump();
    EXPECT_EQ(c["usage"]["prompt_tokens"], 3);
    const int64_t now = c["usage"]["completion_tokens"];
    EXPECT_GE(now, last);
    EXPECT_EQ(c["usage"]["total_tokens"], 3 + now);
    last = now;
  }
  EXPECT_EQ(last, 4);
  // Without include_usage the option changes nothing; it is a known field either way.
  Reply plain = api_.handle(post("/v1/completions", R"({"model":"fake-model","prompt":"hi","max_tokens":2,
      "stream":true,"stream_options":{"continuous_usage_stats":true}})"));
  ASSERT_TRUE(plain.source);
  for (const json& c : sse_chunks(run_reply_source(plain))) EXPECT_FALSE(c.contains("usage")) << c.dump();
}

TEST_F(ApiTest, ChatStreamHasRoleContentFinishUsageAndDone) {
  Reply r = api_.handle(post("/v1/chat/completions",
                             R"({"model":"fake-model","messages":[{"role":"user","content":"hi"}],"max_tokens":4,
                                 "temperature":0,"stream":true,"stream_options":{"include_usage":true}})"));
  ASSERT_TRUE(r.source);
  ASSERT_TRUE(r.streamed);
  EXPECT_EQ(r.head.content_type, "text/event-stream");
  std::string body = run_reply_source(r);
  ASSERT_GE(body.size(), 14u);
  EXPECT_EQ(body.substr(body.size() - 14), "data: [DONE]\n\n");
  const std::vector<json> chunks = sse_chunks(body);
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  std::string finish;
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    const json& c = chunks[i]["choices"][0];
    if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    EXPECT_TRUE(chunks[i]["usage"].is_null());
  }
  EXPECT_EQ(text.size(), 4u);
  EXPECT_EQ(finish, "length");
  const json& last = chunks.back();
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 4);
}

TEST_F(ApiTest, ChatMessagesValidatedAndTemplateErrorsAre400) {
  expect_openai_error(
      call(post("/v1/chat/completions", R"({"model":"fake-model","messages":[{"role":"wizard","content":"x"}]})")), 400,
      "messages[0].role");
  expect_openai_error(call(post("/v1/chat/completions", R"({"model":"fake-model","messages":[]})")), 400, "messages");
  auto r = call(post("/v1/chat/completions", R"({"model":"fake-model","messages":[{"role":"raise","content":"x"}]})"));
  EXPECT_EQ(r.first, 400);
  auto ok = call(post(
      "/v1/chat/completions",
      R"({"model":"fake-model","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"max_tokens":2})"));
  EXPECT_EQ(ok.first, 200) << ok.second.dump();
  EXPECT_EQ(ok.second["choices"][0]["message"]["role"], "assistant");
}

TEST_F(ApiTest, TgiGenerateDetailsAndValidation) {
  auto r = call(post("/generate",
                     R"({"inputs":"hello","parameters":{"max_new_tokens":3,"details":true,"decoder_input_details":true,
                                       "top_n_tokens":2,"adapter_id":null,"best_of":null}})"));
  ASSERT_EQ(r.first, 200) << r.second.dump();
  EXPECT_EQ(r.second["generated_text"], "ghi");
  const json& d = r.second["details"];
  EXPECT_EQ(d["finish_reason"], "length");
  EXPECT_EQ(d["generated_tokens"], 3);
  EXPECT_EQ(d["tokens"].size(), 3u);
  EXPECT_EQ(d["prefill"].size(), 6u);
  EXPECT_TRUE(d["prefill"][0]["logprob"].is_null());
  EXPECT_EQ(d["prefill"][1]["logprob"], -1.0);
  EXPECT_EQ(d["top_tokens"][0].size(), 2u);
  auto bad = call(post("/generate", R"({"inputs":"hello","parameters":{"temperature":0}})"));
  EXPECT_EQ(bad.first, 422);
  EXPECT_EQ(bad.second["error_type"], "validation");
  EXPECT_TRUE(bad.second["error"].is_string());
  auto missing = call(post("/generate", R"({"parameters":{}})"));
  EXPECT_EQ(missing.first, 422);
  auto compat = call(post("/", R"({"inputs":"hello","parameters":{"max_new_tokens":2,"return_full_text":true}})"));
  ASSERT_EQ(compat.first, 200);
  ASSERT_TRUE(compat.second.is_array());
  EXPECT_EQ(compat.second[0]["generated_text"], "hellogh");
}

// best_of: candidate i samples with seed + i; the one whose tokens have the highest total logprob
// is returned, the others in details.best_of_sequences (in candidate order).
TEST_F(ApiTest, TgiBestOfReturnsTheCandidateWithTheHighestTotalLogprob) {
  auto body = [](const std::string& extra) {
    return R"({"inputs":"hello","parameters":{"max_new_tokens":6,"do_sample":true,"details":true,)" + extra + "}}";
  };
  std::vector<json> alone;
  std::vector<double> sums;
  for (int i = 0; i < 3; ++i) {
    auto r = call(post("/generate", body("\"seed\":" + std::to_string(40 + i))));
    ASSERT_EQ(r.first, 200) << r.second.dump();
    alone.push_back(r.second);
    double sum = 0.0;
    for (const json& t : r.second["details"]["tokens"]) sum += t["logprob"].get<double>();
    sums.push_back(sum);
  }
  const size_t best = size_t(std::max_element(sums.begin(), sums.end()) - sums.begin());
  ASSERT_GT(sums[best], *std::min_element(sums.begin(), sums.end()));  // the candidates differ
  auto r = call(post("/generate", body(R"("seed":40,"best_of":3)")));
  ASSERT_EQ(r.first, 200) << r.second.dump();
  EXPECT_EQ(r.second["generated_text"], alone[best]["generated_text"]);
  const json& d = r.second["details"];
  EXPECT_EQ(d["seed"], 40 + int(best));
  EXPECT_EQ(d["tokens"], alone[best]["details"]["tokens"]);
  ASSERT_EQ(d["best_of_sequences"].size(), 2u);
  size_t k = 0;
  for (size_t i = 0; i < 3; ++i) {
    if (i == best) continue;
    const json& o = d["best_of_sequences"][k++];
    EXPECT_EQ(o["generated_text"], alone[i]["generated_text"]);
    EXPECT_EQ(o["seed"], 40 + int(i));
    EXPECT_EQ(o["generated_tokens"], 6);
    EXPECT_EQ(o["finish_reason"], "length");
    EXPECT_EQ(o["tokens"], alone[i]["details"]["tokens"]);
  }
  // One candidate: no other sequences.
  EXPECT_TRUE(alone[0]["details"]["best_of_sequences"].is_null());
  // Refused: greedy candidates, out of range, streamed.
  for (const std::string& bad : {std::string(R"({"inputs":"hi","parameters":{"best_of":2}})"),
                                 std::string(R"({"inputs":"hi","parameters":{"best_of":0,"do_sample":true}})"),
                                 std::string(R"({"inputs":"hi","parameters":{"best_of":17,"do_sample":true}})")}) {
    auto e = call(post("/generate", bad));
    EXPECT_EQ(e.first, 422) << bad;
    EXPECT_NE(e.second["error"].get<std::string>().find("best_of"), std::string::npos) << e.second.dump();
  }
  Reply streamed =
      api_.handle(post("/generate_stream", R"({"inputs":"hi","parameters":{"best_of":2,"do_sample":true}})"));
  EXPECT_EQ(streamed.head.status, 422);
  auto compat = call(post("/", R"({"inputs":"hi","stream":true,"parameters":{"best_of":2,"do_sample":true}})"));
  EXPECT_EQ(compat.first, 422);
  EXPECT_EQ(call(get("/info")).second["max_best_of"], 16);
  EXPECT_EQ(backend_.active(), 0);
}

// A TGI request without "parameters" takes every default. The defaults were once read through a
// reference to a temporary JSON object (undefined behaviour that happened to work); found by the
// api_request fuzz target under AddressSanitizer (stack-use-after-scope), input in
// fuzz/regressions/api_request/.
TEST_F(ApiTest, TgiWithoutParametersTakesTheDefaults) {
  auto r = call(post("/generate", R"({"inputs":"hello"})"));
  ASSERT_EQ(r.first, 200) << r.second.dump();
  EXPECT_FALSE(r.second.contains("details"));
  auto c = call(post("/", R"({"inputs":"hello","stream":false})"));
  ASSERT_EQ(c.first, 200) << c.second.dump();
  EXPECT_TRUE(c.second.is_array());
}

TEST_F(ApiTest, TgiStreamOneEventPerTokenWithFinalText) {
  Reply r =
      api_.handle(post("/generate_stream", R"({"inputs":"hello","parameters":{"max_new_tokens":4,"details":true}})"));
  ASSERT_TRUE(r.streamed);
  std::string body = run_reply_source(r);
  std::vector<json> events;
  size_t pos = 0;
  while ((pos = body.find("data:", pos)) != std::string::npos) {
    size_t end = body.find("\n\n", pos);
    events.push_back(json::parse(body.substr(pos + 5, end - pos - 5)));
    pos = end;
  }
  ASSERT_EQ(events.size(), 4u);
  std::string text;
  for (const json& e : events) text += e["token"]["text"].get<std::string>();
  EXPECT_EQ(text, "ghij");
  EXPECT_TRUE(events[0]["generated_text"].is_null());
  EXPECT_EQ(events.back()["generated_text"], "ghij");
  EXPECT_EQ(events.back()["details"]["finish_reason"], "length");
  EXPECT_EQ(events.back()["details"]["generated_tokens"], 4);
}

TEST_F(ApiTest, QueueFullIs429AndCancelFreesPages) {
  ApiServerConfig c = config();
  c.max_concurrent_requests = 1;
  ApiServer small(backend_, c);
  backend_.set_tick_us(20000);
  Reply first =
      small.handle(post("/v1/completions", R"({"model":"fake-model","prompt":"hi","max_tokens":200,"stream":true})"));
  ASSERT_TRUE(first.source);
  Reply second = small.handle(post("/v1/completions", R"({"model":"fake-model","prompt":"hi","max_tokens":5})"));
  ASSERT_FALSE(second.source);
  EXPECT_EQ(second.head.status, 429);
  EXPECT_EQ(json::parse(second.head.body)["error"]["code"], "queue_full");
  EXPECT_EQ(small.metrics().requests_with_status(429), 1);  // counted once
  Reply tgi = small.handle(post("/generate", R"({"inputs":"hi"})"));
  EXPECT_EQ(tgi.head.status, 429);
  EXPECT_EQ(json::parse(tgi.head.body)["error_type"], "overloaded");

  EXPECT_GT(backend_.stats().kv_pages_used, 0);
  first.source->cancel();
  std::string body = run_reply_source(first);
  EXPECT_NE(body.find("\"abort\""), std::string::npos);
  EXPECT_EQ(backend_.stats().kv_pages_used, 0);
  EXPECT_EQ(backend_.active(), 0);
  first.source.reset();
  EXPECT_EQ(small.in_flight(), 0);
}

TEST_F(ApiTest, BackendQueueFullMapsTo429) {
  FakeBackend::Options o;
  o.max_active = 1;
  o.tick_us = 20000;
  FakeBackend tiny(o);
  ApiServer api(tiny, config());
  Reply a = api.handle(post("/v1/completions", R"({"model":"fake-model","prompt":"hi","max_tokens":100})"));
  ASSERT_TRUE(a.source);
  Reply b = api.handle(post("/v1/completions", R"({"model":"fake-model","prompt":"hi","max_tokens":100})"));
  EXPECT_EQ(b.head.status, 429);
  a.source->cancel();
  run_reply_source(a);
}

TEST_F(ApiTest, ModelsInfoHealthTokenizeDetokenizeMetrics) {
  auto models = call(get("/v1/models"));
  ASSERT_EQ(models.first, 200);
  EXPECT_EQ(models.second["data"][0]["id"], "fake-model");
  EXPECT_EQ(call(get("/v1/models/fake-model")).first, 200);
  EXPECT_EQ(call(get("/v1/models/other")).first, 404);
  auto info = call(get("/info"));
  EXPECT_EQ(info.second["max_total_tokens"], 512);
  EXPECT_EQ(call(get("/health")).first, 200);
  auto tok = call(post("/tokenize", R"({"prompt":"ab"})"));
  ASSERT_EQ(tok.first, 200);
  EXPECT_EQ(tok.second["tokens"], json({FakeBackend::kBos, 'a', 'b'}));
  EXPECT_EQ(tok.second["count"], 3);
  auto detok = call(post("/detokenize", R"({"tokens":[104,105]})"));
  EXPECT_EQ(detok.second["prompt"], "hi");
  EXPECT_EQ(call(post("/detokenize", R"({"tokens":[99999]})")).first, 400);
  EXPECT_EQ(call(get("/nope")).first, 404);
  EXPECT_EQ(call(get("/v1/completions")).first, 405);

  call(post("/v1/completions", R"({"model":"fake-model","prompt":"hello","max_tokens":3})"));
  Reply m = api_.handle(get("/metrics"));
  const std::string& text = m.head.body;
  for (const char* name :
       {"flashgen_requests_total{route=\"/v1/completions\",status=\"200\"} 1",
        "flashgen_requests_total{route=\"/v1/models\",status=\"404\"} 1", "flashgen_num_requests_waiting",
        "flashgen_num_requests_running", "flashgen_kv_pages_used", "flashgen_kv_pages_total 1024",
        "flashgen_prompt_tokens_total", "flashgen_generation_tokens_total",
        "flashgen_time_to_first_token_seconds_bucket", "flashgen_inter_token_latency_seconds_count",
        "flashgen_e2e_request_latency_seconds_sum", "flashgen_batch_size_bucket", "flashgen_prefix_cache_hit_ratio",
        "flashgen_step_latency_budget_seconds", "flashgen_decode_step_seconds", "flashgen_prefill_token_seconds",
        "flashgen_prefill_chunk_tokens", "flashgen_prefill_chunk_limited_steps_total"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name << "\n" << text;
  }
  EXPECT_NE(text.find("flashgen_generation_tokens_total 3"), std::string::npos);
}

// Replies to a scripted output (the fake backend writes it): reasoning models (server/reasoning.h)
// and tool calls.
class ScriptedApiTest : public ::testing::Test {
 protected:
  static FakeBackend::Options options(std::string script, bool reasoning = true, std::string tool_format = "") {
    FakeBackend::Options o;
    o.script = std::move(script);
    o.reasoning = reasoning;
    o.tool_call_format = std::move(tool_format);
    return o;
  }
  void start(FakeBackend::Options o) {
    backend_ = std::make_unique<FakeBackend>(std::move(o));
    ApiServerConfig c;
    c.log_requests = false;
    api_ = std::make_unique<ApiServer>(*backend_, c);
  }
  // A chat request (greedy, so the script is written) with `extra` fields; the whole reply.
  json chat(const std::string& extra = "") {
    Reply r =
        api_->handle(post("/v1/chat/completions",
                          R"({"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0)" + extra + "}"));
    EXPECT_TRUE(r.source) << r.head.body;
    if (!r.source) return json::parse(r.head.body);
    HttpResponse head;
    const std::string body = run_reply_source(r, &head);
    EXPECT_EQ(head.status, 200) << body;
    return json::parse(body);
  }
  // The same streamed: the chunks' deltas, [DONE] left out.
  std::vector<json> chat_stream(const std::string& extra = "") {
    Reply r = api_->handle(
        post("/v1/chat/completions", R"({"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0,)"
                                     R"("stream":true)" +
                                         extra + "}"));
    EXPECT_TRUE(r.source && r.streamed) << r.head.body;
    if (!r.source) return {};
    return sse_chunks(run_reply_source(r));
  }
  std::unique_ptr<FakeBackend> backend_;
  std::unique_ptr<ApiServer> api_;
};

struct StreamedMessage {
  std::string reasoning;
  std::string content;
  json tool_calls = json::array();
  std::string finish;
  size_t logprob_entries = 0;
};

StreamedMessage join_deltas(const std::vector<json>& chunks) {
  StreamedMessage m;
  bool content_seen = false;
  for (const json& chunk : chunks) {
    if (chunk["choices"].empty()) continue;
    const json& c = chunk["choices"][0];
    const json& d = c["delta"];
    EXPECT_FALSE(d.contains("reasoning_content") && d.contains("content") && d["content"] != "") << d.dump();
    if (d.contains("reasoning_content")) {
      EXPECT_FALSE(content_seen) << "reasoning after content: " << d.dump();
      m.reasoning += d["reasoning_content"].get<std::string>();
    }
    if (d.contains("content") && !d.contains("role")) {
      content_seen = content_seen || d["content"] != "";  // ("" carries the logprobs of held-back text)
      m.content += d["content"].get<std::string>();
    }
    if (d.contains("tool_calls"))
      for (const json& call : d["tool_calls"]) m.tool_calls.push_back(call);
    if (!c["finish_reason"].is_null()) m.finish = c["finish_reason"];
    if (c.contains("logprobs") && !c["logprobs"].is_null()) m.logprob_entries += c["logprobs"]["content"].size();
  }
  return m;
}

TEST_F(ScriptedApiTest, ThinkBlockComesBackAsReasoningContent) {
  start(options("<think>\nWhy 5? 2 + 3.\n</think>\n\nIt is 5."));
  const json r = chat();
  const json& msg = r["choices"][0]["message"];
  EXPECT_EQ(msg["reasoning_content"], "Why 5? 2 + 3.") << r.dump();
  EXPECT_EQ(msg["content"], "It is 5.");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");

  const StreamedMessage s = join_deltas(chat_stream(R"(,"logprobs":true)"));
  EXPECT_EQ(s.reasoning, "Why 5? 2 + 3.");
  EXPECT_EQ(s.content, "It is 5.");
  EXPECT_EQ(s.finish, "stop");
  // Every token's logprob went out once, whichever part its text fell in (the EOS token's too).
  EXPECT_EQ(s.logprob_entries, std::string("<think>\nWhy 5? 2 + 3.\n</think>\n\nIt is 5.").size() + 1);

  // include_reasoning: false drops it; the content stays the same.
  const json dropped = chat(R"(,"include_reasoning":false)");
  EXPECT_FALSE(dropped["choices"][0]["message"].contains("reasoning_content")) << dropped.dump();
  EXPECT_EQ(dropped["choices"][0]["message"]["content"], "It is 5.");
  const StreamedMessage sd = join_deltas(chat_stream(R"(,"include_reasoning":false)"));
  EXPECT_EQ(sd.reasoning, "");
  EXPECT_EQ(sd.content, "It is 5.");
  // A wrong type is named.
  Reply bad = api_->handle(post("/v1/chat/completions",
                                R"({"model":"m","messages":[{"role":"user","content":"hi"}],"include_reasoning":1})"));
  EXPECT_EQ(bad.head.status, 400);
  EXPECT_EQ(json::parse(bad.head.body)["error"]["param"], "include_reasoning");
}

TEST_F(ScriptedApiTest, WithoutTheParserTheBlockStaysInContent) {
  const std::string script = "<think>x</think>y";
  start(options(script, /*reasoning=*/false));
  const json r = chat();
  EXPECT_EQ(r["choices"][0]["message"]["content"], script);
  EXPECT_FALSE(r["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_EQ(join_deltas(chat_stream()).content, script);
  // Completions never split.
  start(options(script));
  Reply c = api_->handle(post("/v1/completions", R"({"model":"m","prompt":"hi","temperature":0,"max_tokens":64})"));
  ASSERT_TRUE(c.source);
  EXPECT_EQ(json::parse(run_reply_source(c))["choices"][0]["text"], script);
}

TEST_F(ScriptedApiTest, BlockOpenedByThePrompt) {
  start(options("Short.\n</think>\n\nDone."));
  const std::string open = R"(,"chat_template_kwargs":{"open_think":true})";
  const json r = chat(open);
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "Short.") << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Done.");
  const StreamedMessage s = join_deltas(chat_stream(open));
  EXPECT_EQ(s.reasoning, "Short.");
  EXPECT_EQ(s.content, "Done.");
  // Not opened: the output does not start with a block, so it is all content.
  EXPECT_EQ(chat()["choices"][0]["message"]["content"], "Short.\n</think>\n\nDone.");
  // A constrained output starts outside the block even when the prompt opened one.
  const json constrained = chat(open + R"(,"response_format":{"type":"json_object"})");
  EXPECT_EQ(constrained["choices"][0]["message"]["content"], "Short.\n</think>\n\nDone.") << constrained.dump();
  EXPECT_FALSE(constrained["choices"][0]["message"].contains("reasoning_content"));
}

TEST_F(ScriptedApiTest, CutOffWhileThinking) {
  start(options("<think>\nStill going and going"));
  const json r = chat(R"(,"max_tokens":19)");
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "Still going");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  const StreamedMessage s = join_deltas(chat_stream(R"(,"max_tokens":19)"));
  EXPECT_EQ(s.reasoning, "Still going");
  EXPECT_EQ(s.content, "");
}

TEST_F(ScriptedApiTest, ToolCallsAreParsedAfterTheBlockOnly) {
  const std::string tools =
      R"(,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])";
  start(
      options("<think>I need the weather.</think>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
              "{\"city\": \"Paris\"}}\n</tool_call>",
              true, "hermes"));
  const json r = chat(tools);
  const json& msg = r["choices"][0]["message"];
  EXPECT_EQ(msg["reasoning_content"], "I need the weather.") << r.dump();
  ASSERT_EQ(msg["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>())["city"], "Paris");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
  const StreamedMessage s = join_deltas(chat_stream(tools));
  EXPECT_EQ(s.reasoning, "I need the weather.");
  EXPECT_EQ(s.content, "");
  ASSERT_EQ(s.tool_calls.size(), 1u);
  EXPECT_EQ(s.tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(s.finish, "tool_calls");

  // A call written inside the block is thinking, not a call.
  start(
      options("<think>Maybe <tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>? No.</think>"
              "Sunny, I guess.",
              true, "hermes"));
  const json t = chat(tools);
  EXPECT_FALSE(t["choices"][0]["message"].contains("tool_calls")) << t.dump();
  EXPECT_EQ(t["choices"][0]["message"]["content"], "Sunny, I guess.");
  EXPECT_EQ(t["choices"][0]["finish_reason"], "stop");
  const StreamedMessage ts = join_deltas(chat_stream(tools));
  EXPECT_TRUE(ts.tool_calls.empty());
  EXPECT_EQ(ts.content, "Sunny, I guess.");
  EXPECT_NE(ts.reasoning.find("<tool_call>"), std::string::npos);
}

TEST_F(ScriptedApiTest, StopStringsCutToolCallContentToo) {
  const std::string tools =
      R"(,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])";
  start(options("Hello world. More text.", false, "hermes"));
  const json r = chat(tools + R"(,"stop":["world"])");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Hello ") << r.dump();
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  const StreamedMessage s = join_deltas(chat_stream(tools + R"(,"stop":["world"])"));
  EXPECT_EQ(s.content, "Hello ");
  EXPECT_EQ(s.finish, "stop");
}

TEST(Utf8Test, ValidatesAndFindsBoundaries) {
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80"));
  size_t off = 0;
  EXPECT_FALSE(is_valid_utf8("ab\xc0\xaf", &off));  // overlong
  EXPECT_EQ(off, 2u);
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xe2\x82"));          // truncated
  EXPECT_EQ(complete_utf8_prefix("ab\xe2\x82"), 2u);
  EXPECT_EQ(complete_utf8_prefix("ab\xe2\x82\xac"), 5u);
}

}  // namespace
}  // namespace fg::server

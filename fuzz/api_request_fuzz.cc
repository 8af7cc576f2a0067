// Fuzz target: request-body validation of every route that reads a body (OpenAI completions and
// chat completions, TGI generate / generate_stream / compat, tokenize, detokenize), through
// ApiServer::handle with a synchronous backend and a real chat template.
// Input: one byte picks the route and whether an API key is configured and sent, the rest is the
// body. Seeds: fuzz/corpus/api_request (valid and near-valid bodies of each route); dictionary:
// fuzz/dict/json.dict.
#include <memory>

#include "api_driver.h"
#include "fuzz_util.h"
#include "sync_backend.h"

namespace {

struct Target {
  fg::fuzz::SyncBackend backend;
  std::unique_ptr<fg::server::ApiServer> plain;
  std::unique_ptr<fg::server::ApiServer> keyed;
  Target() {
    fg::server::ApiServerConfig c;
    c.log_requests = false;
    c.max_concurrent_requests = 8;
    c.limits.max_output_tokens = 400;
    plain = std::make_unique<fg::server::ApiServer>(backend, c);
    c.api_key = "sk-fuzz";
    keyed = std::make_unique<fg::server::ApiServer>(backend, c);
  }
};

constexpr const char* kPaths[] = {"/v1/completions", "/v1/chat/completions", "/generate", "/generate_stream", "/",
                                  "/tokenize",       "/detokenize",          "/v1/models"};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fg::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Target t;
  fg::fuzz::FuzzInput in(data, size);
  const uint8_t choice = in.byte();
  fg::server::HttpRequest req;
  req.method = (choice & 0x80) && (choice & 0x40) ? "GET" : "POST";
  req.path = req.target = kPaths[choice % (sizeof(kPaths) / sizeof(kPaths[0]))];
  req.content_type = "application/json";
  req.body = std::string(in.rest());
  const bool keyed = choice & 0x20;
  if (keyed && (choice & 0x10)) req.authorization = "Bearer sk-fuzz";
  fg::fuzz::run_api_request(keyed ? *t.keyed : *t.plain, std::move(req));
  return 0;
}

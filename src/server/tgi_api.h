// text-generation-inference-compatible routes: POST /generate, POST /generate_stream, POST /
// (compat: `stream` picks), GET /info. Parameter names, validation (422 with
// {"error", "error_type"}) and response shapes follow TGI so that TGI clients such as
// huggingface_hub's InferenceClient work unchanged. Unknown parameters are ignored, as TGI does.
// `best_of` > 1 (sampling, not streamed) generates that many candidates and returns the one whose
// tokens have the highest total logprob, the others in details.best_of_sequences; with a `seed`,
// candidate i samples with seed + i (TGI refuses a seed there; flashgen keeps it reproducible).
#pragma once

#include "server/generation_reply.h"
#include "server/http_types.h"

namespace fg::server {

struct TgiLimits {
  int max_stop_sequences = 4;
  int max_top_n_tokens = 5;
  int max_best_of = 16;  // candidates per request (`best_of`; --max-n)
  int64_t default_max_new_tokens = 100;
};

enum class TgiRoute { kGenerate, kGenerateStream, kCompat };

Reply tgi_generate(ApiContext& ctx, const TgiLimits& limits, const HttpRequest& req, TgiRoute route);
Reply tgi_info(ApiContext& ctx, const TgiLimits& limits);

}  // namespace fg::server

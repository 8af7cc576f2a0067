// OpenAI-compatible routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models.
//
// Requests are validated the way OpenAI validates them (types, ranges, unknown fields refused with
// 400 and the parameter named) before anything reaches the backend; replies follow OpenAI's
// object shapes, and `stream: true` sends server-sent events ending with `data: [DONE]`.
// flashgen extensions (documented in docs/api.md): top_k, min_p, repetition_penalty, ignore_eos,
// stop_token_ids, skip_special_tokens, include_stop_str_in_output, add_special_tokens,
// add_generation_prompt, chat_template_kwargs.
#pragma once

#include <string_view>

#include "server/generation_reply.h"
#include "server/http_types.h"

namespace fg::server {

struct OpenAiLimits {
  int max_n = 16;
  int max_stop = 16;
  int max_logprobs = 20;
};

Reply openai_completions(ApiContext& ctx, const OpenAiLimits& limits, const HttpRequest& req);
Reply openai_chat_completions(ApiContext& ctx, const OpenAiLimits& limits, const HttpRequest& req);
// GET /v1/models (model_id empty) or GET /v1/models/{model_id}.
Reply openai_models(ApiContext& ctx, std::string_view model_id);

}  // namespace fg::server

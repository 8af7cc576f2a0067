// What a request asks of generation, in the meaning every API gives it: the sampling rule
// (backend/sampling_rule.h), penalties, the seed, how many OUTPUT tokens at most, and what stops
// it. One definition for the engine, the server and the CLI; each API fills it from its own
// fields and defaults (docs/api.md) and the engine validates it once at submit.
// Must never hold protocol details (one API's field names, how text is formatted) or engine state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/sampling_rule.h"
#include "core/status.h"

namespace fg {

struct SamplingParams : SamplingRule {  // temperature (default 0 = greedy), top_k, top_p, min_p
  float repetition_penalty = 1.0f;      // 1 = off; > 1 discourages tokens already in prompt or output
  float presence_penalty = 0.0f;        // subtracted once from every token already in the output
  float frequency_penalty = 0.0f;       // subtracted per occurrence in the output
  // Added to these tokens' logits before sampling, after the penalties (OpenAI's logit_bias): ids
  // distinct and in the vocabulary, each bias in [-kMaxLogitBias, kMaxLogitBias]. A token a
  // constraint forbids stays forbidden whatever its bias.
  std::vector<std::pair<int32_t, float>> logit_bias;
  static constexpr float kMaxLogitBias = 100.0f;
  std::optional<uint64_t> seed;  // unset: the engine derives one per request
  // Output tokens at most, as every API's max_tokens / max_new_tokens. std::nullopt = no limit of
  // its own: generation runs until the model's context or the KV pool is full. 0 = generate
  // nothing (the request finishes at once with reason length).
  std::optional<int32_t> max_new_tokens = 16;
  // Output tokens before which nothing but the length limit ends the request: until then the
  // model's end-of-sequence tokens (unless ignore_eos) and stop_token_ids are masked out of
  // sampling, and stop strings are matched only in the text that follows these tokens. 0 = off;
  // at most max_new_tokens. Not with a constraint (its grammar decides where the output ends).
  int32_t min_new_tokens = 0;
  std::vector<int32_t> stop_token_ids;  // finish with kStopToken (the token is kept in the output)
  std::vector<std::string> stop;        // stop strings (kStopString), matched on the output text
  bool ignore_eos = false;              // keep going past the model's end-of-sequence tokens
  int logprobs = -1;                    // -1: none; n >= 0: the sampled token's logprob plus the top n
  // -1: none; n >= 0: every prompt token's logprob given the tokens before it (from the second on)
  // plus the top n at its position. The whole prompt is computed: no prefix-cache pages are reused
  // for it, and with max_new_tokens 0 the prompt still runs.
  int prompt_logprobs = -1;

  const SamplingRule& rule() const { return *this; }
  // Whether the logits rows change on the host before sampling (penalties or biases).
  bool adjusts_logits() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f || !logit_bias.empty();
  }
  bool wants_logprobs() const { return logprobs >= 0; }
  bool wants_prompt_logprobs() const { return prompt_logprobs >= 0; }
  // Range checks with one-line messages naming the field.
  Status validate(int vocab_size) const;
};

// A token id written as a JSON object key (logit_bias's keys): decimal digits without leading
// zeros (so that no two keys name one id), below 2^31.
std::optional<int32_t> token_id_from_key(std::string_view key);

}  // namespace fg

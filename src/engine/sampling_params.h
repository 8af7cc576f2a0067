// What a request asks of the sampler and of the stop rules. Plain data, validated once at submit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace fg {

struct SamplingParams {
  float temperature = 1.0f;          // <= 0: greedy
  int top_k = 0;                     // 0 = off
  float top_p = 1.0f;                // 1 = off
  float min_p = 0.0f;                // 0 = off
  float repetition_penalty = 1.0f;   // 1 = off; > 1 discourages tokens already in prompt or output
  float presence_penalty = 0.0f;     // subtracted once from every token already in the output
  float frequency_penalty = 0.0f;    // subtracted per occurrence in the output
  std::optional<uint64_t> seed;      // unset: the engine picks one per request
  int max_new_tokens = 16;           // 0: until the context or the KV pool is full
  std::vector<int32_t> stop_token_ids;  // finish with reason stop (the token is kept in the output)
  std::vector<std::string> stop;     // stop strings, matched on text by the tokenizer's matcher
  bool ignore_eos = false;           // keep going past the model's end-of-sequence tokens
  int logprobs = -1;                 // -1: none; n >= 0: the sampled token's logprob plus top n

  bool needs_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
  bool wants_logprobs() const { return logprobs >= 0; }
  // Range checks with messages naming the field.
  Status validate(int vocab_size) const;
};

}  // namespace fg

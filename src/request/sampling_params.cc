// SamplingParams::validate: one message per bad field, in the request's own terms.
#include "request/sampling_params.h"

#include <cmath>

namespace fg {

Status SamplingParams::validate(int vocab_size) const {
  if (!std::isfinite(temperature) || temperature < 0.0f) {
    return invalid_argument("temperature must be a finite number >= 0 (0 = greedy)");
  }
  if (top_k < 0) return invalid_argument("top_k must be >= 0 (0 = off)");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return invalid_argument("top_p must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return invalid_argument("min_p must be in [0, 1]");
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return invalid_argument("repetition_penalty must be a finite number > 0 (1 = off)");
  }
  if (!std::isfinite(presence_penalty) || !std::isfinite(frequency_penalty)) {
    return invalid_argument("presence_penalty and frequency_penalty must be finite");
  }
  if (max_new_tokens.has_value() && *max_new_tokens < 0) {
    return invalid_argument("max_new_tokens must be >= 0 (leave it unset for no limit)");
  }
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return invalid_argument("stop token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(vocab_size) + ")");
    }
  }
  for (const std::string& s : stop) {
    if (s.empty()) return invalid_argument("stop strings must not be empty");
  }
  if (logprobs > 20) return invalid_argument("logprobs must be at most 20");
  return Status::ok();
}

}  // namespace fg

// SamplingParams::validate: one message per bad field, in the request's own terms.
#include "request/sampling_params.h"

#include <algorithm>
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
  if (min_new_tokens < 0) return invalid_argument("min_new_tokens must be >= 0 (0 = off)");
  if (max_new_tokens.has_value() && min_new_tokens > *max_new_tokens) {
    return invalid_argument("min_new_tokens (" + std::to_string(min_new_tokens) + ") is more than max_new_tokens (" +
                            std::to_string(*max_new_tokens) + ")");
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
  if (prompt_logprobs > 20) return invalid_argument("prompt_logprobs must be at most 20");
  std::vector<int32_t> biased;
  biased.reserve(logit_bias.size());
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab_size) {
      return invalid_argument("logit_bias token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(vocab_size) + ")");
    }
    if (!(bias >= -kMaxLogitBias && bias <= kMaxLogitBias)) {
      return invalid_argument("logit_bias of token " + std::to_string(id) + " must be between -100 and 100");
    }
    biased.push_back(id);
  }
  std::sort(biased.begin(), biased.end());
  if (std::adjacent_find(biased.begin(), biased.end()) != biased.end())
    return invalid_argument("logit_bias names a token id twice");
  return Status::ok();
}

std::optional<int32_t> token_id_from_key(std::string_view key) {
  if (key.empty() || key.size() > 10 || (key.size() > 1 && key[0] == '0')) return std::nullopt;
  int64_t v = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v > INT32_MAX) return std::nullopt;
  return int32_t(v);
}

}  // namespace fg

// One candidate token with its log-probability: the chosen token of a step or one entry of its
// top-n list. The engine fills id and logprob; layers that hold the tokenizer add the text.
// Must never carry anything but what a logprobs list shows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fg {

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;   // natural log, of the distribution after penalties, before temperature
  std::string text = {};  // the token's own bytes (may be part of a UTF-8 character); empty in the engine
};

// A prompt token's log-probability given the tokens before it, and the n most likely tokens at its
// position (SamplingParams::prompt_logprobs): of the model's distribution as it is (no penalties,
// biases or masks, which belong to sampling).
struct PromptLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;  // best first
};

}  // namespace fg

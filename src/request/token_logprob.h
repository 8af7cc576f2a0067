// One candidate token with its log-probability: the chosen token of a step or one entry of its
// top-n list. The engine fills id and logprob; layers that hold the tokenizer add the text.
// Must never carry anything but what a logprobs list shows.
#pragma once

#include <cstdint>
#include <string>

namespace fg {

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;   // natural log, of the distribution after penalties, before temperature
  std::string text = {};  // the token's own bytes (may be part of a UTF-8 character); empty in the engine
};

}  // namespace fg

// Decoders of tokenizer.json: turn the list of token strings of some ids back into text.
// Like Hugging Face, a decoder works on the whole list (several steps look at neighbours or
// at the first token) and the final text is the concatenation of what the chain leaves.
// Supported: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace fg::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Transforms the token strings in place (the list may shrink, e.g. Fuse makes it one).
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Builds a decoder from its tokenizer.json object; null JSON gives a null pointer.
Result<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& j, const std::string& where);

}  // namespace fg::tok

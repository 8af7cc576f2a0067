// Normalizers of tokenizer.json: text -> text transforms run on each piece of input that lies
// between added tokens, before pre-tokenization. Supported: NFC, NFD, NFKC, NFKD, Lowercase,
// Strip, StripAccents, Prepend, Replace, Sequence. Anything else is refused at load time.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace fg::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // The normalized form of s (valid UTF-8 in, valid UTF-8 out).
  virtual std::string normalize(std::string_view s) const = 0;
};

// Builds a normalizer from its tokenizer.json object; null JSON gives a null pointer.
// `where` names the file for error messages.
Result<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& j, const std::string& where);

}  // namespace fg::tok

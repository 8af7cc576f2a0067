// Pre-tokenizers of tokenizer.json: split normalized text into the pieces ("words") the BPE
// model encodes independently, and map their characters (ByteLevel, Metaspace). Supported:
// ByteLevel, Split, Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit,
// BertPreTokenizer, Sequence. Anything else is refused at load time.
//
// Pieces are byte ranges of one shared buffer so splitting never copies text; only the
// character-mapping steps write a new buffer.
#pragma once

#include <cstddef>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace fg::tok {

struct Piece {
  size_t begin = 0;  // byte offsets into PieceBuffer::text
  size_t end = 0;
  // The piece starts at offset 0 of the original input (Metaspace's prepend_scheme "first").
  bool at_origin = false;
};

struct PieceBuffer {
  std::string text;
  std::vector<Piece> pieces;
};

// How a split treats the delimiters it found (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Rewrites buf.pieces (and possibly buf.text) in place. Empty pieces are dropped.
  virtual void pre_tokenize(PieceBuffer& buf) const = 0;
};

// Builds a pre-tokenizer from its tokenizer.json object; null JSON gives a null pointer.
Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& j, const std::string& where);

// The GPT-2 byte-to-character table: byte b is written as this UTF-8 string.
const std::string& byte_level_char(unsigned char b);
// Inverse table: the byte of a byte-level character, or -1 when c is not one.
int byte_level_byte(char32_t c);

}  // namespace fg::tok

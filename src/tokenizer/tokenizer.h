// flashgen's tokenizer: loads a Hugging Face model folder's tokenizer.json (plus
// tokenizer_config.json and generation_config.json when present) and encodes / decodes text
// with the same ids and strings as Hugging Face `tokenizers`.
//
// Pipeline of encode (as in Hugging Face): repair invalid UTF-8 (U+FFFD) -> cut out added tokens
// that are not normalized -> normalize each remaining piece -> cut out normalized added tokens
// -> pre-tokenize -> BPE each piece -> wrap with the post-processor's special tokens when asked.
// A Tokenizer is immutable after load and safe to use from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace fg::tok {
class BpeModel;
class Normalizer;
class PreTokenizer;
class Decoder;
class AddedVocabulary;
}  // namespace fg::tok

namespace fg {

class Tokenizer {
 public:
  // Loads `path`: a model folder holding tokenizer.json (tokenizer_config.json and
  // generation_config.json are read when present), or the tokenizer.json file itself; or a .gguf
  // file (or a folder holding one .gguf and no tokenizer.json), whose tokenizer metadata is turned
  // into the same documents (tokenizer/gguf_tokenizer.h).
  // Errors: kNotFound (no tokenizer.json), kInvalidArgument (corrupt JSON or inconsistent
  // contents, naming the file and the field), kUnsupported (a component flashgen does not
  // implement, named by its type).
  static Result<std::unique_ptr<Tokenizer>> load(const std::string& path);

  // Builds a tokenizer from the JSON texts themselves (config texts may be empty). `name` is
  // used in error messages in place of a file name.
  static Result<std::unique_ptr<Tokenizer>> from_json(std::string_view tokenizer_json, std::string_view config_json,
                                                      std::string_view generation_config_json, const std::string& name);
  // The same from parsed documents; `config` and `generation` may be null (absent).
  static Result<std::unique_ptr<Tokenizer>> from_documents(const nlohmann::json& tokenizer,
                                                           const nlohmann::json& config,
                                                           const nlohmann::json& generation, const std::string& name);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text` (any bytes: invalid UTF-8 is first replaced by U+FFFD). With
  // add_special_tokens, the BOS/EOS (or template) tokens are added around the ids.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  // Appends to `out` instead of returning a new vector.
  void encode_into(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const;

  // Text of `ids` (unknown ids are skipped). skip_special_tokens drops added tokens marked
  // special. Always valid UTF-8.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // The vocabulary string of an id as stored in tokenizer.json (e.g. "Ġhello", "▁the",
  // "<0x0A>", "<|im_end|>"), or "" when the id does not exist.
  std::string token_text(int32_t id) const;
  // The bytes an id stands for in the middle of a text: byte-level characters mapped back to
  // bytes, "▁" to a space, "<0xNN>" to that byte (so a lone piece of a UTF-8 character is
  // returned as is, not repaired). Special tokens give their content. For grammar masks.
  std::string token_bytes(int32_t id) const;
  // Id of a vocabulary string or added token, or -1.
  int32_t id_of(std::string_view token) const;
  // Size of the id space: one past the largest id of the model vocabulary and added tokens.
  int32_t vocab_size() const { return vocab_size_; }
  // True when id is an added token marked special.
  bool is_special(int32_t id) const;
  // True when the decoder turns this id into a raw byte (a "<0xNN>" token under a ByteFallback
  // decoder). A run of such bytes decodes as a whole: invalid UTF-8 anywhere in the run turns
  // every byte of it into U+FFFD, so streaming must not show a run before it ends.
  bool is_byte_token(int32_t id) const;

  // BOS id from tokenizer_config.json's bos_token, or -1.
  int32_t bos_id() const { return bos_id_; }
  // EOS ids: tokenizer_config.json's eos_token, then generation_config.json's eos_token_id
  // (int or list), without duplicates. May be empty.
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  // The ids encode() puts before the text when add_special_tokens is set.
  const std::vector<int32_t>& special_prefix() const { return prefix_; }

 private:
  Tokenizer();
  void encode_segment(std::string_view segment, bool at_origin, std::vector<int32_t>& out) const;

  std::unique_ptr<tok::AddedVocabulary> added_;
  std::unique_ptr<tok::Normalizer> normalizer_;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<tok::BpeModel> model_;
  std::unique_ptr<tok::Decoder> decoder_;
  std::vector<int32_t> prefix_, suffix_;
  std::vector<int32_t> eos_ids_;
  int32_t bos_id_ = -1;
  int32_t vocab_size_ = 0;
  bool byte_level_decoder_ = false;
  bool byte_fallback_decoder_ = false;
};

}  // namespace fg

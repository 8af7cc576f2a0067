// Added tokens of tokenizer.json ("added_tokens"): strings such as <|im_start|> that are cut
// out of the input before normalization/pre-tokenization and map straight to their ids.
// Matching is leftmost-longest over all tokens of one set (normalized or not), then each
// match's flags apply: single_word (no word character may touch it), lstrip / rstrip (the
// token swallows the whitespace on its left / right).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/string_map.h"

namespace fg::tok {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  // What the token matches in normalized text and decodes to: the content passed through the
  // normalizer when `normalized` is set (Hugging Face does both), else the content itself.
  std::string text;
};

// A piece of input: either plain text [begin, end) or an added token (id >= 0) that covered
// [begin, end) (including any whitespace it swallowed).
struct TextSplit {
  size_t begin;
  size_t end;
  int32_t id;  // -1 for plain text
};

class AddedVocabulary {
 public:
  // Parses the "added_tokens" list (`where` names the file). Ids are assigned the way Hugging
  // Face does when it loads a tokenizer.json (the "id" fields are not used): a token already in
  // the model vocabulary keeps that id; the others get the next id after the model vocabulary
  // (`model_vocab_len` entries) or after the last added token, in list order. For files written
  // by Hugging Face this reproduces the stored ids.
  // `normalize` (may be empty) is the tokenizer's normalizer.
  Status load(const nlohmann::json& added_tokens, const std::string& where,
              const std::function<int32_t(std::string_view)>& model_token_to_id, int32_t model_vocab_len,
              const std::function<std::string(std::string_view)>& normalize);

  // Splits `text` on the tokens whose `normalized` flag equals `normalized_set`. Appends the
  // splits in order; they cover text exactly. Empty text gives no splits.
  void split(std::string_view text, bool normalized_set, std::vector<TextSplit>& out) const;

  const AddedToken* find_id(int32_t id) const;
  const AddedToken* find_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool empty() const { return tokens_.empty(); }

 private:
  // A byte trie over one set of token strings.
  struct Trie {
    std::unordered_map<uint64_t, int32_t> edges;  // (node << 8 | byte) -> child node
    std::vector<int32_t> terminal;                // token index ending at each node, or -1
    bool first_byte[256] = {};
    Trie() : terminal(1, -1) {}
    void insert(std::string_view s, int32_t token_index);
    // Length of the longest token starting at text[i] and its index, or {0, -1}.
    std::pair<size_t, int32_t> longest_at(std::string_view text, size_t i) const;
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  StringMap<size_t> by_content_;
  Trie normalized_trie_, raw_trie_;
  bool has_normalized_ = false, has_raw_ = false;
};

}  // namespace fg::tok

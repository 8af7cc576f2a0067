// GrammarVocab: a tokenizer's vocabulary as the grammar layer sees it, built once per model and
// shared by every grammar: each token's bytes (Tokenizer::token_bytes), which tokens may appear
// inside grammar text, the EOS ids, and a byte trie over the text tokens laid out in preorder so
// a walk can skip a whole subtree (every token sharing a dead prefix) with one jump.
// Special tokens are never text, except the ones named in the options (tool-call markers such as
// Mistral's [TOOL_CALLS], which a tool-call grammar spells as literal text).
// Immutable after build; must never depend on a grammar.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace fg {
class Tokenizer;
}

namespace fg::grammar {

struct GrammarVocabOptions {
  // EOS ids allowed when the grammar is complete; empty: the tokenizer's eos_ids().
  std::vector<int32_t> eos_ids;
  // Special tokens (by content) that count as text: the grammar may match their content.
  std::vector<std::string> special_tokens_as_text;
  // Bits in a mask when the model's logits are wider than the tokenizer's id space (padded LM
  // heads); ids past the tokenizer are never allowed. 0: the tokenizer's vocab_size().
  int32_t mask_size = 0;
};

class GrammarVocab {
 public:
  // One node of the trie, in preorder. Node 0 is the root (the empty prefix); the nodes of a
  // node's subtree are [index + 1, subtree_end).
  struct TrieNode {
    int32_t subtree_end = 0;
    int32_t ids_begin = 0, ids_end = 0;  // tokens whose bytes end here: trie_ids()[ids_begin, ids_end)
    int32_t depth = 0;                   // bytes from the root
    uint8_t byte = 0;                    // the byte on the edge from the parent
  };

  // Errors: kInvalidArgument when an option names a token the tokenizer lacks or the mask size
  // is smaller than the tokenizer's id space.
  static Result<std::shared_ptr<const GrammarVocab>> build(const Tokenizer& tokenizer,
                                                           const GrammarVocabOptions& options = {});
  // A vocabulary of explicit byte strings (id = index): for tests. `non_text` ids are excluded
  // from grammar text (as special tokens are).
  static std::shared_ptr<const GrammarVocab> from_tokens(std::vector<std::string> tokens, std::vector<int32_t> eos_ids,
                                                         std::vector<int32_t> non_text = {});

  int32_t size() const { return size_; }  // bits in a mask
  int32_t mask_words() const { return (size_ + 31) / 32; }
  std::string_view token(int32_t id) const {
    return {bytes_.data() + offsets_[size_t(id)], size_t(offsets_[size_t(id) + 1] - offsets_[size_t(id)])};
  }
  int32_t num_tokens() const { return int32_t(offsets_.size() - 1); }
  bool is_text(int32_t id) const {
    return id >= 0 && id < num_tokens() && (text_mask_[size_t(id) >> 5] >> (id & 31)) & 1;
  }
  bool is_eos(int32_t id) const;
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  // Bit i set when token i is text. [mask_words()] u32.
  const std::vector<uint32_t>& text_mask() const { return text_mask_; }
  int32_t num_text_tokens() const { return num_text_; }

  const std::vector<TrieNode>& trie() const { return trie_; }
  std::span<const int32_t> trie_ids(const TrieNode& n) const {
    return {trie_ids_.data() + n.ids_begin, size_t(n.ids_end - n.ids_begin)};
  }

 private:
  void finish(std::vector<int32_t> eos, const std::vector<char>& text);

  int32_t size_ = 0;
  std::string bytes_;
  std::vector<int64_t> offsets_;  // [num_tokens + 1]
  std::vector<uint32_t> text_mask_;
  std::vector<int32_t> eos_ids_;
  int32_t num_text_ = 0;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_ids_;
};

}  // namespace fg::grammar

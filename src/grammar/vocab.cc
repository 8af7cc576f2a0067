// GrammarVocab: token bytes, text tokens and the preorder byte trie (see vocab.h).
#include "grammar/vocab.h"

#include <algorithm>
#include <numeric>

#include "tokenizer/tokenizer.h"

namespace fg::grammar {

Result<std::shared_ptr<const GrammarVocab>> GrammarVocab::build(const Tokenizer& tokenizer,
                                                                const GrammarVocabOptions& options) {
  auto v = std::make_shared<GrammarVocab>();
  const int32_t n = tokenizer.vocab_size();
  v->size_ = options.mask_size > 0 ? options.mask_size : n;
  if (v->size_ < n)
    return invalid_argument("grammar mask size " + std::to_string(options.mask_size) +
                            " is smaller than the tokenizer's " + std::to_string(n) + " ids");
  std::vector<char> text(size_t(n), 0);
  v->offsets_.reserve(size_t(n) + 1);
  v->offsets_.push_back(0);
  for (int32_t id = 0; id < n; ++id) {
    const std::string b = tokenizer.token_bytes(id);
    v->bytes_ += b;
    v->offsets_.push_back(int64_t(v->bytes_.size()));
    text[size_t(id)] = !b.empty() && !tokenizer.is_special(id);
  }
  for (const std::string& s : options.special_tokens_as_text) {
    const int32_t id = tokenizer.id_of(s);
    if (id < 0) return invalid_argument("the tokenizer has no token '" + s + "' to use as grammar text");
    text[size_t(id)] = !v->token(id).empty();
  }
  std::vector<int32_t> eos = options.eos_ids.empty() ? tokenizer.eos_ids() : options.eos_ids;
  for (int32_t id : eos)
    if (id < 0 || id >= v->size_)
      return invalid_argument("EOS id " + std::to_string(id) + " is outside the vocabulary");
  v->finish(std::move(eos), text);
  return std::shared_ptr<const GrammarVocab>(std::move(v));
}

std::shared_ptr<const GrammarVocab> GrammarVocab::from_tokens(std::vector<std::string> tokens,
                                                              std::vector<int32_t> eos_ids,
                                                              std::vector<int32_t> non_text) {
  auto v = std::make_shared<GrammarVocab>();
  v->size_ = int32_t(tokens.size());
  std::vector<char> text(tokens.size(), 0);
  v->offsets_.push_back(0);
  for (size_t id = 0; id < tokens.size(); ++id) {
    v->bytes_ += tokens[id];
    v->offsets_.push_back(int64_t(v->bytes_.size()));
    text[id] = !tokens[id].empty();
  }
  for (int32_t id : non_text) text[size_t(id)] = 0;
  v->finish(std::move(eos_ids), text);
  return v;
}

bool GrammarVocab::is_eos(int32_t id) const {
  return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
}

void GrammarVocab::finish(std::vector<int32_t> eos, const std::vector<char>& text) {
  std::sort(eos.begin(), eos.end());
  eos.erase(std::unique(eos.begin(), eos.end()), eos.end());
  eos_ids_ = std::move(eos);
  text_mask_.assign(size_t(mask_words()), 0);
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < int32_t(text.size()); ++id) {
    if (!text[size_t(id)] || is_eos(id)) continue;
    text_mask_[size_t(id) >> 5] |= uint32_t(1) << (id & 31);
    ids.push_back(id);
  }
  num_text_ = int32_t(ids.size());
  std::sort(ids.begin(), ids.end(),
            [&](int32_t a, int32_t b) { return token(a) < token(b) || (token(a) == token(b) && a < b); });

  // Preorder trie from the sorted byte strings: `open` holds the path to the last token's node.
  trie_.clear();
  trie_ids_.clear();
  trie_.push_back(TrieNode{});
  std::vector<int32_t> open{0};
  std::string_view prev;
  for (int32_t id : ids) {
    const std::string_view s = token(id);
    size_t lcp = 0;
    while (lcp < s.size() && lcp < prev.size() && s[lcp] == prev[lcp]) ++lcp;
    while (open.size() - 1 > lcp) {
      trie_[size_t(open.back())].subtree_end = int32_t(trie_.size());
      open.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {
      TrieNode node;
      node.depth = int32_t(d + 1);
      node.byte = uint8_t(s[d]);
      node.ids_begin = node.ids_end = -1;
      open.push_back(int32_t(trie_.size()));
      trie_.push_back(node);
    }
    TrieNode& leaf = trie_[size_t(open.back())];
    if (leaf.ids_begin < 0) leaf.ids_begin = leaf.ids_end = int32_t(trie_ids_.size());
    trie_ids_.push_back(id);
    leaf.ids_end = int32_t(trie_ids_.size());
    prev = s;
  }
  while (!open.empty()) {
    trie_[size_t(open.back())].subtree_end = int32_t(trie_.size());
    open.pop_back();
  }
  for (TrieNode& n : trie_)
    if (n.ids_begin < 0) n.ids_begin = n.ids_end = 0;
}

}  // namespace fg::grammar

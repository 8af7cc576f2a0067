// Added-token matching (see added_vocabulary.h).
#include "tokenizer/added_vocabulary.h"

#include <unicode/uchar.h>

#include <nlohmann/json.hpp>

#include "tokenizer/component_json.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace fg::tok {

namespace {

// A "word" character for single_word: Alphabetic, marks, decimal digits, connector punctuation
// and the zero-width joiners (the Unicode definition of \w).
bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;
  const auto cp = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(cp, UCHAR_ALPHABETIC)) return true;
  const int8_t t = u_charType(cp);
  return t == U_NON_SPACING_MARK || t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK ||
         t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view s, int32_t token_index) {
  int32_t node = 0;
  for (unsigned char b : s) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | b;
    auto it = edges.find(key);
    if (it == edges.end()) {
      const auto child = static_cast<int32_t>(terminal.size());
      terminal.push_back(-1);
      edges.emplace(key, child);
      node = child;
    } else {
      node = it->second;
    }
  }
  first_byte[static_cast<unsigned char>(s[0])] = true;
  terminal[static_cast<size_t>(node)] = token_index;
}

std::pair<size_t, int32_t> AddedVocabulary::Trie::longest_at(std::string_view text, size_t i) const {
  std::pair<size_t, int32_t> best{0, -1};
  int32_t node = 0;
  for (size_t k = i; k < text.size(); ++k) {
    auto it = edges.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[k]));
    if (it == edges.end()) break;
    node = it->second;
    if (terminal[static_cast<size_t>(node)] >= 0) best = {k + 1 - i, terminal[static_cast<size_t>(node)]};
  }
  return best;
}

Status AddedVocabulary::load(const nlohmann::json& list, const std::string& where,
                             const std::function<int32_t(std::string_view)>& model_token_to_id, int32_t model_vocab_len,
                             const std::function<std::string(std::string_view)>& normalize) {
  if (list.is_null()) return Status::ok();
  if (!list.is_array()) return invalid_argument(where + ": 'added_tokens' must be a list");
  int32_t max_added = -1;
  for (const auto& j : list) {
    AddedToken t;
    const std::string ctx = where + ": added token";
    FG_RETURN_IF_ERROR(json_get(j, "content", t.content, ctx));
    if (t.content.empty())
      return invalid_argument(ctx + " " + j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                              " needs a non-empty 'content'");
    FG_RETURN_IF_ERROR(json_get(j, "special", t.special, ctx));
    FG_RETURN_IF_ERROR(json_get(j, "single_word", t.single_word, ctx));
    FG_RETURN_IF_ERROR(json_get(j, "lstrip", t.lstrip, ctx));
    FG_RETURN_IF_ERROR(json_get(j, "rstrip", t.rstrip, ctx));
    FG_RETURN_IF_ERROR(json_get(j, "normalized", t.normalized, ctx));
    if (!utf8_is_valid(t.content))
      return invalid_argument(ctx + " " + j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                              " is not valid UTF-8");
    if (by_content_.count(t.content)) continue;  // the first definition wins
    t.id = model_token_to_id(t.content);
    if (t.id < 0) t.id = max_added >= model_vocab_len ? max_added + 1 : model_vocab_len;
    max_added = std::max(max_added, t.id);
    t.text = t.normalized && normalize ? normalize(t.content) : t.content;
    const size_t index = tokens_.size();
    by_id_.emplace(t.id, index);
    by_content_.emplace(t.content, index);
    if (t.text.empty()) {
      tokens_.push_back(std::move(t));
      continue;  // normalized away: can never match
    }
    (t.normalized ? normalized_trie_ : raw_trie_).insert(t.text, static_cast<int32_t>(index));
    (t.normalized ? has_normalized_ : has_raw_) = true;
    tokens_.push_back(std::move(t));
  }
  return Status::ok();
}

const AddedToken* AddedVocabulary::find_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::find_content(std::string_view content) const {
  auto it = by_content_.find(content);
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

void AddedVocabulary::split(std::string_view text, bool normalized_set, std::vector<TextSplit>& out) const {
  if (text.empty()) return;
  const Trie& trie = normalized_set ? normalized_trie_ : raw_trie_;
  if (!(normalized_set ? has_normalized_ : has_raw_)) {
    out.push_back({0, text.size(), -1});
    return;
  }
  size_t emitted = 0;  // end of the last split pushed
  size_t i = 0;
  while (i < text.size()) {
    if (!trie.first_byte[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    const auto [len, index] = trie.longest_at(text, i);
    if (index < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = tokens_[static_cast<size_t>(index)];
    size_t start = i, stop = i + len;
    i = stop;  // matches never overlap: the scan resumes after this one
    if (tok.single_word) {
      bool word_before = false, word_after = false;
      if (start > 0) {
        size_t p = start;
        word_before = is_word_char(utf8_prev(text, p));
      }
      if (stop < text.size()) {
        size_t p = stop;
        word_after = is_word_char(utf8_next(text, p));
      }
      if (word_before || word_after) continue;
    }
    if (tok.lstrip) {
      size_t p = start;
      while (p > 0) {
        size_t q = p;
        if (!unicode_is_whitespace(utf8_prev(text, q))) break;
        p = q;
      }
      start = std::max(p, emitted);
    }
    if (tok.rstrip) {
      while (stop < text.size()) {
        size_t q = stop;
        if (!unicode_is_whitespace(utf8_next(text, q))) break;
        stop = q;
      }
    }
    if (emitted < start) out.push_back({emitted, start, -1});
    out.push_back({start, stop, tok.id});
    emitted = stop;
  }
  if (emitted < text.size()) out.push_back({emitted, text.size(), -1});
}

}  // namespace fg::tok

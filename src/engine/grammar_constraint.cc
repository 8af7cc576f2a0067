// GrammarConstraint (see grammar_constraint.h).
#include "engine/grammar_constraint.h"

#include <algorithm>

namespace fg {

GrammarConstraint::GrammarConstraint(std::shared_ptr<const grammar::TokenGrammar> grammar, const Tokenizer& tokenizer)
    : matcher_(std::move(grammar)), tokenizer_(tokenizer) {}

grammar::ForcedTokens GrammarConstraint::forced() {
  if (matcher_.is_terminated()) return {};
  return grammar::jump_forward_tokens(matcher_, tokenizer_, emitted_);
}

void GrammarConstraint::fill_mask(std::span<uint32_t> words) {
  const grammar::ForcedTokens f = forced();
  if (!f.ids.empty() && f.skipped_bytes == 0) {
    // Forced text: only its canonical first token (the one jump-forward would feed).
    std::fill(words.begin(), words.end(), 0u);
    const int32_t id = f.ids.front();
    words[size_t(id) >> 5] |= 1u << (id & 31);
    return;
  }
  matcher_.fill_mask(words);
}

bool GrammarConstraint::accept(int32_t token) {
  if (!matcher_.accept_token(token)) return false;
  emitted_.push_back(token);
  return true;
}

void GrammarConstraint::forced_tokens(std::vector<int32_t>& out) {
  const grammar::ForcedTokens f = forced();
  if (f.skipped_bytes != 0) return;  // the model writes those bytes first
  for (int32_t id : f.ids) {
    if (!accept(id)) return;  // cannot happen: jump_forward_tokens checks each id
    out.push_back(id);
  }
}

}  // namespace fg

// GrammarConstraint: a grammar (grammar/matcher.h) as the engine's TokenConstraint. Besides the
// grammar's own masks it makes forced text canonical: where the grammar admits a single
// continuation, the tokens that spell it are the tokenizer's own ids for the whole text
// (grammar::jump_forward_tokens re-tokenizes the boundary), and
//  - with jump-forward, forced_tokens() appends them at once (one multi-token query next step);
//  - without it, fill_mask allows only the first of them, so sampling writes the same ids one
//    step at a time.
// Either way the request gets the same tokens, and the model never sees a split of forced text
// it was not trained on. Engine thread only (one object per request).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/token_constraint.h"
#include "grammar/jump_forward.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace fg {

class GrammarConstraint final : public TokenConstraint {
 public:
  // The tokenizer must outlive the constraint.
  GrammarConstraint(std::shared_ptr<const grammar::TokenGrammar> grammar, const Tokenizer& tokenizer);

  void fill_mask(std::span<uint32_t> words) override;
  bool accept(int32_t token) override;
  void forced_tokens(std::vector<int32_t>& out) override;

  const grammar::GrammarMatcher& matcher() const { return matcher_; }

 private:
  grammar::ForcedTokens forced();

  grammar::GrammarMatcher matcher_;
  const Tokenizer& tokenizer_;
  std::vector<int32_t> emitted_;  // the request's output so far
};

}  // namespace fg

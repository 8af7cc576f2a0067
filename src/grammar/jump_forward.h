// Jump-forward: when the grammar admits a single continuation (GrammarMatcher::
// forced_continuation), the engine appends it as one multi-token query instead of sampling it
// token by token. The ids must be the ones the tokenizer would give for the whole text, or the
// model sees a tokenization it was never trained on. So the boundary is re-tokenized: the last
// emitted tokens' text plus the forced text is encoded, and only the ids past the emitted text
// are kept, and only where the encoding agrees with what was emitted:
//   - forced bytes that the tokenizer would merge into the last emitted token (a token straddles
//     the boundary) are left for the model to produce (skipped_bytes);
//   - the last forced token is held back unless the grammar ends with it, because the text the
//     model writes next may merge with it;
//   - a trailing incomplete UTF-8 character is left out.
// Must never change the matcher's state (the engine accepts the ids it feeds).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace fg {
class Tokenizer;
}

namespace fg::grammar {

class GrammarMatcher;

struct JumpForwardOptions {
  int context_tokens = 8;  // emitted tokens re-encoded with the forced text
  size_t max_forced_bytes = 256;
  bool hold_back_last = true;  // keep the last forced token for the model (see above)
};

struct ForcedTokens {
  std::vector<int32_t> ids;  // to append, in order
  size_t skipped_bytes = 0;  // forced bytes before the ids, left for the model
  size_t bytes = 0;          // forced bytes the ids spell
};

// Ids for `forced` after the `emitted` ids (the request's output so far, or its last tokens).
ForcedTokens forced_token_ids(const Tokenizer& tokenizer, std::span<const int32_t> emitted, std::string_view forced,
                              const JumpForwardOptions& options = {}, bool grammar_ends_after = false);

// The matcher's forced continuation as ids (matcher unchanged; each id checked against it).
// Cost: one forced_continuation walk and one encode of about context_tokens + forced text.
ForcedTokens jump_forward_tokens(GrammarMatcher& matcher, const Tokenizer& tokenizer, std::span<const int32_t> emitted,
                                 const JumpForwardOptions& options = {});

}  // namespace fg::grammar

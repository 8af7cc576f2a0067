// Jump-forward re-tokenization (see jump_forward.h).
#include "grammar/jump_forward.h"

#include <string>

#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace fg::grammar {

ForcedTokens forced_token_ids(const Tokenizer& tok, std::span<const int32_t> emitted, std::string_view forced,
                              const JumpForwardOptions& o, bool grammar_ends_after) {
  ForcedTokens out;
  const std::string_view f = forced.substr(0, tok::utf8_complete_prefix(forced));
  if (f.empty()) return out;
  if (f.size() < forced.size()) grammar_ends_after = false;
  // Context: the last emitted tokens, after the last special token (encode splits at those anyway).
  size_t first = emitted.size() > size_t(o.context_tokens) ? emitted.size() - size_t(o.context_tokens) : 0;
  for (size_t i = emitted.size(); i-- > first;) {
    if (tok.is_special(emitted[i])) {
      first = i + 1;
      break;
    }
  }
  const std::span<const int32_t> ctx = emitted.subspan(first);
  std::string text;
  for (int32_t id : ctx) text += tok.token_bytes(id);
  text += f;
  const std::vector<int32_t> ids = tok.encode(text, false);

  // Tokens lying wholly inside the forced text, found from the end (robust to tokenizers that
  // add a prefix space at the start of a text).
  size_t j = ids.size(), suffix = 0;
  while (j > 0) {
    const size_t n = tok.token_bytes(ids[j - 1]).size();
    if (n == 0 || suffix + n > f.size()) break;
    suffix += n;
    --j;
  }
  size_t skipped = f.size() - suffix;
  // A boundary on the emitted side that the encoding does not share: keep nothing next to it.
  if (skipped == 0 && j < ids.size() && !ctx.empty() && (j == 0 || ids[j - 1] != ctx.back())) {
    skipped += tok.token_bytes(ids[j]).size();
    ++j;
  }
  size_t end = ids.size();
  if (o.hold_back_last && !grammar_ends_after && end > j) --end;
  std::string spelled;
  for (size_t k = j; k < end; ++k) spelled += tok.token_bytes(ids[k]);
  if (f.substr(skipped, spelled.size()) != spelled) return out;  // the tokenizer changed the text
  out.ids.assign(ids.begin() + std::ptrdiff_t(j), ids.begin() + std::ptrdiff_t(end));
  out.skipped_bytes = skipped;
  out.bytes = spelled.size();
  return out;
}

ForcedTokens jump_forward_tokens(GrammarMatcher& m, const Tokenizer& tok, std::span<const int32_t> emitted,
                                 const JumpForwardOptions& o) {
  const std::string forced = m.forced_continuation(o.max_forced_bytes);
  if (forced.empty()) return {};
  bool ends = false;
  if (m.accept_bytes(forced)) {
    ends = m.is_terminated();
    m.rollback(1);
  }
  ForcedTokens out = forced_token_ids(tok, emitted, forced, o, ends);
  if (out.skipped_bytes > 0) {
    // The model writes the skipped bytes first; the ids only fit after them.
    out.ids.clear();
    out.bytes = 0;
    return out;
  }
  size_t accepted = 0;
  for (int32_t id : out.ids) {
    if (!m.accept_token(id)) break;
    ++accepted;
  }
  m.rollback(int(accepted));
  if (accepted < out.ids.size()) {
    out.ids.resize(accepted);
    out.bytes = 0;
    for (int32_t id : out.ids) out.bytes += tok.token_bytes(id).size();
  }
  return out;
}

}  // namespace fg::grammar

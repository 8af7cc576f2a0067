// GrammarMatcher: the grammar state of one request. It follows the tokens the request emits
// (accept_token), says which tokens may come next (fill_mask), what text the grammar forces
// next (forced_continuation, for jump-forward), and steps back over tokens (rollback, for
// speculative decoding and jump-forward runs the engine cuts short).
//
// The state is a set of pushdown stacks over the grammar's rule automata (stack.h) after each
// accepted token; a token is its bytes fed one at a time, so tokens that span terminals and
// characters split across tokens need nothing special. fill_mask costs one pass over the mask
// words plus, per stack top, the position's cached token set (token_grammar.h) and a walk of the
// few tokens whose fate depends on the stack.
//
// One matcher per request, used by one thread at a time (the engine may compute step N+1's mask
// on a worker thread while the GPU runs step N); many matchers share one TokenGrammar.
// Must never touch logits or the tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/stack.h"
#include "grammar/token_grammar.h"

namespace fg::grammar {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const TokenGrammar> grammar);

  // Advances over token `id`. Returns false, leaving the state unchanged, when the grammar does
  // not allow it (a special token, or bytes the grammar cannot read here, or EOS before the
  // grammar is complete, or anything after termination). An EOS id is allowed exactly when
  // accepted() and terminates the matcher.
  bool accept_token(int32_t id);
  // Advances over raw bytes as one step (rollback counts it as one token). For tests and for
  // text the engine appends itself. False, state unchanged, when the bytes do not fit.
  bool accept_bytes(std::string_view bytes);

  // Writes the allowed-token bitmask: bit (id & 31) of words[id >> 5] is set when id may come
  // next. EOS ids are set exactly when accepted(); after termination only they are set. words
  // must hold vocab().mask_words() u32; any further words are cleared.
  void fill_mask(std::span<uint32_t> words);

  // The text so far is a complete sentence of the grammar: EOS may come now.
  bool accepted() const { return snap().can_end || snap().terminated; }
  // EOS was accepted, or the text is complete and no byte can follow it. The request ends.
  bool is_terminated() const { return snap().terminated || (snap().can_end && snap().count == 0); }

  // The bytes the grammar admits as the only continuation, up to max_bytes: it stops where two
  // bytes are possible or the grammar could end. Empty when nothing is forced.
  std::string forced_continuation(size_t max_bytes = 256);

  // Undoes the last n accepted tokens (n <= num_tokens()).
  void rollback(int n);
  // Tokens accepted since construction or reset (the depth rollback can reach).
  int num_tokens() const { return int(snaps_.size()) - 1; }
  void reset();

  // Fewest bytes that complete the grammar from here (0 when accepted()). Tests use it to steer
  // random walks to an end.
  int64_t min_bytes_to_end() const;
  // Whether `bytes` could be accepted now (state unchanged).
  bool can_accept_bytes(std::string_view bytes);

  const TokenGrammar& token_grammar() const { return *tg_; }
  const GrammarVocab& vocab() const { return tg_->vocab(); }

 private:
  struct Snapshot {
    int32_t offset = 0;  // tops_ [offset, offset + count)
    int32_t count = 0;
    bool can_end = false;
    bool terminated = false;
  };
  const Snapshot& snap() const { return snaps_.back(); }
  std::span<const int32_t> current_tops() const { return {tops_.data() + snap().offset, size_t(snap().count)}; }
  // Runs `bytes` from `from`; true when they fit. Leaves the resulting tops in run_ and the end
  // flag in run_end_.
  bool run(std::span<const int32_t> from, std::string_view bytes);
  void push_state(std::span<const int32_t> tops, bool can_end, bool terminated);

  std::shared_ptr<const TokenGrammar> tg_;
  const Grammar& g_;
  FrameArena arena_;
  FrameStepper stepper_;
  std::vector<int32_t> tops_;  // the tops of every snapshot, back to back
  std::vector<Snapshot> snaps_;
  std::vector<int32_t> run_;
  bool run_end_ = false;
  std::vector<int32_t> scratch_, nodes_seen_;
  std::vector<uint64_t> refined_seen_;
};

}  // namespace fg::grammar

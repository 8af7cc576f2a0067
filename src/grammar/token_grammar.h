// TokenGrammar: a Grammar bound to a vocabulary, with every token decided once per grammar
// position wherever the decision does not depend on the stack. Built once per (grammar,
// vocabulary) and shared, read-only, by every GrammarMatcher of that grammar.
//
// For a position p (a node with byte edges) each text token is walked over the vocabulary trie
// from the stack "p over an unknown caller". Leaving p's rule continues at the rule's return
// nodes (Grammar::return_nodes); when there is one, the continuation is known exactly. A token is
//   accepted   when some path consumes it exactly (never leaving through a choice of callers);
//   rejected   when no path consumes it, whatever the callers;
//   uncertain  otherwise: it fits only if the real caller allows the rest of it.
// Uncertain tokens are classified again per (p, return node) — the matcher knows the node under
// its top frame — and only the few still uncertain there (tokens that leave two rules with several
// callers each) are walked against the real stack at mask time. The trie walk shares work through
// a lazily built automaton over sets of symbolic stacks, so each (stack set, byte) step is
// computed once per build. Positions are decided at build, or on first use past a budget.
// Must never hold per-request state.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/vocab.h"

namespace fg::grammar {

// A set of text tokens in whichever form is smallest for its size.
struct TokenSet {
  enum class Form : uint8_t { kIds, kAllTextExcept, kBitmask };
  Form form = Form::kIds;
  std::vector<int32_t> ids;     // kIds: the members; kAllTextExcept: the text tokens left out (sorted)
  std::vector<uint32_t> words;  // kBitmask: [mask_words] u32

  // ORs the set into `mask` ([mask_words] u32). `scratch` is reused between calls.
  void add_to(uint32_t* mask, const std::vector<uint32_t>& text_mask, std::vector<int32_t>& scratch) const;
  size_t memory_bytes() const { return ids.capacity() * 4 + words.capacity() * 4; }
};

// The uncertain tokens of a position, decided again under one return node.
struct RefinedTokens {
  int32_t return_node = 0;  // Grammar::kEndOfInput for the end of input
  std::vector<int32_t> accepted;
  std::vector<int32_t> uncertain;  // still to walk against the real stack
};

struct PositionTokens {
  TokenSet accepted;
  std::vector<int32_t> uncertain;      // sorted by bytes
  std::vector<RefinedTokens> refined;  // one per return node of the rule, when uncertain is not empty

  const RefinedTokens* refined_for(int32_t return_node) const {
    for (const RefinedTokens& r : refined)
      if (r.return_node == return_node) return &r;
    return nullptr;
  }
};

struct TokenGrammarOptions {
  // Broad positions (reading 128 or more distinct first bytes, as string contents do) each walk
  // most of the vocabulary trie. This many are decided when the TokenGrammar is built; the rest
  // (long counted strings, schemas with hundreds of string fields) on first use. Narrow positions
  // are always decided at build.
  int64_t eager_broad_positions = 256;
};

struct TokenGrammarStats {
  int64_t positions = 0;         // nodes with byte edges
  int64_t decided = 0;           // positions decided at build
  int64_t uncertain_tokens = 0;  // summed over decided positions
  int64_t refined_entries = 0;   // (position, return node) pairs
  int64_t still_uncertain = 0;   // summed over refined entries
  int64_t symbolic_states = 0;   // states of the walk automaton after build
  int64_t memory_bytes = 0;      // of the token sets kept
  double build_ms = 0;
};

class WalkAutomaton;

class TokenGrammar {
 public:
  static std::shared_ptr<const TokenGrammar> build(std::shared_ptr<const Grammar> grammar,
                                                   std::shared_ptr<const GrammarVocab> vocab,
                                                   const TokenGrammarOptions& options = {});
  ~TokenGrammar();

  const Grammar& grammar() const { return *grammar_; }
  const GrammarVocab& vocab() const { return *vocab_; }
  // The decisions for a node with byte edges. Decided on first use when the build left it out;
  // safe to call from many threads (the first caller of an undecided position does the walk).
  const PositionTokens& position(int32_t node) const {
    if (ready_[size_t(node)].load(std::memory_order_acquire)) return positions_[size_t(node)];
    return decide(node);
  }
  const TokenGrammarStats& stats() const { return stats_; }

 private:
  TokenGrammar() = default;
  const PositionTokens& decide(int32_t node) const;
  void decide_locked(int32_t node) const;

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const GrammarVocab> vocab_;
  TokenGrammarStats stats_;
  // Filled once per position under mu_ and published through ready_.
  mutable std::vector<PositionTokens> positions_;  // [num_nodes]
  mutable std::unique_ptr<std::atomic<uint8_t>[]> ready_;
  mutable std::mutex mu_;
  mutable std::unique_ptr<WalkAutomaton> walk_;
  mutable std::vector<int32_t> depth_state_;
};

}  // namespace fg::grammar

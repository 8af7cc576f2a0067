// The one grammar representation every front end (JSON Schema, regex, GBNF, tool calls) compiles
// to: a context-free grammar over bytes whose rules are automata. An edge of a rule either reads
// one byte of a range or calls another rule; GrammarMatcher runs the rules as a pushdown
// automaton whose stack frames are (node, caller frame). Nodes are numbered globally, so a node id
// is a "grammar position" that the token caches (token_grammar.h) are keyed by.
//
// A Grammar is built only by GrammarBuilder (grammar_builder.h), which proves what the matcher
// relies on: no left recursion, every rule matches some string, every node can still reach the end
// of its rule. It is immutable and safe to share between threads.
// This file must never know about tokenizers or token ids.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fg::grammar {

// One edge of a rule automaton. Byte edges read one byte in [lo, hi]; call edges (rule >= 0)
// match a whole string of `rule` and then continue at `target`.
struct GrammarEdge {
  int32_t target = -1;  // node id, in the same rule
  int32_t rule = -1;    // -1: byte edge; otherwise the rule called
  uint8_t lo = 0, hi = 0;
};

struct GrammarNode {
  int32_t rule = -1;        // the rule this node belongs to
  int32_t edges_begin = 0;  // byte edges [edges_begin, calls_begin), sorted by lo
  int32_t calls_begin = 0;  // call edges [calls_begin, edges_end)
  int32_t edges_end = 0;    //
  bool accepting = false;   // the rule may end here
  bool tail = false;        // accepting with no edges: a call returning here returns to its caller's caller
  int32_t min_bytes = 0;    // fewest bytes from here to the end of the rule (calls included)
};

struct GrammarRule {
  std::string name;
  int32_t start = -1;     // node id
  bool nullable = false;  // matches the empty string
};

class Grammar {
 public:
  // Marks the end of input among a rule's return positions (the root's caller).
  static constexpr int32_t kEndOfInput = -1;

  int32_t root() const { return root_; }
  const std::vector<GrammarRule>& rules() const { return rules_; }
  const std::vector<GrammarNode>& nodes() const { return nodes_; }
  const GrammarNode& node(int32_t id) const { return nodes_[size_t(id)]; }
  std::span<const GrammarEdge> byte_edges(int32_t id) const {
    const GrammarNode& n = nodes_[size_t(id)];
    return {edges_.data() + n.edges_begin, size_t(n.calls_begin - n.edges_begin)};
  }
  std::span<const GrammarEdge> call_edges(int32_t id) const {
    const GrammarNode& n = nodes_[size_t(id)];
    return {edges_.data() + n.calls_begin, size_t(n.edges_end - n.calls_begin)};
  }
  // Where a frame of `rule` may return to: return nodes (the node after the call, or with tail
  // calls the caller's own return nodes), and kEndOfInput for the root. Sorted, unique.
  std::span<const int32_t> return_nodes(int32_t rule) const {
    return {callers_.data() + callers_begin_[size_t(rule)],
            size_t(callers_begin_[size_t(rule) + 1] - callers_begin_[size_t(rule)])};
  }

  size_t num_nodes() const { return nodes_.size(); }

  // A readable dump: one line per node with its edges (for tests and debugging).
  std::string to_string() const;

 private:
  friend class GrammarBuilder;
  int32_t root_ = -1;
  std::vector<GrammarRule> rules_;
  std::vector<GrammarNode> nodes_;
  std::vector<GrammarEdge> edges_;
  std::vector<int32_t> callers_begin_;  // [rules + 1] offsets into callers_
  std::vector<int32_t> callers_;
};

}  // namespace fg::grammar

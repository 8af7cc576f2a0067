// GrammarBuilder: the one way to make a Grammar. Front ends declare rules, give each a body (an
// expression, or a graph of states joined by expressions when a body is easier to write as an
// automaton, as JSON objects with optional members are), then build() turns every body into a
// byte automaton (Thompson construction, subset construction, state minimization) and checks
// the grammar as a whole:
//  - rules that match no string are removed with the calls to them; a root that matches nothing
//    is an error;
//  - left recursion (a rule that can call itself before reading a byte) is an error, as in GBNF
//    front ends elsewhere: the matcher's stacks would grow without reading input;
//  - every node keeps the fewest bytes to the end of its rule, every rule its return nodes.
// Minimization matters beyond size: two calls of a rule that continue the same way return to one
// node, and a rule with a single return node has token masks that need no stack context.
// Must never know about tokenizers; must never accept a grammar the matcher could loop on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "grammar/expr.h"
#include "grammar/grammar.h"

namespace fg::grammar {

struct GrammarLimits {
  // Sum of expression weights (about the automaton states before minimization) of all rules.
  int64_t max_weight = 4'000'000;
  // A rule whose subset construction passes this many states keeps its nondeterministic automaton.
  int32_t max_dfa_states = 200'000;
  // Minimization (partition refinement, one pass per round) stops after this many state visits
  // and keeps the automaton as it is: long chains (counted repetitions) refine one state a round.
  int64_t minimize_budget = 1'500'000;
};

// A rule body written as states joined by expressions: state 0 is the start; a string matches
// when some path of expressions from state 0 spells it and ends in an accepting state.
class RuleGraph {
 public:
  RuleGraph() : num_states_(1) {}
  int32_t add_state() { return num_states_++; }
  void connect(int32_t from, int32_t to, Expr e) { arcs_.push_back({from, to, std::move(e)}); }
  void set_accepting(int32_t state) { accepting_.push_back(state); }
  int32_t num_states() const { return num_states_; }

 private:
  friend class GrammarBuilder;
  struct Arc {
    int32_t from, to;
    Expr expr;
  };
  int32_t num_states_;
  std::vector<Arc> arcs_;
  std::vector<int32_t> accepting_;
};

class GrammarBuilder {
 public:
  explicit GrammarBuilder(GrammarLimits limits = {}) : limits_(limits) {}

  // A new rule (body set later, so rules can call each other in any order). Names are for
  // messages and dumps; they need not be unique.
  int32_t add_rule(std::string name);
  void set_body(int32_t rule, Expr body);
  void set_body(int32_t rule, RuleGraph graph);
  // Declares and defines in one call.
  int32_t add_rule(std::string name, Expr body);

  size_t num_rules() const { return rules_.size(); }
  // Total weight of the bodies so far, so a front end can stop before building a huge grammar.
  int64_t weight() const { return weight_; }
  bool over_limit() const { return weight_ > limits_.max_weight; }

  // Errors (kInvalidArgument): a rule without a body, a grammar larger than the limits, a root
  // that matches no string, left recursion (naming a rule on the cycle).
  Result<Grammar> build(int32_t root) const;

 private:
  struct RuleDef {
    std::string name;
    bool defined = false;
    RuleGraph graph;
  };
  GrammarLimits limits_;
  std::vector<RuleDef> rules_;
  int64_t weight_ = 0;
};

}  // namespace fg::grammar

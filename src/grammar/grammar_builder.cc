// GrammarBuilder: expressions -> per-rule automata -> one checked Grammar (see grammar_builder.h).
#include "grammar/grammar_builder.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <unordered_map>

namespace fg::grammar {

namespace {

constexpr int32_t kInf = INT32_MAX / 4;

// ---- Thompson construction

struct NfaEdge {
  int32_t target;
  int32_t rule;  // -1 byte or epsilon
  uint8_t lo, hi;
  bool eps;
};

struct Nfa {
  std::vector<std::vector<NfaEdge>> out;
  std::vector<char> accepting;

  int32_t add() {
    out.emplace_back();
    accepting.push_back(0);
    return int32_t(out.size() - 1);
  }
  void eps(int32_t a, int32_t b) {
    if (a != b) out[size_t(a)].push_back({b, -1, 0, 0, true});
  }
  void byte(int32_t a, int32_t b, uint8_t lo, uint8_t hi) { out[size_t(a)].push_back({b, -1, lo, hi, false}); }
  void call(int32_t a, int32_t b, int32_t rule) { out[size_t(a)].push_back({b, rule, 0, 0, false}); }
};

// Adds edges for `e` from `from` to `to` (from != to). Edges only leave `from` or fresh nodes and
// only enter `to` or fresh nodes; loops live on fresh nodes. So siblings may share from/to, and
// one alternative's loop never leaks into another.
void emit(Nfa& nfa, const Expr& e, int32_t from, int32_t to) {
  switch (e.kind()) {
    case Expr::Kind::kEmpty: nfa.eps(from, to); return;
    case Expr::Kind::kBytes: {
      const ByteSet& s = e.byte_set();
      for (int b = 0; b < 256;) {
        if (!s.test(size_t(b))) {
          ++b;
          continue;
        }
        int end = b;
        while (end + 1 < 256 && s.test(size_t(end + 1))) ++end;
        nfa.byte(from, to, uint8_t(b), uint8_t(end));
        b = end + 1;
      }
      return;
    }
    case Expr::Kind::kChars: {
      // Sequences that end in k unrestricted continuation bytes share one chain of k nodes, so
      // the automaton has one state per "continuation bytes left" whatever the lead byte was.
      int32_t tail[4] = {to, -1, -1, -1};
      auto tail_node = [&](size_t k) {
        for (size_t j = 1; j <= k; ++j) {
          if (tail[j] >= 0) continue;
          tail[j] = nfa.add();
          nfa.byte(tail[j], tail[j - 1], 0x80, 0xBF);
        }
        return tail[k];
      };
      for (const auto& seq : utf8_byte_ranges(e.char_set())) {
        int32_t cur = from;
        for (size_t i = 0; i < seq.size(); ++i) {
          size_t free_rest = 0;
          while (i + 1 + free_rest < seq.size() &&
                 seq[i + 1 + free_rest] == std::make_pair(uint8_t(0x80), uint8_t(0xBF)))
            ++free_rest;
          if (i + 1 + free_rest == seq.size() && free_rest > 0) {
            nfa.byte(cur, tail_node(free_rest), seq[i].first, seq[i].second);
            break;
          }
          const int32_t next = i + 1 == seq.size() ? to : nfa.add();
          nfa.byte(cur, next, seq[i].first, seq[i].second);
          cur = next;
        }
      }
      return;
    }
    case Expr::Kind::kSeq: {
      if (e.items().empty()) {
        nfa.eps(from, to);
        return;
      }
      int32_t cur = from;
      for (size_t i = 0; i < e.items().size(); ++i) {
        const int32_t next = i + 1 == e.items().size() ? to : nfa.add();
        emit(nfa, e.items()[i], cur, next);
        cur = next;
      }
      return;
    }
    case Expr::Kind::kAlt:
      // Alternatives share from and to: no construct adds edges into its `from` or out of its
      // `to` (loops live on fresh nodes), so one alternative's paths cannot run into another's.
      for (const Expr& item : e.items()) emit(nfa, item, from, to);
      return;
    case Expr::Kind::kRepeat: {
      const Expr& item = e.items()[0];
      int32_t cur = from;
      for (int i = 0; i < e.min(); ++i) {
        const int32_t next = nfa.add();
        emit(nfa, item, cur, next);
        cur = next;
      }
      if (e.max() == Expr::kUnbounded) {
        const int32_t loop = nfa.add(), back = nfa.add();
        nfa.eps(cur, loop);
        emit(nfa, item, loop, back);
        nfa.eps(back, loop);
        nfa.eps(loop, to);
        return;
      }
      for (int i = e.min(); i < e.max(); ++i) {
        nfa.eps(cur, to);
        const int32_t next = nfa.add();
        emit(nfa, item, cur, next);
        cur = next;
      }
      nfa.eps(cur, to);
      return;
    }
    case Expr::Kind::kCall:
      FG_CHECK(e.rule() >= 0, "call of an undeclared rule");
      nfa.call(from, to, e.rule());
      return;
  }
}

// ---- automata without epsilons

struct Automaton {
  struct Edge {
    int32_t target;
    int32_t rule;  // -1: byte edge
    uint8_t lo, hi;
  };
  std::vector<std::vector<Edge>> out;
  std::vector<char> accepting;
  int32_t start = 0;
  size_t size() const { return out.size(); }
};

std::vector<std::vector<int32_t>> epsilon_closures(const Nfa& nfa) {
  std::vector<std::vector<int32_t>> closures(nfa.out.size());
  std::vector<int32_t> stack;
  std::vector<int32_t> mark(nfa.out.size(), -1);
  for (int32_t n = 0; n < int32_t(nfa.out.size()); ++n) {
    std::vector<int32_t>& c = closures[size_t(n)];
    stack.assign(1, n);
    mark[size_t(n)] = n;
    while (!stack.empty()) {
      const int32_t x = stack.back();
      stack.pop_back();
      c.push_back(x);
      for (const NfaEdge& e : nfa.out[size_t(x)])
        if (e.eps && mark[size_t(e.target)] != n) {
          mark[size_t(e.target)] = n;
          stack.push_back(e.target);
        }
    }
    std::sort(c.begin(), c.end());
  }
  return closures;
}

// Subset construction. Returns false when the automaton would pass max_states.
bool determinize(const Nfa& nfa, const std::vector<std::vector<int32_t>>& closures, int32_t start, int32_t max_states,
                 Automaton& dfa) {
  std::map<std::vector<int32_t>, int32_t> ids;
  std::vector<std::vector<int32_t>> sets;
  auto intern = [&](std::vector<int32_t> set) -> int32_t {
    auto [it, fresh] = ids.emplace(std::move(set), int32_t(sets.size()));
    if (fresh) sets.push_back(it->first);
    return it->second;
  };
  auto close = [&](const std::vector<int32_t>& targets) {
    std::vector<int32_t> s;
    for (int32_t t : targets) s.insert(s.end(), closures[size_t(t)].begin(), closures[size_t(t)].end());
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
    return s;
  };
  dfa = Automaton{};
  dfa.start = intern(closures[size_t(start)]);
  for (size_t i = 0; i < sets.size(); ++i) {
    if (int32_t(sets.size()) > max_states) return false;
    const std::vector<int32_t> set = sets[i];
    struct ByteArc {
      int lo, hi;
      int32_t target;
    };
    std::vector<ByteArc> arcs;
    std::map<int32_t, std::vector<int32_t>> calls;
    bool accepting = false;
    for (int32_t n : set) {
      accepting |= nfa.accepting[size_t(n)] != 0;
      for (const NfaEdge& e : nfa.out[size_t(n)]) {
        if (e.eps) continue;
        if (e.rule >= 0)
          calls[e.rule].push_back(e.target);
        else
          arcs.push_back({e.lo, e.hi, e.target});
      }
    }
    std::vector<int> cuts;
    for (const ByteArc& a : arcs) {
      cuts.push_back(a.lo);
      cuts.push_back(a.hi + 1);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    std::vector<Automaton::Edge> out;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const int lo = cuts[k], hi = cuts[k + 1] - 1;
      std::vector<int32_t> targets;
      for (const ByteArc& a : arcs)
        if (a.lo <= lo && a.hi >= hi) targets.push_back(a.target);
      if (targets.empty()) continue;
      const int32_t t = intern(close(targets));
      if (!out.empty() && out.back().rule < 0 && out.back().target == t && out.back().hi + 1 == lo)
        out.back().hi = uint8_t(hi);
      else
        out.push_back({t, -1, uint8_t(lo), uint8_t(hi)});
    }
    for (auto& [rule, targets] : calls) out.push_back({intern(close(targets)), rule, 0, 0});
    dfa.out.push_back(std::move(out));
    dfa.accepting.push_back(accepting ? 1 : 0);
  }
  return int32_t(sets.size()) <= max_states;
}

// The automaton without epsilons, nondeterministic: each node takes the edges of its closure.
Automaton remove_epsilons(const Nfa& nfa, const std::vector<std::vector<int32_t>>& closures, int32_t start) {
  Automaton a;
  a.start = start;
  a.out.resize(nfa.out.size());
  a.accepting.resize(nfa.out.size());
  for (size_t n = 0; n < nfa.out.size(); ++n) {
    for (int32_t c : closures[n]) {
      a.accepting[n] |= nfa.accepting[size_t(c)];
      for (const NfaEdge& e : nfa.out[size_t(c)])
        if (!e.eps) a.out[n].push_back({e.target, e.rule, e.lo, e.hi});
    }
  }
  return a;
}

// Moore's partition refinement: merges states with the same future. Call edges are symbols.
// False (and `m` untouched) when the refinement would visit more than `budget` states.
bool minimize(const Automaton& dfa, int64_t budget, Automaton& m) {
  const size_t n = dfa.size();
  std::vector<int32_t> block(n);
  for (size_t s = 0; s < n; ++s) block[s] = dfa.accepting[s] ? 1 : 0;
  size_t num_blocks = 0;
  for (int64_t work = 0;; work += int64_t(n)) {
    if (work > budget) return false;
    std::unordered_map<std::string, int32_t> sig_ids;
    std::vector<int32_t> next(n);
    for (size_t s = 0; s < n; ++s) {
      std::vector<int64_t> sig{block[s]};
      int64_t run_lo = -1, run_hi = -1, run_block = -1;
      for (const Automaton::Edge& e : dfa.out[s]) {
        if (e.rule >= 0) continue;
        const int32_t b = block[size_t(e.target)];
        if (b == run_block && e.lo == run_hi + 1) {
          run_hi = e.hi;
          continue;
        }
        if (run_block >= 0) sig.insert(sig.end(), {run_lo, run_hi, run_block});
        run_lo = e.lo, run_hi = e.hi, run_block = b;
      }
      if (run_block >= 0) sig.insert(sig.end(), {run_lo, run_hi, run_block});
      sig.push_back(-1);
      for (const Automaton::Edge& e : dfa.out[s])
        if (e.rule >= 0) sig.insert(sig.end(), {e.rule, block[size_t(e.target)]});
      std::string key(reinterpret_cast<const char*>(sig.data()), sig.size() * sizeof(int64_t));
      next[s] = sig_ids.emplace(std::move(key), int32_t(sig_ids.size())).first->second;
    }
    block = std::move(next);
    if (sig_ids.size() == num_blocks) break;
    num_blocks = sig_ids.size();
  }
  m = Automaton{};
  m.out.resize(num_blocks);
  m.accepting.resize(num_blocks);
  std::vector<char> done(num_blocks, 0);
  for (size_t s = 0; s < n; ++s) {
    const int32_t b = block[s];
    if (done[size_t(b)]) continue;
    done[size_t(b)] = 1;
    m.accepting[size_t(b)] = dfa.accepting[s];
    for (const Automaton::Edge& e : dfa.out[s]) {
      const int32_t t = block[size_t(e.target)];
      std::vector<Automaton::Edge>& out = m.out[size_t(b)];
      if (e.rule < 0 && !out.empty() && out.back().rule < 0 && out.back().target == t && out.back().hi + 1 == e.lo)
        out.back().hi = e.hi;
      else
        out.push_back({t, e.rule, e.lo, e.hi});
    }
  }
  m.start = block[size_t(dfa.start)];
  return true;
}

int32_t add_sat(int32_t a, int32_t b) {
  return (a >= kInf || b >= kInf) ? kInf : std::min(kInf, a + b);
}

}  // namespace

// ---- GrammarBuilder

int32_t GrammarBuilder::add_rule(std::string name) {
  rules_.push_back(RuleDef{std::move(name), false, RuleGraph{}});
  return int32_t(rules_.size() - 1);
}

int32_t GrammarBuilder::add_rule(std::string name, Expr body) {
  const int32_t id = add_rule(std::move(name));
  set_body(id, std::move(body));
  return id;
}

void GrammarBuilder::set_body(int32_t rule, Expr body) {
  RuleGraph g;
  const int32_t end = g.add_state();
  g.connect(0, end, std::move(body));
  g.set_accepting(end);
  set_body(rule, std::move(g));
}

void GrammarBuilder::set_body(int32_t rule, RuleGraph graph) {
  FG_CHECK(rule >= 0 && size_t(rule) < rules_.size(), "unknown rule");
  RuleDef& r = rules_[size_t(rule)];
  FG_CHECK(!r.defined, "rule body set twice: " + r.name);
  for (const RuleGraph::Arc& a : graph.arcs_) weight_ += a.expr.weight();
  weight_ += graph.num_states();
  r.graph = std::move(graph);
  r.defined = true;
}

Result<Grammar> GrammarBuilder::build(int32_t root) const {
  FG_CHECK(root >= 0 && size_t(root) < rules_.size(), "unknown root rule");
  if (weight_ > limits_.max_weight)
    return invalid_argument("grammar too large: about " + std::to_string(weight_) + " automaton states (limit " +
                            std::to_string(limits_.max_weight) + ")");
  const size_t num_rules = rules_.size();

  // 1. One automaton per rule.
  std::vector<Automaton> autos(num_rules);
  for (size_t r = 0; r < num_rules; ++r) {
    const RuleDef& def = rules_[r];
    if (!def.defined) return invalid_argument("grammar rule '" + def.name + "' is used but never defined");
    Nfa nfa;
    for (int32_t s = 0; s < def.graph.num_states(); ++s) nfa.add();
    for (const RuleGraph::Arc& a : def.graph.arcs_) emit(nfa, a.expr, a.from, a.to);
    for (const auto& edges : nfa.out)
      for (const NfaEdge& e : edges) FG_CHECK(e.rule < int32_t(num_rules), "call of an unknown rule in " + def.name);
    for (int32_t s : def.graph.accepting_) nfa.accepting[size_t(s)] = 1;
    const auto closures = epsilon_closures(nfa);
    Automaton dfa;
    if (determinize(nfa, closures, 0, limits_.max_dfa_states, dfa)) {
      if (!minimize(dfa, limits_.minimize_budget, autos[r])) autos[r] = std::move(dfa);
    } else {
      autos[r] = remove_epsilons(nfa, closures, 0);
    }
  }

  // 2. Fewest bytes from each node to the end of its rule (kInf: cannot end). A rule matches
  //    some string exactly when its start can end.
  std::vector<std::vector<int32_t>> dist(num_rules);
  for (size_t r = 0; r < num_rules; ++r) dist[r].assign(autos[r].size(), kInf);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < num_rules; ++r) {
      const Automaton& a = autos[r];
      for (size_t n = a.size(); n-- > 0;) {
        int32_t best = a.accepting[n] ? 0 : kInf;
        for (const Automaton::Edge& e : a.out[n]) {
          const int32_t cost = e.rule < 0 ? 1 : dist[size_t(e.rule)][size_t(autos[size_t(e.rule)].start)];
          best = std::min(best, add_sat(cost, dist[r][size_t(e.target)]));
        }
        if (best < dist[r][n]) {
          dist[r][n] = best;
          changed = true;
        }
      }
    }
  }
  auto productive = [&](int32_t rule) { return dist[size_t(rule)][size_t(autos[size_t(rule)].start)] < kInf; };
  if (!productive(root))
    return invalid_argument("the grammar matches no string (rule '" + rules_[size_t(root)].name + "')");

  // 3. Keep rules reachable from the root, and in each the nodes reachable from its start that
  //    can still end; calls to rules that match nothing go.
  std::vector<int32_t> rule_map(num_rules, -1);
  std::vector<int32_t> kept_rules;
  std::vector<std::vector<int32_t>> node_order(num_rules);  // kept nodes, start first
  {
    std::deque<int32_t> rule_queue{root};
    rule_map[size_t(root)] = 0;
    kept_rules.push_back(root);
    while (!rule_queue.empty()) {
      const int32_t r = rule_queue.front();
      rule_queue.pop_front();
      const Automaton& a = autos[size_t(r)];
      std::vector<char> seen(a.size(), 0);
      std::deque<int32_t> q{a.start};
      seen[size_t(a.start)] = 1;
      while (!q.empty()) {
        const int32_t n = q.front();
        q.pop_front();
        node_order[size_t(r)].push_back(n);
        for (const Automaton::Edge& e : a.out[size_t(n)]) {
          if (dist[size_t(r)][size_t(e.target)] >= kInf) continue;
          if (e.rule >= 0) {
            if (!productive(e.rule)) continue;
            if (rule_map[size_t(e.rule)] < 0) {
              rule_map[size_t(e.rule)] = int32_t(kept_rules.size());
              kept_rules.push_back(e.rule);
              rule_queue.push_back(e.rule);
            }
          }
          if (!seen[size_t(e.target)]) {
            seen[size_t(e.target)] = 1;
            q.push_back(e.target);
          }
        }
      }
    }
  }

  // 4. Global numbering and edges.
  Grammar g;
  std::vector<std::vector<int32_t>> node_id(num_rules);
  for (int32_t r : kept_rules) {
    node_id[size_t(r)].assign(autos[size_t(r)].size(), -1);
    for (int32_t n : node_order[size_t(r)]) {
      node_id[size_t(r)][size_t(n)] = int32_t(g.nodes_.size());
      g.nodes_.emplace_back();
    }
  }
  g.rules_.resize(kept_rules.size());
  g.root_ = 0;
  for (size_t k = 0; k < kept_rules.size(); ++k) {
    const int32_t r = kept_rules[k];
    const Automaton& a = autos[size_t(r)];
    g.rules_[k].name = rules_[size_t(r)].name;
    g.rules_[k].start = node_id[size_t(r)][size_t(a.start)];
    for (int32_t n : node_order[size_t(r)]) {
      GrammarNode& gn = g.nodes_[size_t(node_id[size_t(r)][size_t(n)])];
      gn.rule = int32_t(k);
      gn.accepting = a.accepting[size_t(n)] != 0;
      gn.min_bytes = dist[size_t(r)][size_t(n)];
      std::vector<GrammarEdge> bytes, calls;
      for (const Automaton::Edge& e : a.out[size_t(n)]) {
        const int32_t t = node_id[size_t(r)][size_t(e.target)];
        if (t < 0) continue;
        if (e.rule >= 0) {
          if (rule_map[size_t(e.rule)] >= 0) calls.push_back({t, rule_map[size_t(e.rule)], 0, 0});
        } else {
          bytes.push_back({t, -1, e.lo, e.hi});
        }
      }
      std::sort(bytes.begin(), bytes.end(), [](const GrammarEdge& x, const GrammarEdge& y) {
        return x.lo != y.lo ? x.lo < y.lo : x.target < y.target;
      });
      std::sort(calls.begin(), calls.end(), [](const GrammarEdge& x, const GrammarEdge& y) {
        return x.rule != y.rule ? x.rule < y.rule : x.target < y.target;
      });
      calls.erase(std::unique(calls.begin(), calls.end(),
                              [](const GrammarEdge& x, const GrammarEdge& y) {
                                return x.rule == y.rule && x.target == y.target;
                              }),
                  calls.end());
      gn.edges_begin = int32_t(g.edges_.size());
      g.edges_.insert(g.edges_.end(), bytes.begin(), bytes.end());
      gn.calls_begin = int32_t(g.edges_.size());
      g.edges_.insert(g.edges_.end(), calls.begin(), calls.end());
      gn.edges_end = int32_t(g.edges_.size());
    }
  }
  for (GrammarNode& n : g.nodes_) n.tail = n.accepting && n.edges_begin == n.edges_end;

  // 5. Nullable rules, then left recursion: rule R "left-calls" S when S is called from a node R
  //    reaches from its start through calls of nullable rules only.
  const size_t nr = g.rules_.size();
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < nr; ++r) {
      if (g.rules_[r].nullable) continue;
      std::vector<int32_t> stack{g.rules_[r].start};
      std::set<int32_t> seen{g.rules_[r].start};
      while (!stack.empty() && !g.rules_[r].nullable) {
        const int32_t n = stack.back();
        stack.pop_back();
        if (g.nodes_[size_t(n)].accepting) {
          g.rules_[r].nullable = true;
          changed = true;
          break;
        }
        for (const GrammarEdge& e : g.call_edges(n))
          if (g.rules_[size_t(e.rule)].nullable && seen.insert(e.target).second) stack.push_back(e.target);
      }
    }
  }
  std::vector<std::vector<int32_t>> left_calls(nr);
  for (size_t r = 0; r < nr; ++r) {
    std::vector<int32_t> stack{g.rules_[r].start};
    std::set<int32_t> seen{g.rules_[r].start};
    while (!stack.empty()) {
      const int32_t n = stack.back();
      stack.pop_back();
      for (const GrammarEdge& e : g.call_edges(n)) {
        left_calls[r].push_back(e.rule);
        if (g.rules_[size_t(e.rule)].nullable && seen.insert(e.target).second) stack.push_back(e.target);
      }
    }
  }
  {
    std::vector<int> color(nr, 0);  // 0 new, 1 on the DFS path, 2 done
    for (size_t r0 = 0; r0 < nr; ++r0) {
      if (color[r0]) continue;
      std::vector<std::pair<int32_t, size_t>> stack{{int32_t(r0), 0}};
      color[r0] = 1;
      while (!stack.empty()) {
        auto& [r, i] = stack.back();
        if (i == left_calls[size_t(r)].size()) {
          color[size_t(r)] = 2;
          stack.pop_back();
          continue;
        }
        const int32_t s = left_calls[size_t(r)][i++];
        if (color[size_t(s)] == 1)
          return invalid_argument("left recursion: grammar rule '" + g.rules_[size_t(s)].name +
                                  "' can call itself before reading a byte");
        if (color[size_t(s)] == 0) {
          color[size_t(s)] = 1;
          stack.push_back({s, 0});
        }
      }
    }
  }

  // 6. Return nodes. A call whose return node is a tail returns straight to its caller's return
  //    nodes (the matcher pushes no frame for it), so those belong to the callee too.
  std::vector<std::set<int32_t>> callers(nr);
  callers[size_t(g.root_)].insert(Grammar::kEndOfInput);
  std::vector<std::pair<int32_t, int32_t>> inherit;  // callee inherits caller's return nodes
  for (const GrammarNode& n : g.nodes_) {
    for (int32_t k = n.calls_begin; k < n.edges_end; ++k) {
      const GrammarEdge& e = g.edges_[size_t(k)];
      if (g.nodes_[size_t(e.target)].tail)
        inherit.emplace_back(e.rule, n.rule);
      else
        callers[size_t(e.rule)].insert(e.target);
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (auto [callee, caller] : inherit) {
      if (callee == caller) continue;
      for (int32_t c : callers[size_t(caller)]) changed |= callers[size_t(callee)].insert(c).second;
    }
  }
  g.callers_begin_.push_back(0);
  for (size_t r = 0; r < nr; ++r) {
    g.callers_.insert(g.callers_.end(), callers[r].begin(), callers[r].end());
    g.callers_begin_.push_back(int32_t(g.callers_.size()));
  }
  return g;
}

// ---- Grammar::to_string

std::string Grammar::to_string() const {
  auto byte_text = [](uint8_t b) {
    if (b >= 0x21 && b < 0x7F && b != '\\' && b != '-' && b != ']') return std::string(1, char(b));
    static const char* kHex = "0123456789ABCDEF";
    return std::string("\\x") + kHex[b >> 4] + kHex[b & 15];
  };
  std::string out;
  for (size_t r = 0; r < rules_.size(); ++r) {
    out += "rule " + std::to_string(r) + " '" + rules_[r].name + "' start " + std::to_string(rules_[r].start) +
           (rules_[r].nullable ? " nullable" : "") + (int32_t(r) == root_ ? " root" : "") + "\n";
    for (size_t n = 0; n < nodes_.size(); ++n) {
      if (nodes_[n].rule != int32_t(r)) continue;
      out += "  " + std::to_string(n) + (nodes_[n].accepting ? " (end)" : "") + ":";
      for (const GrammarEdge& e : byte_edges(int32_t(n)))
        out += " [" + byte_text(e.lo) + (e.hi != e.lo ? "-" + byte_text(e.hi) : "") + "]->" + std::to_string(e.target);
      for (const GrammarEdge& e : call_edges(int32_t(n)))
        out += " <" + rules_[size_t(e.rule)].name + ">->" + std::to_string(e.target);
      out += "\n";
    }
  }
  return out;
}

}  // namespace fg::grammar

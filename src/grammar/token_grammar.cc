// TokenGrammar: per-position token decisions over the vocabulary trie (see token_grammar.h).
#include "grammar/token_grammar.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <unordered_map>

#include "grammar/stack.h"

namespace fg::grammar {

namespace {
enum class TokenClass : uint8_t { kReject, kAccept, kUncertain };
// Positions reading at least this many distinct first bytes count as broad (TokenGrammarOptions).
constexpr int kBroadFirstBytes = 128;
}  // namespace

// An automaton over sets of symbolic stacks, built as the walks need its states: each state is a
// set of top frames plus how stacks ended on the last byte, each transition computed once.
class WalkAutomaton {
 public:
  explicit WalkAutomaton(const Grammar& g) : stepper_(g, arena_) {}

  int32_t frame(int32_t node, int32_t parent) { return arena_.intern(node, parent); }
  int32_t start(int32_t node, int32_t parent) { return intern({frame(node, parent)}, false, false); }

  int32_t step(int32_t state, uint8_t byte) {
    int32_t& memo = next_[size_t(state) * 256 + byte];
    if (memo >= 0) return memo;
    // Copy the tops: interning may reallocate states_.
    scratch_ = states_[size_t(state)].tops;
    stepper_.advance(scratch_, byte);
    std::vector<int32_t> tops = stepper_.tops();
    std::sort(tops.begin(), tops.end());
    const int32_t s = intern(std::move(tops), stepper_.end_exact(), stepper_.end_inexact());
    next_[size_t(state) * 256 + byte] = s;
    return s;
  }

  // The walk's hot path reads these two from one byte per state.
  TokenClass cls(int32_t s) const { return TokenClass(info_[size_t(s)] & 3); }
  bool alive(int32_t s) const { return (info_[size_t(s)] & 4) != 0; }
  int64_t num_states() const { return int64_t(states_.size()); }

 private:
  struct State {
    std::vector<int32_t> tops;  // sorted
    TokenClass cls = TokenClass::kReject;
  };

  int32_t intern(std::vector<int32_t> tops, bool end_exact, bool end_inexact) {
    std::string key(reinterpret_cast<const char*>(tops.data()), tops.size() * sizeof(int32_t));
    key.push_back(char((end_exact ? 1 : 0) | (end_inexact ? 2 : 0)));
    auto [it, fresh] = ids_.emplace(std::move(key), int32_t(states_.size()));
    if (!fresh) return it->second;
    State st;
    bool exact_top = false;
    for (int32_t t : tops) exact_top |= !arena_.inexact(t);
    st.cls = (end_exact || exact_top)         ? TokenClass::kAccept
             : (end_inexact || !tops.empty()) ? TokenClass::kUncertain
                                              : TokenClass::kReject;
    info_.push_back(uint8_t(uint8_t(st.cls) | (tops.empty() ? 0 : 4)));
    st.tops = std::move(tops);
    states_.push_back(std::move(st));
    next_.resize(states_.size() * 256, -1);
    return it->second;
  }

  FrameArena arena_;
  FrameStepper stepper_;
  std::vector<State> states_;
  std::vector<uint8_t> info_;  // per state: TokenClass | 4 when some stack is alive
  std::vector<int32_t> next_;  // [states * 256]: -1 not computed yet
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<int32_t> scratch_;
};

namespace {

TokenSet make_token_set(std::vector<int32_t> ids, const GrammarVocab& vocab) {
  TokenSet set;
  const size_t n = ids.size(), text = size_t(vocab.num_text_tokens()), words = size_t(vocab.mask_words());
  const size_t list_bytes = 4 * n, except_bytes = 4 * (text - n), mask_bytes = 4 * words;
  if (list_bytes <= except_bytes && list_bytes <= mask_bytes) {
    std::sort(ids.begin(), ids.end());
    set.form = TokenSet::Form::kIds;
    set.ids = std::move(ids);
    return set;
  }
  std::vector<uint32_t> mask(words, 0);
  for (int32_t id : ids) mask[size_t(id) >> 5] |= uint32_t(1) << (id & 31);
  if (except_bytes <= mask_bytes) {
    set.form = TokenSet::Form::kAllTextExcept;
    const std::vector<uint32_t>& tm = vocab.text_mask();
    for (size_t w = 0; w < words; ++w) {
      uint32_t missing = tm[w] & ~mask[w];
      while (missing) {
        const int b = __builtin_ctz(missing);
        set.ids.push_back(int32_t(w * 32 + size_t(b)));
        missing &= missing - 1;
      }
    }
    return set;
  }
  set.form = TokenSet::Form::kBitmask;
  set.words = std::move(mask);
  return set;
}

}  // namespace

void TokenSet::add_to(uint32_t* mask, const std::vector<uint32_t>& text_mask, std::vector<int32_t>& scratch) const {
  switch (form) {
    case Form::kIds:
      for (int32_t id : ids) mask[size_t(id) >> 5] |= uint32_t(1) << (id & 31);
      return;
    case Form::kBitmask:
      for (size_t w = 0; w < words.size(); ++w) mask[w] |= words[w];
      return;
    case Form::kAllTextExcept:
      // Union with (text \ ids): the left-out ids stay clear unless the mask already had them.
      scratch.clear();
      for (int32_t id : ids)
        if (!((mask[size_t(id) >> 5] >> (id & 31)) & 1)) scratch.push_back(id);
      for (size_t w = 0; w < text_mask.size(); ++w) mask[w] |= text_mask[w];
      for (int32_t id : scratch) mask[size_t(id) >> 5] &= ~(uint32_t(1) << (id & 31));
      return;
  }
}

TokenGrammar::~TokenGrammar() = default;

std::shared_ptr<const TokenGrammar> TokenGrammar::build(std::shared_ptr<const Grammar> grammar,
                                                        std::shared_ptr<const GrammarVocab> vocab,
                                                        const TokenGrammarOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  auto tg = std::shared_ptr<TokenGrammar>(new TokenGrammar());
  tg->grammar_ = std::move(grammar);
  tg->vocab_ = std::move(vocab);
  const Grammar& g = *tg->grammar_;
  const size_t n = g.num_nodes();
  tg->positions_.resize(n);
  tg->ready_ = std::make_unique<std::atomic<uint8_t>[]>(n);
  tg->walk_ = std::make_unique<WalkAutomaton>(g);
  int32_t max_depth = 0;
  for (const auto& t : tg->vocab_->trie()) max_depth = std::max(max_depth, t.depth);
  tg->depth_state_.resize(size_t(max_depth) + 1);
  TokenGrammarStats& stats = tg->stats_;
  for (size_t p = 0; p < n; ++p) stats.positions += g.byte_edges(int32_t(p)).empty() ? 0 : 1;
  // Narrow positions (few first bytes) walk small parts of the trie: always decided here. Broad
  // ones (string contents) walk most of it: decided here up to the budget, the rest on first use.
  int64_t broad_left = options.eager_broad_positions;
  for (int32_t p = 0; p < int32_t(n); ++p) {
    if (g.byte_edges(p).empty()) continue;
    int first_bytes = 0;
    for (const GrammarEdge& e : g.byte_edges(p)) first_bytes += e.hi - e.lo + 1;
    if (first_bytes >= kBroadFirstBytes && broad_left-- <= 0) continue;
    tg->decide_locked(p);
    tg->ready_[size_t(p)].store(1, std::memory_order_release);
    const PositionTokens& pt = tg->positions_[size_t(p)];
    ++stats.decided;
    stats.uncertain_tokens += int64_t(pt.uncertain.size());
    stats.memory_bytes += int64_t(pt.accepted.memory_bytes() + pt.uncertain.capacity() * 4);
    for (const RefinedTokens& rt : pt.refined) {
      ++stats.refined_entries;
      stats.still_uncertain += int64_t(rt.uncertain.size());
      stats.memory_bytes += int64_t((rt.accepted.capacity() + rt.uncertain.capacity()) * 4);
    }
  }
  stats.symbolic_states = tg->walk_->num_states();
  stats.build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return tg;
}

const PositionTokens& TokenGrammar::decide(int32_t node) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ready_[size_t(node)].load(std::memory_order_relaxed)) {
    decide_locked(node);
    ready_[size_t(node)].store(1, std::memory_order_release);
  }
  return positions_[size_t(node)];
}

void TokenGrammar::decide_locked(int32_t p) const {
  const Grammar& g = *grammar_;
  const GrammarVocab& v = *vocab_;
  WalkAutomaton& walk = *walk_;
  const std::vector<GrammarVocab::TrieNode>& trie = v.trie();
  PositionTokens& pt = positions_[size_t(p)];
  if (g.byte_edges(p).empty()) return;
  std::vector<int32_t> accepted;
  depth_state_[0] = walk.start(p, unknown_parent(g.node(p).rule, false));
  for (size_t i = 1; i < trie.size();) {
    const GrammarVocab::TrieNode& tn = trie[i];
    const int32_t s = walk.step(depth_state_[size_t(tn.depth - 1)], tn.byte);
    const TokenClass c = walk.cls(s);
    if (c != TokenClass::kReject) {
      for (int32_t id : v.trie_ids(tn)) (c == TokenClass::kAccept ? accepted : pt.uncertain).push_back(id);
    }
    if (!walk.alive(s)) {
      i = size_t(tn.subtree_end);
    } else {
      depth_state_[size_t(tn.depth)] = s;
      ++i;
    }
  }
  pt.accepted = make_token_set(std::move(accepted), v);
  if (pt.uncertain.empty()) return;

  // Decide the uncertain tokens again under each return node of the position's rule.
  for (int32_t ret : g.return_nodes(g.node(p).rule)) {
    const int32_t parent =
        ret == Grammar::kEndOfInput ? kRootParent : walk.frame(ret, unknown_parent(g.node(ret).rule, false));
    const int32_t s0 = walk.start(p, parent);
    RefinedTokens rt;
    rt.return_node = ret;
    for (int32_t id : pt.uncertain) {
      int32_t s = s0;
      const std::string_view bytes = v.token(id);
      for (size_t k = 0; k < bytes.size(); ++k) {
        s = walk.step(s, uint8_t(bytes[k]));
        if (!walk.alive(s)) {
          if (k + 1 < bytes.size()) s = -1;
          break;
        }
      }
      if (s < 0) continue;
      const TokenClass c = walk.cls(s);
      if (c == TokenClass::kAccept) rt.accepted.push_back(id);
      if (c == TokenClass::kUncertain) rt.uncertain.push_back(id);
    }
    std::sort(rt.accepted.begin(), rt.accepted.end());
    pt.refined.push_back(std::move(rt));
  }
}

}  // namespace fg::grammar

// Hash-consed stack frames and the byte step of a set of stacks (see stack.h).
#include "grammar/stack.h"

#include "core/status.h"

namespace fg::grammar {

int32_t FrameArena::intern(int32_t node, int32_t parent) {
  size_t mask = table_.size() - 1;
  size_t i = size_t(hash(node, parent)) & mask;
  for (;;) {
    const int32_t id = table_[i];
    if (id < 0) break;
    const Frame& f = frames_[size_t(id)];
    if (f.node == node && f.parent == parent) return id;
    i = (i + 1) & mask;
  }
  const int32_t id = int32_t(frames_.size());
  frames_.push_back({node, parent});
  inexact_.push_back(parent >= 0             ? inexact_[size_t(parent)]
                     : parent == kRootParent ? 0
                                             : char(unknown_parent_inexact(parent)));
  table_[i] = id;
  if (frames_.size() * 2 > table_.size()) grow();
  return id;
}

void FrameArena::grow() {
  table_.assign(table_.size() * 2, -1);
  const size_t mask = table_.size() - 1;
  for (int32_t id = 0; id < int32_t(frames_.size()); ++id) {
    size_t i = size_t(hash(frames_[size_t(id)].node, frames_[size_t(id)].parent)) & mask;
    while (table_[i] >= 0) i = (i + 1) & mask;
    table_[i] = id;
  }
}

void FrameStepper::begin() {
  out_.clear();
  end_exact_ = end_inexact_ = false;
  if (++stamp_ == 0) {  // wrapped: forget every old stamp
    std::fill(seen_.begin(), seen_.end(), 0);
    stamp_ = 1;
  }
}

void FrameStepper::advance(std::span<const int32_t> tops, uint8_t byte) {
  begin();
  for (int32_t t : tops) {
    const FrameArena::Frame f = arena_[t];
    for (const GrammarEdge& e : g_.byte_edges(f.node)) {
      if (byte < e.lo) break;  // byte edges are sorted by lo
      if (byte <= e.hi) expand(arena_.intern(e.target, f.parent));
    }
  }
}

void FrameStepper::expand(int32_t frame) {
  if (size_t(frame) >= seen_.size()) seen_.resize(size_t(arena_.size()) + 256, 0);
  if (seen_[size_t(frame)] == stamp_) return;
  seen_[size_t(frame)] = stamp_;
  const FrameArena::Frame f = arena_[frame];
  const GrammarNode& n = g_.node(f.node);
  if (n.calls_begin > n.edges_begin) out_.push_back(frame);
  for (const GrammarEdge& e : g_.call_edges(f.node)) {
    // A call whose return node is a tail returns straight to our parent: no frame for it, so
    // repetition written as right recursion keeps the stack flat.
    const int32_t ret = g_.node(e.target).tail ? f.parent : arena_.intern(e.target, f.parent);
    expand(arena_.intern(g_.rules()[size_t(e.rule)].start, ret));
  }
  if (!n.accepting) return;
  if (f.parent >= 0) {
    expand(f.parent);
  } else if (f.parent == kRootParent) {
    end_exact_ = true;
  } else {
    const int32_t rule = unknown_parent_rule(f.parent);
    const bool inexact = unknown_parent_inexact(f.parent);
    const std::span<const int32_t> rets = g_.return_nodes(rule);
    FG_CHECK(!rets.empty(), "a reachable rule without return nodes");
    const bool multi = rets.size() > 1;
    // Ending here is possible whatever the real caller is (every return node can go on).
    if (multi || rets[0] == Grammar::kEndOfInput) (inexact ? end_inexact_ : end_exact_) = true;
    for (int32_t r : rets) {
      if (r == Grammar::kEndOfInput) continue;
      expand(arena_.intern(r, unknown_parent(g_.node(r).rule, inexact || multi)));
    }
  }
}

}  // namespace fg::grammar

// The pushdown automaton's stacks, shared by the matcher (real stacks) and the token-cache builder
// (stacks whose bottom is unknown). A frame is (node, parent): "at this node, and when the rule
// ends, continue with the parent frame". Frames are hash-consed, so equal stacks are one id and a
// set of stacks is a set of ints. A parent below zero is not a frame:
//   kRootParent     the end of input follows (the root's caller);
//   unknown(r, x)   some return node of rule r follows (Grammar::return_nodes), unknown which;
//                   x marks a stack that already chose among several such nodes (inexact).
// Only the token-cache builder makes unknown parents; the matcher's stacks end in kRootParent.
// Internal to the grammar layer; must never hold token ids.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "grammar/grammar.h"

namespace fg::grammar {

inline constexpr int32_t kRootParent = -1;
inline int32_t unknown_parent(int32_t rule, bool inexact) {
  return -2 - (rule * 2 + (inexact ? 1 : 0));
}
inline int32_t unknown_parent_rule(int32_t code) {
  return (-2 - code) >> 1;
}
inline bool unknown_parent_inexact(int32_t code) {
  return ((-2 - code) & 1) != 0;
}

class FrameArena {
 public:
  struct Frame {
    int32_t node;
    int32_t parent;
  };

  FrameArena() { table_.assign(1024, -1); }
  int32_t intern(int32_t node, int32_t parent);
  const Frame& operator[](int32_t id) const { return frames_[size_t(id)]; }
  // True when the stack under this frame ends in an inexact unknown parent.
  bool inexact(int32_t id) const { return inexact_[size_t(id)] != 0; }
  int32_t size() const { return int32_t(frames_.size()); }

 private:
  static uint64_t hash(int32_t node, int32_t parent) {
    uint64_t k = (uint64_t(uint32_t(node)) << 32) | uint32_t(parent);
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
  }
  void grow();

  std::vector<Frame> frames_;
  std::vector<char> inexact_;
  std::vector<int32_t> table_;  // open addressing, power-of-two size, -1 empty
};

// One byte step of a set of stacks. `tops` are frames at nodes with byte edges (what a step
// produces). After advance(), tops() holds the new set (no duplicates, unordered) and
// end_exact()/end_inexact() say whether some stack ended (reached the end of input, or an
// unknown parent with several return nodes) after this byte.
class FrameStepper {
 public:
  FrameStepper(const Grammar& grammar, FrameArena& arena) : g_(grammar), arena_(arena) {}

  void advance(std::span<const int32_t> tops, uint8_t byte);
  // Expands one frame (just arrived at its node) into tops: calls pushed, ended rules popped.
  void begin();
  void expand(int32_t frame);

  const std::vector<int32_t>& tops() const { return out_; }
  bool end_exact() const { return end_exact_; }
  bool end_inexact() const { return end_inexact_; }

 private:
  const Grammar& g_;
  FrameArena& arena_;
  std::vector<int32_t> out_;
  std::vector<uint32_t> seen_;
  uint32_t stamp_ = 0;
  bool end_exact_ = false, end_inexact_ = false;
};

}  // namespace fg::grammar

// Grammar expressions: the trees front ends write rule bodies in (sequence, alternation, bounded
// or unbounded repetition, byte sets, Unicode character classes, rule calls). GrammarBuilder
// turns each rule's expression into an automaton. Character classes are sets of code points that
// the builder encodes as UTF-8 byte sequences, so every grammar reads bytes and a character split
// across two tokens is simply two steps.
// Expressions are immutable values (shared subtrees); they must never refer to token ids.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fg::grammar {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// A set of Unicode scalar values as sorted, disjoint, non-adjacent closed ranges.
class CharSet {
 public:
  CharSet() = default;
  static CharSet of(uint32_t c) { return range(c, c); }
  static CharSet range(uint32_t lo, uint32_t hi);
  static CharSet all();  // every scalar value (surrogates excluded)

  CharSet& add(uint32_t lo, uint32_t hi);
  CharSet& add(const CharSet& other);
  CharSet complement() const;  // within all()
  CharSet minus(const CharSet& other) const;
  bool contains(uint32_t c) const;
  bool empty() const { return ranges_.empty(); }
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

 private:
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

using ByteSet = std::bitset<256>;

class Expr {
 public:
  enum class Kind { kEmpty, kBytes, kChars, kSeq, kAlt, kRepeat, kCall };
  static constexpr int kUnbounded = -1;

  static Expr empty();                             // matches ""
  static Expr bytes(const ByteSet& set);           // one byte of the set
  static Expr byte_range(uint8_t lo, uint8_t hi);  // one byte in [lo, hi]
  static Expr literal(std::string_view bytes);     // exactly these bytes
  static Expr chars(const CharSet& set);           // one character of the set, UTF-8 encoded
  static Expr seq(std::vector<Expr> items);
  static Expr alt(std::vector<Expr> items);         // an empty list matches nothing
  static Expr repeat(Expr item, int min, int max);  // max = kUnbounded for no upper bound
  static Expr optional(Expr item) { return repeat(std::move(item), 0, 1); }
  static Expr star(Expr item) { return repeat(std::move(item), 0, kUnbounded); }
  static Expr plus(Expr item) { return repeat(std::move(item), 1, kUnbounded); }
  static Expr call(int32_t rule);

  Kind kind() const { return node_->kind; }
  const ByteSet& byte_set() const { return node_->bytes; }
  const CharSet& char_set() const { return node_->chars; }
  const std::vector<Expr>& items() const { return node_->items; }
  int min() const { return node_->min; }
  int max() const { return node_->max; }
  int32_t rule() const { return node_->rule; }
  // Rough automaton size, for the builders' size limits.
  int64_t weight() const { return node_->weight; }

 private:
  struct Node {
    Kind kind = Kind::kEmpty;
    ByteSet bytes;
    CharSet chars;
    std::vector<Expr> items;
    int min = 0, max = 0;
    int32_t rule = -1;
    int64_t weight = 1;
  };
  explicit Expr(std::shared_ptr<const Node> n) : node_(std::move(n)) {}
  std::shared_ptr<const Node> node_;
};

// The UTF-8 encodings of the characters of `set`, as sequences of byte ranges: each sequence
// [r0, r1, ...] stands for every byte string b0 b1 ... with bi in ri. The sequences are disjoint
// and together encode exactly the set.
std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_byte_ranges(const CharSet& set);

// Appends the UTF-8 encoding of code point c (a scalar value).
void append_utf8(std::string& out, uint32_t c);

}  // namespace fg::grammar

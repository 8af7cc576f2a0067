// Grammar expressions and UTF-8 range encoding (see expr.h).
#include "grammar/expr.h"

#include <algorithm>

#include "core/status.h"

namespace fg::grammar {

namespace {

constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

int64_t saturating_mul(int64_t a, int64_t b) {
  constexpr int64_t kCap = int64_t(1) << 40;
  if (a > kCap / std::max<int64_t>(b, 1)) return kCap;
  return a * b;
}

}  // namespace

// ---- CharSet

CharSet CharSet::range(uint32_t lo, uint32_t hi) {
  CharSet s;
  s.add(lo, hi);
  return s;
}

CharSet CharSet::all() {
  CharSet s;
  s.ranges_ = {{0, kSurrogateLo - 1}, {kSurrogateHi + 1, kMaxCodePoint}};
  return s;
}

CharSet& CharSet::add(uint32_t lo, uint32_t hi) {
  hi = std::min(hi, kMaxCodePoint);
  if (lo > hi) return *this;
  // Surrogates are not characters: keep them out so every range encodes as UTF-8.
  if (lo <= kSurrogateHi && hi >= kSurrogateLo) {
    if (lo < kSurrogateLo) add(lo, kSurrogateLo - 1);
    if (hi > kSurrogateHi) add(kSurrogateHi + 1, hi);
    return *this;
  }
  ranges_.emplace_back(lo, hi);
  std::sort(ranges_.begin(), ranges_.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : ranges_) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  ranges_ = std::move(merged);
  return *this;
}

CharSet& CharSet::add(const CharSet& other) {
  for (const auto& r : other.ranges_) add(r.first, r.second);
  return *this;
}

CharSet CharSet::complement() const {
  return all().minus(*this);
}

CharSet CharSet::minus(const CharSet& other) const {
  CharSet out;
  for (auto [lo, hi] : ranges_) {
    uint32_t cur = lo;
    bool done = false;
    for (const auto& o : other.ranges_) {
      if (o.second < cur || o.first > hi) continue;
      if (o.first > cur) out.add(cur, o.first - 1);
      if (o.second >= hi) {
        done = true;
        break;
      }
      cur = o.second + 1;
    }
    if (!done && cur <= hi) out.add(cur, hi);
  }
  return out;
}

bool CharSet::contains(uint32_t c) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), std::make_pair(c, UINT32_MAX));
  return it != ranges_.begin() && std::prev(it)->second >= c;
}

// ---- Expr

Expr Expr::empty() {
  return Expr(std::make_shared<const Node>());
}

Expr Expr::bytes(const ByteSet& set) {
  auto n = std::make_shared<Node>();
  n->kind = Kind::kBytes;
  n->bytes = set;
  return Expr(std::move(n));
}

Expr Expr::byte_range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.set(size_t(b));
  return bytes(s);
}

Expr Expr::literal(std::string_view text) {
  std::vector<Expr> items;
  items.reserve(text.size());
  for (char c : text) items.push_back(byte_range(uint8_t(c), uint8_t(c)));
  return seq(std::move(items));
}

Expr Expr::chars(const CharSet& set) {
  auto n = std::make_shared<Node>();
  n->kind = Kind::kChars;
  n->chars = set;
  n->weight = 4 * int64_t(set.ranges().size()) + 4;
  return Expr(std::move(n));
}

Expr Expr::seq(std::vector<Expr> items) {
  if (items.size() == 1) return items[0];
  auto n = std::make_shared<Node>();
  n->kind = Kind::kSeq;
  n->weight = 1;
  for (const Expr& e : items) n->weight += e.weight();
  n->items = std::move(items);
  return Expr(std::move(n));
}

Expr Expr::alt(std::vector<Expr> items) {
  if (items.size() == 1) return items[0];
  auto n = std::make_shared<Node>();
  n->kind = Kind::kAlt;
  n->weight = 1;
  for (const Expr& e : items) n->weight += e.weight() + 2;
  n->items = std::move(items);
  return Expr(std::move(n));
}

Expr Expr::repeat(Expr item, int min, int max) {
  FG_CHECK(min >= 0 && (max == kUnbounded || max >= min), "bad repetition bounds");
  if (min == 1 && max == 1) return item;
  auto n = std::make_shared<Node>();
  n->kind = Kind::kRepeat;
  n->min = min;
  n->max = max;
  const int64_t copies = max == kUnbounded ? int64_t(min) + 1 : std::max<int64_t>(max, 1);
  n->weight = saturating_mul(item.weight() + 2, copies);
  n->items = {std::move(item)};
  return Expr(std::move(n));
}

Expr Expr::call(int32_t rule) {
  auto n = std::make_shared<Node>();
  n->kind = Kind::kCall;
  n->rule = rule;
  return Expr(std::move(n));
}

// ---- UTF-8

void append_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out.push_back(char(c));
  } else if (c < 0x800) {
    out.push_back(char(0xC0 | (c >> 6)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(char(0xE0 | (c >> 12)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (c >> 18)));
    out.push_back(char(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  }
}

namespace {

using ByteRangeSeq = std::vector<std::pair<uint8_t, uint8_t>>;

// [lo, hi] lies within one encoded length. Splits it until every byte position of the encodings
// of the sub-range varies independently, then emits one range per byte position.
void encode_range(uint32_t lo, uint32_t hi, std::vector<ByteRangeSeq>& out) {
  std::string a, b;
  append_utf8(a, lo);
  append_utf8(b, hi);
  const size_t n = a.size();
  for (size_t i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t(1) << (6 * i)) - 1;  // the low i continuation bytes
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        encode_range(lo, lo | m, out);
        encode_range((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        encode_range(lo, (hi & ~m) - 1, out);
        encode_range(hi & ~m, hi, out);
        return;
      }
    }
  }
  ByteRangeSeq seq;
  for (size_t i = 0; i < n; ++i) seq.emplace_back(uint8_t(a[i]), uint8_t(b[i]));
  out.push_back(std::move(seq));
}

}  // namespace

std::vector<ByteRangeSeq> utf8_byte_ranges(const CharSet& set) {
  static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
  std::vector<ByteRangeSeq> out;
  for (auto [lo, hi] : set.ranges()) {
    uint32_t start = lo;
    for (uint32_t end : kLengthEnds) {
      if (start > hi) break;
      if (start > end) continue;
      encode_range(start, std::min(hi, end), out);
      start = end + 1;
    }
  }
  return out;
}

}  // namespace fg::grammar

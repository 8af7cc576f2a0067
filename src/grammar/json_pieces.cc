// JSON building blocks (see json_pieces.h).
#include "grammar/json_pieces.h"

#include <cmath>
#include <functional>
#include <map>

#include "grammar/regex.h"

namespace fg::grammar {

namespace {

Expr digit() {
  return Expr::byte_range('0', '9');
}
Expr digits(int min, int max) {
  return Expr::repeat(digit(), min, max);
}
Expr nonzero_digit() {
  return Expr::byte_range('1', '9');
}

// Decimal strings (no sign, no leading zeros) of the integers in [lo, hi], both of `len` digits.
Expr same_length_range(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return Expr::empty();
  if (lo[0] == hi[0]) return Expr::seq({Expr::literal(lo.substr(0, 1)), same_length_range(lo.substr(1), hi.substr(1))});
  const size_t rest = lo.size() - 1;
  const bool lo_rest_min = lo.find_first_not_of('0', 1) == std::string::npos;
  const bool hi_rest_max = hi.find_first_not_of('9', 1) == std::string::npos;
  std::vector<Expr> alts;
  char first_full = lo[0], last_full = hi[0];
  if (!lo_rest_min) {
    alts.push_back(
        Expr::seq({Expr::literal(lo.substr(0, 1)), same_length_range(lo.substr(1), std::string(rest, '9'))}));
    ++first_full;
  }
  if (!hi_rest_max) --last_full;
  if (first_full <= last_full)
    alts.push_back(
        Expr::seq({Expr::byte_range(uint8_t(first_full), uint8_t(last_full)), digits(int(rest), int(rest))}));
  if (!hi_rest_max)
    alts.push_back(
        Expr::seq({Expr::literal(hi.substr(0, 1)), same_length_range(std::string(rest, '0'), hi.substr(1))}));
  return Expr::alt(std::move(alts));
}

// Decimal strings of the integers in [lo, hi] (0 <= lo <= hi; hi = nullopt: no upper bound, up to
// max_digits digits).
Expr unsigned_range(uint64_t lo, std::optional<uint64_t> hi, int max_digits) {
  std::vector<Expr> alts;
  const std::string los = std::to_string(lo);
  if (!hi) {
    // lo's length with values >= lo, then every longer length.
    alts.push_back(same_length_range(los, std::string(los.size(), '9')));
    if (int(los.size()) < max_digits)
      alts.push_back(Expr::seq({nonzero_digit(), digits(int(los.size()), max_digits - 1)}));
    return Expr::alt(std::move(alts));
  }
  const std::string his = std::to_string(*hi);
  for (size_t len = los.size(); len <= his.size(); ++len) {
    const std::string a = len == los.size() ? los : "1" + std::string(len - 1, '0');
    const std::string b = len == his.size() ? his : std::string(len, '9');
    alts.push_back(same_length_range(a, b));
  }
  return Expr::alt(std::move(alts));
}

std::string bound_text(double v) {
  std::string s = nlohmann::json(v).dump();
  return s;
}

}  // namespace

Expr JsonPieces::punct(char c) const {
  const std::string p(1, c);
  switch (ws_) {
    case JsonWhitespace::kCompact: return Expr::literal(p);
    case JsonWhitespace::kSpaced: return Expr::literal(c == ':' || c == ',' ? p + " " : p);
    case JsonWhitespace::kFlexible: {
      const Expr sp = Expr::optional(Expr::literal(" "));
      return Expr::seq({sp, Expr::literal(p), sp});
    }
  }
  return Expr::literal(p);
}

namespace {

// The characters generated strings use. Control characters other than \n \t \r \b \f are left
// out: they need \u00XX escapes, which would multiply the automaton states of every counted
// string for characters models rarely want.
CharSet string_char_set() {
  CharSet rare_controls;
  rare_controls.add(0, 0x07).add(0x0B, 0x0B).add(0x0E, 0x1F);
  return CharSet::all().minus(rare_controls);
}

}  // namespace

Expr JsonPieces::string_chars() const {
  return json_string_chars(string_char_set());
}

Expr JsonPieces::string(int min_chars, int max_chars) const {
  const Expr q = Expr::literal("\"");
  return Expr::seq({q, Expr::repeat(string_chars(), min_chars, max_chars < 0 ? Expr::kUnbounded : max_chars), q});
}

Expr JsonPieces::string_except(const std::vector<std::string>& excluded) const {
  // A trie over the excluded values' characters. At each node: end the string unless a value ends
  // here, follow a child character, or leave the trie with any other character and continue freely.
  struct Node {
    bool terminal = false;
    std::map<uint32_t, int> children;
  };
  std::vector<Node> trie(1);
  for (const std::string& s : excluded) {
    int n = 0;
    for (size_t i = 0; i < s.size();) {
      const unsigned char b0 = uint8_t(s[i]);
      uint32_t c = b0;
      size_t len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
      if (len > 1) {
        c = b0 & (0xFF >> (len + 1));
        for (size_t k = 1; k < len && i + k < s.size(); ++k) c = (c << 6) | (uint8_t(s[i + k]) & 0x3F);
      }
      i += len;
      auto it = trie[size_t(n)].children.find(c);
      if (it == trie[size_t(n)].children.end()) {
        trie.emplace_back();
        it = trie[size_t(n)].children.emplace(c, int(trie.size() - 1)).first;
      }
      n = it->second;
    }
    trie[size_t(n)].terminal = true;
  }
  const Expr q = Expr::literal("\"");
  const Expr free_rest = Expr::seq({Expr::star(string_chars()), q});
  std::function<Expr(int)> from = [&](int n) -> Expr {
    std::vector<Expr> alts;
    if (!trie[size_t(n)].terminal) alts.push_back(q);
    CharSet others = string_char_set();
    for (const auto& [c, child] : trie[size_t(n)].children) {
      alts.push_back(Expr::seq({json_string_chars(CharSet::of(c)), from(child)}));
      others = others.minus(CharSet::of(c));
    }
    alts.push_back(Expr::seq({json_string_chars(others), free_rest}));
    return Expr::alt(std::move(alts));
  };
  return Expr::seq({q, from(0)});
}

Result<Expr> JsonPieces::integer(const std::optional<Bound>& lo_b, const std::optional<Bound>& hi_b) const {
  // Integers in [lo, hi] (int64); any real bounds become integer ones exactly.
  constexpr double kLimit = 9.2e18;
  std::optional<int64_t> lo, hi;
  if (lo_b) {
    if (std::fabs(lo_b->value) > kLimit)
      return unsupported("JSON Schema '" + lo_b->keyword + "' beyond 64-bit integers");
    double v = lo_b->exclusive ? std::floor(lo_b->value) + 1 : std::ceil(lo_b->value);
    lo = int64_t(v);
  }
  if (hi_b) {
    if (std::fabs(hi_b->value) > kLimit)
      return unsupported("JSON Schema '" + hi_b->keyword + "' beyond 64-bit integers");
    double v = hi_b->exclusive ? std::ceil(hi_b->value) - 1 : std::floor(hi_b->value);
    hi = int64_t(v);
  }
  if (lo && hi && *lo > *hi) return invalid_argument("JSON Schema integer bounds admit no value");
  if (!lo && !hi) {
    return Expr::seq({Expr::optional(Expr::literal("-")),
                      Expr::alt({Expr::literal("0"), Expr::seq({nonzero_digit(), digits(0, kMaxIntegerDigits - 1)})})});
  }
  std::vector<Expr> alts;
  // Non-negative part: [max(lo, 0), hi].
  if (!hi || *hi >= 0) {
    const uint64_t a = lo && *lo > 0 ? uint64_t(*lo) : 0;
    std::optional<uint64_t> b;
    if (hi) b = uint64_t(*hi);
    alts.push_back(unsigned_range(a, b, kMaxIntegerDigits));
  }
  // Negative part: magnitudes in [max(-hi, 1), -lo].
  if (!lo || *lo < 0) {
    const uint64_t a = hi && *hi < 0 ? uint64_t(-(*hi + 1)) + 1 : 1;
    std::optional<uint64_t> b;
    if (lo) b = uint64_t(-(*lo + 1)) + 1;
    alts.push_back(Expr::seq({Expr::literal("-"), unsigned_range(a, b, kMaxIntegerDigits)}));
  }
  return Expr::alt(std::move(alts));
}

Result<Expr> JsonPieces::number(const std::optional<Bound>& lo_b, const std::optional<Bound>& hi_b) const {
  const Expr fraction = Expr::seq({Expr::literal("."), digits(1, kMaxFractionDigits)});
  if (!lo_b && !hi_b) {
    ByteSet e, sign;
    e.set('e').set('E');
    sign.set('+').set('-');
    const Expr exponent = Expr::seq({Expr::bytes(e), Expr::optional(Expr::bytes(sign)), digits(1, kMaxExponentDigits)});
    return Expr::seq({Expr::optional(Expr::literal("-")),
                      Expr::alt({Expr::literal("0"), Expr::seq({nonzero_digit(), digits(0, kMaxNumberIntDigits - 1)})}),
                      Expr::optional(fraction), Expr::optional(exponent)});
  }
  // Bounded numbers: integer-valued bounds, no exponent, fractions of up to 6 digits. Exclusive
  // bounds must stay below 1e9 in magnitude so a 6-digit fraction never rounds onto the bound.
  for (const auto* b : {&lo_b, &hi_b}) {
    if (!*b) continue;
    const Bound& bd = **b;
    if (bd.value != std::floor(bd.value) || std::fabs(bd.value) > 1e15)
      return unsupported(
          "unsupported JSON Schema keyword '" + bd.keyword + "' with value " + bound_text(bd.value) +
          " on a number (only integer-valued bounds are enforced; use an integer type or an integer bound)");
    if (bd.exclusive && std::fabs(bd.value) >= 1e9)
      return unsupported("unsupported JSON Schema keyword '" + bd.keyword + "' beyond 1e9 on a number");
  }
  const Expr frac = Expr::seq({Expr::literal("."), digits(1, kMaxBoundedFractionDigits)});
  const Expr nonzero_frac =
      Expr::seq({Expr::literal("."), Expr::repeat(Expr::literal("0"), 0, kMaxBoundedFractionDigits - 1),
                 nonzero_digit(), digits(0, kMaxBoundedFractionDigits - 1)});
  const Expr zero_frac =
      Expr::optional(Expr::seq({Expr::literal("."), Expr::repeat(Expr::literal("0"), 1, kMaxBoundedFractionDigits)}));
  // Magnitudes m in [a, b] (a >= 0; open ends as flagged), written I(.F)?.
  auto magnitude = [&](uint64_t a, bool a_open, std::optional<uint64_t> b, bool b_open) -> std::optional<Expr> {
    std::vector<Expr> alts;
    const uint64_t any_lo = a_open ? a + 1 : a;  // integer parts with any fraction: [any_lo, b - 1]
    if (!b || (*b >= 1 && any_lo <= *b - 1)) {
      std::optional<uint64_t> any_hi;
      if (b) any_hi = *b - 1;
      alts.push_back(Expr::seq({unsigned_range(any_lo, any_hi, kMaxNumberIntDigits), Expr::optional(frac)}));
    }
    if (a_open && (!b || a < *b)) alts.push_back(Expr::seq({Expr::literal(std::to_string(a)), nonzero_frac}));
    if (b && !b_open && *b >= a && !(a_open && *b == a))
      alts.push_back(Expr::seq({Expr::literal(std::to_string(*b)), zero_frac}));
    if (alts.empty()) return std::nullopt;
    return Expr::alt(std::move(alts));
  };
  std::vector<Expr> alts;
  const double lo = lo_b ? lo_b->value : 0, hi = hi_b ? hi_b->value : 0;
  // x >= 0
  if (!hi_b || hi > 0 || (hi == 0 && !hi_b->exclusive)) {
    uint64_t a = 0;
    bool a_open = false;
    if (lo_b && lo >= 0) a = uint64_t(lo), a_open = lo_b->exclusive;
    std::optional<uint64_t> b;
    if (hi_b) b = uint64_t(hi);
    if (auto e = magnitude(a, a_open, b, hi_b && hi_b->exclusive)) alts.push_back(*e);
  }
  // x < 0: magnitude in (max(-hi, 0), -lo]
  if (!lo_b || lo < 0) {
    uint64_t a = 0;
    bool a_open = true;
    if (hi_b && hi < 0) a = uint64_t(-hi), a_open = hi_b->exclusive;
    std::optional<uint64_t> b;
    if (lo_b) b = uint64_t(-lo);
    if (auto e = magnitude(a, a_open, b, lo_b && lo_b->exclusive)) alts.push_back(Expr::seq({Expr::literal("-"), *e}));
  }
  if (alts.empty()) return invalid_argument("JSON Schema number bounds admit no value");
  return Expr::alt(std::move(alts));
}

Result<Expr> JsonPieces::format(const std::string& name) const {
  static const std::map<std::string, std::string> kPatterns = [] {
    const std::string year = "([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])";
    const std::string leap_year = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)";
    const std::string month_day =
        "((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))";
    const std::string date = "(" + year + "-" + month_day + "|" + leap_year + "-02-29)";
    const std::string time =
        "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
    const std::string n = "[0-9]{1,4}";
    const std::string dur_date = "(" + n + "Y(" + n + "M)?(" + n + "D)?|" + n + "M(" + n + "D)?|" + n + "D)";
    const std::string dur_time = "T(" + n + "H(" + n + "M)?(" + n + "S)?|" + n + "M(" + n + "S)?|" + n + "S)";
    const std::string label = "[A-Za-z0-9]+(-[A-Za-z0-9]+)*";
    const std::string octet = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
    const std::string hex4 = "[0-9a-f]{1,4}";
    return std::map<std::string, std::string>{
        {"date", date},
        {"time", time},
        {"date-time", date + "T" + time},
        {"duration", "P(" + dur_date + "(" + dur_time + ")?|" + dur_time + "|" + n + "W)"},
        {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
        {"email", "[A-Za-z0-9_%+-]+(\\.[A-Za-z0-9_%+-]+)*@" + label + "(\\." + label + ")+"},
        {"hostname", label + "(\\." + label + ")*"},
        {"ipv4", octet + "(\\." + octet + "){3}"},
        {"ipv6", hex4 + "(:" + hex4 + "){7}"},
        {"uri", "https?://" + label + "(\\." + label + ")*(/[A-Za-z0-9._~-]*)*"},
    };
  }();
  auto it = kPatterns.find(name);
  if (it == kPatterns.end()) return unsupported("unsupported JSON Schema format '" + name + "'");
  FG_ASSIGN_OR_RETURN(Expr body, regex_expr(it->second, {}));
  const Expr q = Expr::literal("\"");
  return Expr::seq({q, body, q});
}

int32_t JsonPieces::any_value_rule() {
  if (any_value_ >= 0) return any_value_;
  any_value_ = b_.add_rule("json_value");
  const Expr v = Expr::call(any_value_);
  const Expr array =
      Expr::seq({punct('['), Expr::optional(Expr::seq({v, Expr::star(Expr::seq({punct(','), v}))})), punct(']')});
  auto num = number(std::nullopt, std::nullopt);
  FG_CHECK(num.is_ok());
  b_.set_body(any_value_, Expr::alt({any_object(), array, string(), *num, Expr::literal("true"), Expr::literal("false"),
                                     Expr::literal("null")}));
  return any_value_;
}

Expr JsonPieces::any_object() {
  const Expr v = Expr::call(any_value_rule());
  const Expr member = Expr::seq({string(), punct(':'), v});
  return Expr::seq(
      {punct('{'), Expr::optional(Expr::seq({member, Expr::star(Expr::seq({punct(','), member}))})), punct('}')});
}

std::string JsonPieces::dump(const nlohmann::ordered_json& value) const {
  auto sep = [&](char c) -> std::string {
    if (ws_ == JsonWhitespace::kCompact || (ws_ == JsonWhitespace::kFlexible)) return std::string(1, c);
    return c == ':' || c == ',' ? std::string(1, c) + " " : std::string(1, c);
  };
  if (value.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (!first) out += sep(',');
      first = false;
      out += nlohmann::json(it.key()).dump() + sep(':') + dump(it.value());
    }
    return out + "}";
  }
  if (value.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < value.size(); ++i) {
      if (i) out += sep(',');
      out += dump(value[i]);
    }
    return out + "]";
  }
  return value.dump();
}

}  // namespace fg::grammar

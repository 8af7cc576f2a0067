// Building blocks of JSON grammars that the JSON Schema compiler and the tool-call grammars share:
// the whitespace rule, canonical strings, numbers (optionally within bounds), string formats,
// the generic JSON value, and serialization of literal values (const, enum) in the same style.
//
// Strings are canonical: every character has one encoding (raw UTF-8, or \" \\ \n \t \r \b \f,
// or \u00XX for other control characters; never \u escapes of printable characters, never \/).
// That keeps keys comparable byte for byte, so an object can exclude its declared keys from its
// additional ones. Unbounded digit runs are capped so a model cannot loop on one number.
// Internal to the grammar layer; must never depend on a tokenizer.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "grammar/expr.h"
#include "grammar/grammar_builder.h"

namespace fg::grammar {

// Where whitespace may appear in generated JSON. Unbounded whitespace lets models loop, so every
// choice bounds it.
enum class JsonWhitespace {
  kSpaced,    // {"a": 1, "b": [1, 2]}  one space after ':' and ',', none elsewhere (the default)
  kCompact,   // {"a":1,"b":[1,2]}
  kFlexible,  // at most one space before and after each of { } [ ] : ,
};

inline constexpr int kMaxIntegerDigits = 18;    // integers without bounds: up to 18 digits
inline constexpr int kMaxNumberIntDigits = 15;  // numbers: integer part, fraction, exponent caps
inline constexpr int kMaxFractionDigits = 15;
inline constexpr int kMaxBoundedFractionDigits = 6;  // numbers with bounds (see number_expr)
inline constexpr int kMaxExponentDigits = 2;

class JsonPieces {
 public:
  JsonPieces(GrammarBuilder& builder, JsonWhitespace ws) : b_(builder), ws_(ws) {}

  // Punctuation with the whitespace rule applied: c in { } [ ] : ,
  Expr punct(char c) const;
  // A string's characters (without the quotes).
  Expr string_chars() const;
  // A whole string with min..max characters (max < 0: unbounded).
  Expr string(int min_chars = 0, int max_chars = -1) const;
  // A whole string whose decoded value is none of `excluded`.
  Expr string_except(const std::vector<std::string>& excluded) const;

  // Numbers. Bounds are given as doubles; integers accept any bounds, numbers only integer-valued
  // ones (Errors: kUnsupported naming the keyword otherwise).
  struct Bound {
    double value = 0;
    bool exclusive = false;
    std::string keyword;  // for messages
  };
  Result<Expr> integer(const std::optional<Bound>& lo, const std::optional<Bound>& hi) const;
  Result<Expr> number(const std::optional<Bound>& lo, const std::optional<Bound>& hi) const;

  // A string of a format (date-time, date, time, duration, uuid, email, hostname, ipv4, ipv6,
  // uri), quotes included. kUnsupported for other formats.
  Result<Expr> format(const std::string& name) const;

  // The rule matching any JSON value (made on first use; recursive).
  int32_t any_value_rule();
  // Any JSON object (its members' values call any_value_rule()).
  Expr any_object();

  // `value` serialized in this whitespace style, as JSON text.
  std::string dump(const nlohmann::ordered_json& value) const;

  JsonWhitespace whitespace() const { return ws_; }

 private:
  GrammarBuilder& b_;
  JsonWhitespace ws_;
  int32_t any_value_ = -1;
};

}  // namespace fg::grammar

// Regular expressions as grammars: the subset that JSON Schema `pattern` and TGI's regex
// grammars use. Literals (any UTF-8), `.`, classes `[a-z]` `[^...]`, escapes \d \w \s \D \W \S
// \n \t \r \f \v \0 \xHH \uHHHH \u{H...} and escaped punctuation, groups `( )` `(?: )`
// `(?<name> )` `(?P<name> )`, alternation, quantifiers * + ? {n} {n,} {n,m} (lazy forms match the
// same strings), and ^ / $ at the ends of the pattern or of its top-level alternatives.
// Refused by name (kUnsupported): backreferences, lookaround, word boundaries, \p{...}, inline
// flags, possessive quantifiers, anchors elsewhere.
//
// Character semantics are chosen so a generated string matches under both ECMA-262 (JSON Schema)
// and Python `re` (TGI clients): `.` is any character except \n \r U+2028 U+2029, \d \w \s are
// ASCII ([0-9], [A-Za-z0-9_], [ \t\n\r\f\v]), and \D \W \S are their complements within ASCII.
// Must never depend on a tokenizer.
#pragma once

#include <string_view>

#include "core/status.h"
#include "grammar/expr.h"
#include "grammar/grammar.h"
#include "grammar/grammar_builder.h"

namespace fg::grammar {

struct RegexOptions {
  // false: the whole text must match (TGI regex; anchors at the ends are allowed and change
  // nothing). true: JSON Schema `pattern` semantics: a match anywhere in the text, so an
  // alternative without ^ may be preceded, and one without $ followed, by any characters.
  bool search = false;
  // Emit each character as it appears inside a JSON string (" \ and control characters escaped),
  // for patterns of JSON string values. The pattern is matched against the decoded string.
  bool json_string = false;
};

// The pattern as an expression over bytes (UTF-8). Errors: kInvalidArgument for malformed
// patterns, kUnsupported for constructs outside the subset, both naming the construct and offset.
Result<Expr> regex_expr(std::string_view pattern, const RegexOptions& options = {});

// A grammar whose root matches exactly the strings the pattern matches in full.
Result<Grammar> compile_regex(std::string_view pattern, const GrammarLimits& limits = {});

// One character of `set` as it appears inside a JSON string: raw UTF-8, except " \ and control
// characters, which take their short escapes (\" \\ \n \t \r \b \f) or \u00XX.
Expr json_string_chars(const CharSet& set);

}  // namespace fg::grammar

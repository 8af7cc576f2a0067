// GBNF grammars (the EBNF dialect llama.cpp's server accepts in its `grammar` field) as grammars.
//
//   root   ::= "{" ws pair ("," ws pair)* "}"    # comments run to the end of the line
//   pair   ::= [a-z]+ ":" ws ( "true" | "false" | num )
//   num    ::= "-"? [0-9]{1,10}
//   ws     ::= [ \t\n]?
//
// Rules are `name ::= alternatives`; names use [A-Za-z0-9_-]; a rule runs until the next line
// that starts a rule. Elements: rule names, "literals" and [character classes] (with ranges, ^
// and the escapes \n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH), `.` (any character), groups,
// `|`, and the postfix operators * + ? {m} {m,} {m,n}. The grammar starts at `root`.
// Errors (kInvalidArgument, with the line): syntax errors, undefined or twice-defined rules, no
// root, left recursion; token references (<...>) are refused as kUnsupported.
// Must never depend on a tokenizer.
#pragma once

#include <string_view>

#include "core/status.h"
#include "grammar/grammar.h"
#include "grammar/grammar_builder.h"

namespace fg::grammar {

Result<Grammar> compile_gbnf(std::string_view text, const GrammarLimits& limits = {});

}  // namespace fg::grammar

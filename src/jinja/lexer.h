// Splits template text into tokens exactly as Jinja2's lexer does with the settings transformers
// uses for chat templates: trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False,
// `{%-`/`-%}` whitespace control, `{%+` to keep leading whitespace, `{% raw %}`, comments.
// The lexer owns all whitespace handling; the parser and interpreter never trim text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fg::jinja {

enum class TokenType {
  kData,           // literal template text (already whitespace-controlled)
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,           // identifiers and keywords (if, for, in, not, and, true, none, ...)
  kString,         // value holds the unescaped UTF-8 text
  kInteger,
  kFloat,
  kOperator,  // value holds the operator text: + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { } ;
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string value;
  int64_t int_value = 0;
  double float_value = 0.0;
  int line = 1;
};

// Throws JinjaError(kSyntax) with the line on malformed input (unterminated tags, strings or
// comments, stray characters, unbalanced brackets inside a tag).
std::vector<Token> tokenize(std::string_view source);

}  // namespace fg::jinja

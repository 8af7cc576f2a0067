// Parses Jinja2 template tokens into the syntax tree of ast.h, following Jinja2's grammar and
// operator precedence. Tags outside the chat-template subset (extends, include, import, block,
// autoescape, ...) are refused with a syntax error naming the tag.
#pragma once

#include <string_view>

#include "jinja/ast.h"

namespace fg::jinja {

// Throws JinjaError(kSyntax) with the template line. max_nesting bounds the depth of nested
// expressions and blocks so that hostile input cannot exhaust the stack.
Body parse_template(std::string_view source, int max_nesting);

}  // namespace fg::jinja

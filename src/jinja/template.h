// The public face of flashgen's Jinja2-subset engine: parse a template once, render it many
// times. Everything else under jinja/ is an implementation detail.
//
//   FG_ASSIGN_OR_RETURN(auto tpl, fg::jinja::Template::parse(text));
//   fg::jinja::Dict vars;  vars.set("messages", fg::jinja::Value::from_json(messages));
//   FG_ASSIGN_OR_RETURN(std::string prompt, tpl.render(vars));
//
// A parsed Template is immutable and may be rendered from several threads at once.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "jinja/interpreter.h"
#include "jinja/value.h"

namespace fg::jinja {

struct RenderOptions {
  Limits limits;
  // What strftime_now() sees; the local time of the call when unset.
  std::optional<std::tm> fixed_now;
};

class Template {
 public:
  // Syntax errors come back as InvalidArgument "template syntax error (line N): ...".
  static Result<Template> parse(std::string_view source, const Limits& limits = {});

  // Template errors come back as InvalidArgument naming the kind and the line, e.g.
  // "template error (line 12): Conversation roles must alternate user/assistant/..." for
  // raise_exception, "undefined value (line 3): 'dict object' has no attribute 'content'";
  // exceeded limits as ResourceExhausted.
  Result<std::string> render(const Dict& variables, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace fg::jinja

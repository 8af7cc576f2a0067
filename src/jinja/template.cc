// Template::parse / Template::render: the boundary where the interpreter's JinjaError becomes an
// fg::Status with a message that names the kind of failure and the template line.
#include "jinja/template.h"

#include "jinja/error.h"
#include "jinja/parser.h"

namespace fg::jinja {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kSyntax: return "template syntax error";
    case ErrorKind::kUndefined: return "undefined value";
    case ErrorKind::kType: return "template type error";
    case ErrorKind::kRaised: return "template error";
    case ErrorKind::kSecurity: return "template sandbox violation";
    case ErrorKind::kLimit: return "template limit exceeded";
  }
  return "template error";
}

namespace {

Status to_status(const JinjaError& e) {
  std::string msg = error_kind_name(e.kind());
  if (e.line() > 0) msg += " (line " + std::to_string(e.line()) + ")";
  msg += ": " + e.message();
  return Status(e.kind() == ErrorKind::kLimit ? ErrorCode::kResourceExhausted : ErrorCode::kInvalidArgument,
                std::move(msg));
}

}  // namespace

Result<Template> Template::parse(std::string_view source, const Limits& limits) {
  if (!utf8_valid(source)) return invalid_argument("template syntax error: the template is not valid UTF-8");
  try {
    Template t;
    t.body_ = std::make_shared<const Body>(parse_template(source, limits.max_nesting));
    return t;
  } catch (const JinjaError& e) {
    return to_status(e);
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::kResourceExhausted, "template too large to parse");
  }
}

Result<std::string> Template::render(const Dict& variables, const RenderOptions& options) const {
  if (!body_) return internal_error("render() on a template that was never parsed");
  try {
    Interpreter interp(options.limits, variables, options.fixed_now);
    std::string out;
    interp.render(*body_, out);
    return out;
  } catch (const JinjaError& e) {
    return to_status(e);
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::kResourceExhausted, "template rendering ran out of memory");
  }
}

}  // namespace fg::jinja

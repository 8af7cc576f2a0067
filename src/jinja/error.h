// The one exception type of the template interpreter. It never leaves fg::jinja: Template::parse
// and Template::render catch it and return an fg::Status naming the kind and the template line.
#pragma once

#include <exception>
#include <string>
#include <utility>

namespace fg::jinja {

enum class ErrorKind {
  kSyntax,     // TemplateSyntaxError: the template text is malformed
  kUndefined,  // UndefinedError: attribute/item of an undefined value, calling undefined
  kType,       // TypeError / ValueError: an operation on values that do not support it
  kRaised,     // raise_exception("...") called by the template
  kSecurity,   // a sandbox refusal (list.append, dunder attributes, ...)
  kLimit,      // flashgen's own limits: output size, loop steps, recursion depth
};

const char* error_kind_name(ErrorKind kind);

class JinjaError : public std::exception {
 public:
  JinjaError(ErrorKind kind, std::string message, int line = 0)
      : kind_(kind), message_(std::move(message)), line_(line) {}
  const char* what() const noexcept override { return message_.c_str(); }
  ErrorKind kind() const { return kind_; }
  const std::string& message() const { return message_; }
  int line() const { return line_; }
  void set_line_if_unset(int line) {
    if (line_ == 0) line_ = line;
  }

 private:
  ErrorKind kind_;
  std::string message_;
  int line_;
};

[[noreturn]] inline void throw_type_error(std::string msg) {
  throw JinjaError(ErrorKind::kType, std::move(msg));
}
[[noreturn]] inline void throw_undefined_error(std::string msg) {
  throw JinjaError(ErrorKind::kUndefined, std::move(msg));
}

}  // namespace fg::jinja

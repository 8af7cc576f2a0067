// Errors in three tiers (STYLE.md):
//  - broken invariants: FG_CHECK aborts with the expression and file:line, in release builds too;
//  - recoverable conditions: Status / Result<T> with a code and a message a user can act on;
//  - the server maps codes to HTTP in one place.
// This file must never depend on anything but the standard library.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace fg {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,    // the caller's input is wrong (bad parameter, malformed file)
  kNotFound,           // a file, tensor or model the caller named does not exist
  kUnsupported,        // understood but not implemented (an architecture, a tokenizer component)
  kContextTooLong,     // a prompt longer than the model or the KV pool can ever hold
  kOutOfPages,         // the KV page pool cannot serve the request now
  kResourceExhausted,  // a queue or memory limit was hit
  kCancelled,          // the client went away or asked to stop
  kIo,                 // the operating system refused a read or write
  kInternal,           // a bug: should not happen
};

const char* error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }

  bool is_ok() const { return code_ == ErrorCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: <message>"
  std::string to_string() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) {
  return {ErrorCode::kInvalidArgument, std::move(m)};
}
inline Status not_found(std::string m) {
  return {ErrorCode::kNotFound, std::move(m)};
}
inline Status unsupported(std::string m) {
  return {ErrorCode::kUnsupported, std::move(m)};
}
inline Status internal_error(std::string m) {
  return {ErrorCode::kInternal, std::move(m)};
}

// A value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).is_ok()) v_ = Status(ErrorCode::kInternal, "Result built from an ok Status");
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    static const Status kOkStatus;
    return is_ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

[[noreturn]] void check_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace fg

// Broken invariant: abort with the expression, file:line and an optional message (always on).
#define FG_CHECK(cond, ...)                                                               \
  do {                                                                                    \
    if (!(cond)) [[unlikely]]                                                             \
      ::fg::check_failed(#cond, __FILE__, __LINE__, ::fg::detail_check_msg(__VA_ARGS__)); \
  } while (0)

// Propagate a failed Status from an expression returning Status.
#define FG_RETURN_IF_ERROR(expr)                \
  do {                                          \
    ::fg::Status fg_status_ = (expr);           \
    if (!fg_status_.is_ok()) return fg_status_; \
  } while (0)

#define FG_CONCAT_INNER(a, b) a##b
#define FG_CONCAT(a, b) FG_CONCAT_INNER(a, b)
// `FG_ASSIGN_OR_RETURN(auto x, f());` : x = f().value(), or return f()'s Status.
#define FG_ASSIGN_OR_RETURN(lhs, expr) FG_ASSIGN_OR_RETURN_IMPL(FG_CONCAT(fg_result_, __LINE__), lhs, expr)
#define FG_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.is_ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

namespace fg {
inline std::string detail_check_msg() {
  return {};
}
inline std::string detail_check_msg(std::string m) {
  return m;
}
}  // namespace fg

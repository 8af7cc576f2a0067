#include "core/status.h"

namespace fg {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "Ok";
    case ErrorCode::kInvalidArgument: return "InvalidArgument";
    case ErrorCode::kNotFound: return "NotFound";
    case ErrorCode::kUnsupported: return "Unsupported";
    case ErrorCode::kContextTooLong: return "ContextTooLong";
    case ErrorCode::kOutOfPages: return "OutOfPages";
    case ErrorCode::kResourceExhausted: return "ResourceExhausted";
    case ErrorCode::kCancelled: return "Cancelled";
    case ErrorCode::kIo: return "Io";
    case ErrorCode::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "Ok";
  return std::string(error_code_name(code_)) + ": " + message_;
}

void check_failed(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "flashgen: invariant broken: %s at %s:%d%s%s\n", expr, file, line, msg.empty() ? "" : ": ",
               msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace fg

// ErrorCode -> HTTP status and the two error body shapes (see api_error.h).
#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace fg::server {

int http_status_for(ErrorCode code, ApiDialect dialect) {
  const bool tgi = dialect == ApiDialect::kTgi;
  switch (code) {
    case ErrorCode::kOk: return 200;
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kUnsupported:
    case ErrorCode::kContextTooLong: return tgi ? 422 : 400;
    case ErrorCode::kNotFound: return 404;
    case ErrorCode::kResourceExhausted: return 429;
    case ErrorCode::kOutOfPages: return 503;  // transient: the client may retry
    case ErrorCode::kCancelled: return 503;   // only seen when the server itself stops a request
    case ErrorCode::kIo:
    case ErrorCode::kInternal: return 500;
  }
  return 500;
}

static const char* openai_type_for(int http_status) {
  if (http_status == 429) return "rate_limit_error";
  if (http_status == 503) return "service_unavailable";
  if (http_status >= 500) return "server_error";
  if (http_status == 404) return "not_found_error";
  return "invalid_request_error";
}

ApiError api_error_from_status(const Status& status, ApiDialect dialect, std::string param) {
  ApiError e;
  e.http_status = http_status_for(status.code(), dialect);
  e.message = status.message();
  e.type = openai_type_for(e.http_status);
  e.param = std::move(param);
  switch (status.code()) {
    case ErrorCode::kContextTooLong: e.code = "context_length_exceeded"; break;
    case ErrorCode::kResourceExhausted: e.code = "queue_full"; break;
    case ErrorCode::kOutOfPages: e.code = "out_of_kv_pages"; break;
    case ErrorCode::kUnsupported: e.code = "unsupported_parameter"; break;
    default: break;
  }
  return e;
}

ApiError invalid_request(std::string message, std::string param, std::string code) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

ApiError invalid_type(const std::string& param, const char* expected) {
  return invalid_request("Invalid type for '" + param + "': expected " + expected + ".", param, "invalid_type");
}

ApiError missing_parameter(const std::string& param) {
  return invalid_request("Missing required parameter: '" + param + "'.", param, "missing_required_parameter");
}

ApiError unknown_parameter(const std::string& param) {
  return invalid_request("Unrecognized request argument supplied: '" + param + "'.", param, "unknown_parameter");
}

ApiError not_found_error(std::string message, std::string code) {
  return ApiError{404, std::move(message), "not_found_error", "", std::move(code)};
}

ApiError for_dialect(ApiError error, ApiDialect dialect) {
  if (dialect == ApiDialect::kTgi && error.http_status == 400) error.http_status = 422;
  return error;
}

std::string openai_error_body(const ApiError& error) {
  nlohmann::json j = {{"error",
                       {{"message", error.message},
                        {"type", error.type.empty() ? openai_type_for(error.http_status) : error.type},
                        {"param", error.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.param)},
                        {"code", error.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.code)}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

const char* tgi_error_type(int http_status) {
  if (http_status == 429 || http_status == 503) return "overloaded";
  if (http_status == 401) return "authentication";
  if (http_status == 424) return "generation";
  if (http_status >= 400 && http_status < 500) return "validation";  // the request itself: 400, 404, 408, 413, 422, 431
  return "incomplete_generation";
}

std::string tgi_error_body(const ApiError& error) {
  nlohmann::json j = {{"error", error.message}, {"error_type", tgi_error_type(error.http_status)}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string error_body(const ApiError& error, ApiDialect dialect) {
  return dialect == ApiDialect::kTgi ? tgi_error_body(error) : openai_error_body(error);
}

}  // namespace fg::server

// ApiError: one error answer of the HTTP API, and the single place where fg::ErrorCode becomes an
// HTTP status (STYLE.md: "the server maps codes to HTTP in one place").
//
// Two wire shapes are produced from the same ApiError:
//  - OpenAI: {"error": {"message", "type", "param", "code"}}
//  - text-generation-inference: {"error": "...", "error_type": "validation" | "overloaded" | ...}
// This file must not know about routes or transports.
#pragma once

#include <string>

#include "core/status.h"

namespace fg::server {

enum class ApiDialect { kOpenAi, kTgi };

struct ApiError {
  int http_status = 500;
  std::string message;
  std::string type;   // OpenAI error type, e.g. "invalid_request_error"
  std::string param;  // offending request field, "" when none
  std::string code;   // machine-readable code, e.g. "invalid_type"; "" when none
};

// The HTTP status for an ErrorCode. TGI answers validation problems with 422, OpenAI with 400.
int http_status_for(ErrorCode code, ApiDialect dialect);

// An ApiError for a failed Status (the message is the Status message, unchanged).
ApiError api_error_from_status(const Status& status, ApiDialect dialect, std::string param = {});

// Common request problems, phrased once.
ApiError invalid_request(std::string message, std::string param = {}, std::string code = {});
ApiError invalid_type(const std::string& param, const char* expected);
ApiError missing_parameter(const std::string& param);
ApiError unknown_parameter(const std::string& param);
ApiError not_found_error(std::string message, std::string code = {});

// TGI reports request validation problems as 422 where OpenAI uses 400; applies that rule.
ApiError for_dialect(ApiError error, ApiDialect dialect);

// Wire bodies.
std::string openai_error_body(const ApiError& error);
std::string tgi_error_body(const ApiError& error);
std::string error_body(const ApiError& error, ApiDialect dialect);

// The TGI error_type for a status ("validation", "overloaded", "generation", ...).
const char* tgi_error_type(int http_status);

}  // namespace fg::server

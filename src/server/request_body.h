// Request-body helpers shared by the API routes: UTF-8 and JSON checks with user-facing errors,
// JSON replies, and the prompt-length rule.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/api_error.h"
#include "server/http_types.h"

namespace fg::server {

// Parses the body as one JSON object. Invalid UTF-8, malformed JSON, or a non-object body give a
// 400 ApiError naming the problem (with the byte offset where one is known).
std::optional<ApiError> parse_json_object(const HttpRequest& req, nlohmann::json& out);

// Serializes with invalid UTF-8 replaced (generated text can end mid-character in a token's text).
std::string dump_json(const nlohmann::json& j);

HttpResponse json_response(int status, const nlohmann::json& body);
Reply json_reply(int status, const nlohmann::json& body);
Reply error_reply(const ApiError& error, ApiDialect dialect);

// The context rule shared by every generating route: the prompt must leave room for at least one
// generated token, and prompt + max_new_tokens must fit max_model_len. With no max_new_tokens
// asked, the route's `default_max` is used, capped to the room left; a default of std::nullopt
// means no limit (the engine then stops at the context or the KV pool). Returns the
// SamplingParams::max_new_tokens to use.
struct LengthCheck {
  std::optional<int32_t> max_new_tokens;
  std::optional<ApiError> error;
};
LengthCheck check_length(int64_t prompt_tokens, std::optional<int64_t> requested, std::optional<int64_t> default_max,
                         int64_t max_model_len, const std::string& max_tokens_param);

// "data: <json>\n\n"
std::string sse_event(const nlohmann::json& j);

}  // namespace fg::server

// Request-body helpers shared by the API routes: UTF-8 and JSON checks with user-facing errors,
// JSON replies, and the prompt-length rule.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"
#include "server/http_types.h"

namespace fg::server {

// Limits every route that reads a request body applies (flags of `flashgen serve`; docs/api.md
// "Server options"). 0 means "no limit of its own" where noted.
struct RequestLimits {
  int64_t max_prompt_tokens = 0;  // prompt tokens of one prompt; 0: the context (max_model_len - 1)
  int64_t max_output_tokens = 0;  // max_tokens / max_new_tokens asked; 0: the context is the only cap
  size_t max_stop_bytes = 1024;   // bytes of one stop string
  int max_json_depth = 64;        // nesting of arrays and objects in a request body
};

// The nesting depth of arrays and objects in a JSON text (strings skipped), counted without
// parsing, so a hostile body is refused before any recursive code sees it.
int json_nesting_depth(std::string_view text);

// Parses the body as one JSON object. Invalid UTF-8, nesting deeper than `max_depth`, malformed
// JSON, or a non-object body give a 400 ApiError naming the problem (with the byte offset where
// one is known).
std::optional<ApiError> parse_json_object(const HttpRequest& req, nlohmann::json& out, int max_depth = 64);

// Serializes with invalid UTF-8 replaced (generated text can end mid-character in a token's text).
std::string dump_json(const nlohmann::json& j);

HttpResponse json_response(int status, const nlohmann::json& body);
Reply json_reply(int status, const nlohmann::json& body);
// The reply for an error; a 429 carries Retry-After.
Reply error_reply(const ApiError& error, ApiDialect dialect);

// The context rule shared by every generating route: the prompt must leave room for at least one
// generated token (and stay within limits.max_prompt_tokens), and prompt + max_new_tokens must fit
// max_model_len; a requested max_new_tokens above limits.max_output_tokens is refused. With no
// max_new_tokens asked, the route's `default_max` is used, capped to the room left and to
// limits.max_output_tokens; a default of std::nullopt means no limit (the engine then stops at the
// context or the KV pool). Returns the SamplingParams::max_new_tokens to use.
struct LengthCheck {
  std::optional<int32_t> max_new_tokens;
  std::optional<ApiError> error;
};
LengthCheck check_length(int64_t prompt_tokens, std::optional<int64_t> requested, std::optional<int64_t> default_max,
                         int64_t max_model_len, const std::string& max_tokens_param, const RequestLimits& limits = {});

// A stop string longer than limits.max_stop_bytes: the error naming `param`, else nullopt.
std::optional<ApiError> check_stop_string(const std::string& stop, const std::string& param,
                                          const RequestLimits& limits);

// The answer to a chat that the template could not render: 400 (TGI 422) in every case, the
// template being fixed and the messages the client's. A template that hit a rendering limit
// (output size, steps, recursion) says so with code "chat_template_limit" rather than the 429 a
// kResourceExhausted would otherwise give (retrying the same messages cannot help).
ApiError chat_template_error(const Status& status, const std::string& param);

// "data: <json>\n\n"
std::string sse_event(const nlohmann::json& j);

}  // namespace fg::server

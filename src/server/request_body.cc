// Request-body helpers (see request_body.h).
#include "server/request_body.h"

#include <algorithm>

#include "server/utf8.h"

namespace fg::server {

namespace {
// Seconds a client refused with 429 is asked to wait: a few engine steps free room, and a client
// should not idle longer than that.
constexpr const char* kRetryAfterSeconds = "1";
}  // namespace

int json_nesting_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

std::optional<ApiError> parse_json_object(const HttpRequest& req, nlohmann::json& out, int max_depth) {
  size_t bad = 0;
  if (!is_valid_utf8(req.body, &bad)) {
    return invalid_request("Request body is not valid UTF-8 (bad byte sequence at offset " + std::to_string(bad) + ").",
                           "", "invalid_utf8");
  }
  if (req.body.empty()) return invalid_request("Request body is empty; expected a JSON object.", "", "invalid_json");
  if (json_nesting_depth(req.body) > max_depth) {
    return invalid_request("Request body nests arrays and objects deeper than " + std::to_string(max_depth) +
                               " levels (the server's limit).",
                           "", "invalid_json");
  }
  try {
    out = nlohmann::json::parse(req.body);
  } catch (const nlohmann::json::parse_error& e) {
    return invalid_request("Request body is not valid JSON (byte " + std::to_string(e.byte) + "): " + e.what(), "",
                           "invalid_json");
  } catch (const nlohmann::json::exception& e) {
    // E.g. a number too large for a double (1e400): valid JSON syntax that no field can hold.
    return invalid_request(std::string("Request body cannot be read: ") + e.what(), "", "invalid_json");
  }
  if (!out.is_object()) return invalid_request("Request body must be a JSON object.", "", "invalid_json");
  return std::nullopt;
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

HttpResponse json_response(int status, const nlohmann::json& body) {
  HttpResponse r;
  r.status = status;
  r.body = dump_json(body);
  return r;
}

Reply json_reply(int status, const nlohmann::json& body) {
  Reply r;
  r.head = json_response(status, body);
  return r;
}

Reply error_reply(const ApiError& error, ApiDialect dialect) {
  Reply r;
  ApiError e = for_dialect(error, dialect);
  r.head.status = e.http_status;
  r.head.body = error_body(e, dialect);
  if (e.http_status == 429) r.head.headers.push_back({"Retry-After", kRetryAfterSeconds});
  return r;
}

LengthCheck check_length(int64_t prompt_tokens, std::optional<int64_t> requested, std::optional<int64_t> default_max,
                         int64_t max_model_len, const std::string& max_tokens_param, const RequestLimits& limits) {
  LengthCheck out;
  if (limits.max_prompt_tokens > 0 && prompt_tokens > limits.max_prompt_tokens) {
    out.error = invalid_request("The prompt has " + std::to_string(prompt_tokens) +
                                    " tokens, more than this server's limit of " +
                                    std::to_string(limits.max_prompt_tokens) + " (--max-prompt-tokens).",
                                "", "context_length_exceeded");
    return out;
  }
  if (requested && limits.max_output_tokens > 0 && *requested > limits.max_output_tokens) {
    out.error =
        invalid_request("Invalid '" + max_tokens_param + "': this server generates at most " +
                            std::to_string(limits.max_output_tokens) +
                            " tokens per request (--max-output-tokens), got " + std::to_string(*requested) + ".",
                        max_tokens_param, "invalid_value");
    return out;
  }
  if (!requested && limits.max_output_tokens > 0)
    default_max = std::min(default_max.value_or(INT64_MAX), limits.max_output_tokens);
  if (max_model_len > 0 && prompt_tokens >= max_model_len) {
    out.error = invalid_request(
        "The prompt has " + std::to_string(prompt_tokens) + " tokens, but this model's maximum context length is " +
            std::to_string(max_model_len) + " tokens (prompt and output together). Shorten the prompt.",
        "", "context_length_exceeded");
    return out;
  }
  const int64_t room = max_model_len > 0 ? max_model_len - prompt_tokens : INT64_MAX;
  if (requested) {
    if (*requested > room) {
      out.error = invalid_request("This model's maximum context length is " + std::to_string(max_model_len) +
                                      " tokens, but " + std::to_string(prompt_tokens + *requested) +
                                      " were requested (" + std::to_string(prompt_tokens) + " in the prompt, " +
                                      std::to_string(*requested) + " in '" + max_tokens_param + "'). Lower '" +
                                      max_tokens_param + "' to at most " + std::to_string(room) + ".",
                                  max_tokens_param, "context_length_exceeded");
      return out;
    }
    out.max_new_tokens = int32_t(std::min<int64_t>(*requested, INT32_MAX));
  } else if (default_max) {
    out.max_new_tokens = int32_t(std::min<int64_t>({*default_max, room, INT32_MAX}));
  }
  return out;
}

std::optional<ApiError> check_stop_string(const std::string& stop, const std::string& param,
                                          const RequestLimits& limits) {
  if (stop.size() <= limits.max_stop_bytes) return std::nullopt;
  return invalid_request("Invalid '" + param + "': a stop string may have at most " +
                             std::to_string(limits.max_stop_bytes) + " bytes (--max-stop-bytes), got " +
                             std::to_string(stop.size()) + ".",
                         param, "invalid_value");
}

ApiError chat_template_error(const Status& status, const std::string& param) {
  if (status.code() == ErrorCode::kResourceExhausted)
    return invalid_request(
        "The chat template could not render these messages within the server's limits: " + status.message(), param,
        "chat_template_limit");
  ApiError e = api_error_from_status(status, ApiDialect::kOpenAi, param);
  if (e.http_status >= 500 || e.http_status == 429) e.http_status = 400;
  return e;
}

std::string sse_event(const nlohmann::json& j) {
  std::string s = "data: ";
  s += dump_json(j);
  s += "\n\n";
  return s;
}

}  // namespace fg::server

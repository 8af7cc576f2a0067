// Typed JSON field access with OpenAI-style error reporting (see json_fields.h).
#include "server/json_fields.h"

#include <cmath>

namespace fg::server {

JsonFields::JsonFields(const nlohmann::json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

const nlohmann::json* JsonFields::find(std::string_view key) {
  known_.emplace(key);
  if (!obj_.is_object()) return nullptr;
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

void JsonFields::fail(ApiError error) {
  if (!error_) error_ = std::move(error);
}

std::optional<int64_t> JsonFields::get_int(std::string_view key) {
  const nlohmann::json* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX)) {
      std::string message = param(key);
      message += " is too large.";
      fail(invalid_request(std::move(message), param(key), "integer_above_max_value"));
      return std::nullopt;
    }
    return v->get<int64_t>();
  }
  // 5.0 is accepted as 5 (JSON has one number type); 5.5 is not an integer.
  if (v->is_number_float()) {
    double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return int64_t(d);
  }
  fail(invalid_type(param(key), "an integer"));
  return std::nullopt;
}

std::optional<double> JsonFields::get_number(std::string_view key) {
  const nlohmann::json* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_number()) return v->get<double>();
  fail(invalid_type(param(key), "a number"));
  return std::nullopt;
}

std::optional<bool> JsonFields::get_bool(std::string_view key) {
  const nlohmann::json* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_boolean()) return v->get<bool>();
  fail(invalid_type(param(key), "a boolean"));
  return std::nullopt;
}

std::optional<std::string> JsonFields::get_string(std::string_view key) {
  const nlohmann::json* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  fail(invalid_type(param(key), "a string"));
  return std::nullopt;
}

const nlohmann::json* JsonFields::get_raw(std::string_view key) {
  return find(key);
}

const nlohmann::json* JsonFields::get_object(std::string_view key) {
  const nlohmann::json* v = find(key);
  if (v && !v->is_object()) {
    fail(invalid_type(param(key), "an object"));
    return nullptr;
  }
  return v;
}

const nlohmann::json* JsonFields::get_array(std::string_view key) {
  const nlohmann::json* v = find(key);
  if (v && !v->is_array()) {
    fail(invalid_type(param(key), "an array"));
    return nullptr;
  }
  return v;
}

std::string JsonFields::unknown_field() const {
  if (!obj_.is_object()) return {};
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    if (!known_.count(it.key())) return param(it.key());
  }
  return {};
}

}  // namespace fg::server

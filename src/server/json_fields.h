// JsonFields: typed, validated access to the fields of one JSON request object.
//
// Every getter marks its key as known; a present key of the wrong type records an ApiError that
// names the parameter (OpenAI's "invalid_type"). After reading, `unknown_field()` names the first
// key that no getter asked for, so routes can refuse unknown fields where the API they imitate
// does. JSON null counts as "not given" (clients such as huggingface_hub send nulls for defaults).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "server/api_error.h"

namespace fg::server {

class JsonFields {
 public:
  // `obj` must outlive this reader. `prefix` is prepended to parameter names in errors
  // ("stream_options." for a nested object).
  explicit JsonFields(const nlohmann::json& obj, std::string prefix = {});
  // The reader keeps a reference: a temporary object would dangle after this statement.
  explicit JsonFields(const nlohmann::json&& obj, std::string prefix = {}) = delete;

  std::optional<int64_t> get_int(std::string_view key);
  std::optional<double> get_number(std::string_view key);
  std::optional<bool> get_bool(std::string_view key);
  std::optional<std::string> get_string(std::string_view key);
  // Any JSON value (marks the key known); nullptr when absent or null.
  const nlohmann::json* get_raw(std::string_view key);
  // Object-valued field; records invalid_type otherwise.
  const nlohmann::json* get_object(std::string_view key);
  // Array-valued field; records invalid_type otherwise.
  const nlohmann::json* get_array(std::string_view key);

  // Records an error unless one is recorded already (the first problem is reported).
  void fail(ApiError error);
  bool ok() const { return !error_.has_value(); }
  const std::optional<ApiError>& error() const { return error_; }
  // First key of the object that no getter read; "" when none.
  std::string unknown_field() const;
  std::string param(std::string_view key) const { return prefix_ + std::string(key); }

 private:
  const nlohmann::json* find(std::string_view key);

  const nlohmann::json& obj_;
  std::string prefix_;
  std::set<std::string, std::less<>> known_;
  std::optional<ApiError> error_;
};

}  // namespace fg::server

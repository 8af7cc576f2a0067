// Small helpers shared by the loaders of tokenizer.json components (normalizers,
// pre-tokenizers, decoders, post-processors): typed field access with errors that name the file
// and the component, and the `{"String": ...} | {"Regex": ...}` pattern objects.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace fg::tok {

// The "type" field of a component object, or "" when absent.
inline std::string component_type(const nlohmann::json& j) {
  if (j.is_object()) {
    auto it = j.find("type");
    if (it != j.end() && it->is_string()) return it->get<std::string>();
  }
  return {};
}

inline Status component_unsupported(const std::string& where, const std::string& kind, const std::string& type) {
  return unsupported(where + ": " + kind + " '" + (type.empty() ? std::string("<no type>") : type) +
                     "' is not supported by flashgen");
}

// Reads an optional field of type T; wrong types give kInvalidArgument naming the field.
template <class T>
Status json_get(const nlohmann::json& j, const char* key, T& out, const std::string& where) {
  if (!j.is_object()) return invalid_argument(where + ": expected an object around '" + key + "'");
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::ok();
  try {
    out = it->get<T>();
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(where + ": field '" + key + "' has the wrong type (" + e.what() + ")");
  }
  return Status::ok();
}

// A `{"String": s}` or `{"Regex": r}` pattern compiled to a regex (a String pattern matches
// itself literally).
inline Result<std::unique_ptr<Regex>> compile_pattern(const nlohmann::json& j, const std::string& where) {
  if (j.is_object()) {
    if (auto it = j.find("String"); it != j.end() && it->is_string())
      return Regex::compile_literal(it->get<std::string>());
    if (auto it = j.find("Regex"); it != j.end() && it->is_string()) {
      auto re = Regex::compile(it->get<std::string>());
      if (!re.is_ok()) return Status(re.status().code(), where + ": " + re.status().message());
      return re;
    }
  }
  return invalid_argument(where + ": pattern must be {\"String\": ...} or {\"Regex\": ...}, got " +
                          j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

// The literal of a `{"String": s}` pattern, or nullptr-like empty optional for regexes.
inline bool pattern_literal(const nlohmann::json& j, std::string& out) {
  if (j.is_object()) {
    if (auto it = j.find("String"); it != j.end() && it->is_string()) {
      out = it->get<std::string>();
      return true;
    }
  }
  return false;
}

}  // namespace fg::tok

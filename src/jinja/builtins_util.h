// Helpers shared by the builtin filters, tests, methods and globals: Python-style argument
// binding and a few string operations on code points.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "jinja/error.h"
#include "jinja/value.h"

namespace fg::jinja {

// Binds positional and keyword arguments to parameter names, like a Python signature.
// Throws a TypeError for too many positionals, unknown or duplicate keywords.
class BoundArgs {
 public:
  BoundArgs(const CallArgs& args, std::initializer_list<const char*> names, const std::string& fn) : names_(names) {
    vals_.resize(names_.size());
    if (args.args.size() > names_.size())
      throw_type_error(fn + "() takes at most " + std::to_string(names_.size()) + " argument(s) (" +
                       std::to_string(args.args.size()) + " given)");
    for (size_t i = 0; i < args.args.size(); ++i) vals_[i] = args.args[i];
    for (const auto& [k, v] : args.kwargs) {
      size_t i = 0;
      while (i < names_.size() && k != names_[i]) ++i;
      if (i == names_.size()) throw_type_error(fn + "() got an unexpected keyword argument '" + k + "'");
      if (vals_[i]) throw_type_error(fn + "() got multiple values for argument '" + k + "'");
      vals_[i] = v;
    }
  }
  bool has(size_t i) const { return vals_[i].has_value(); }
  // The argument, or `fallback` when it was not passed.
  Value get(size_t i, Value fallback = Value::none()) const { return vals_[i] ? *vals_[i] : fallback; }
  // A passed argument that is not None.
  bool given(size_t i) const { return vals_[i].has_value() && !vals_[i]->is_none(); }

 private:
  std::vector<const char*> names_;
  std::vector<std::optional<Value>> vals_;
};

inline int64_t want_int(const Value& v, const std::string& what) {
  if (v.is_integral()) return v.as_int();
  if (v.is_float()) return static_cast<int64_t>(v.as_double());
  throw_type_error(what + " must be an integer, not " + type_name(v));
}

inline std::string want_str(const Value& v, const std::string& what) {
  if (!v.is_string()) throw_type_error(what + " must be str, not " + type_name(v));
  return v.as_string();
}

// Python str.split(sep, maxsplit) / rsplit; sep == nullptr splits on whitespace runs.
std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right);
// Python str.replace.
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);
// Python str.splitlines().
std::vector<std::string> py_splitlines(const std::string& s, bool keepends);
// Python str.title() and str.capitalize().
std::string py_title(const std::string& s);
std::string py_capitalize(const std::string& s);
// Python printf-style `fmt % args` for %s %r %d %i %f %x %%.
std::string py_percent_format(const std::string& fmt, const Value& args);

}  // namespace fg::jinja

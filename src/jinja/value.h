// Values of flashgen's Jinja2-subset interpreter, with Python's semantics: what the chat templates
// of Hugging Face models see when transformers renders them (str/int/float/bool/None/list/tuple/
// dict with insertion order, Jinja2's Undefined, namespace objects, callables).
//
// Strings are UTF-8; every length, index and slice counts code points, as Python does.
// Lists and dicts are shared by reference like Python objects; a Value copy is cheap.
// This file must never know about templates' syntax: it is the object model only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fg::jinja {

class Value;
class Interpreter;
using List = std::vector<Value>;

// Arguments of a call: positional, then keyword (in call order).
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

// Anything a template can call: macros, bound methods, globals such as raise_exception.
class Callable {
 public:
  virtual ~Callable() = default;
  virtual Value call(Interpreter& interp, CallArgs& args) = 0;
  virtual std::string name() const = 0;
};

class Dict;

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,  // Jinja2's Undefined: prints as "", falsy, iterates as empty
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kNamespace,  // namespace(): a dict whose entries are set with `{% set ns.x = ... %}`
    kCallable,
    kGenerator,  // a one-shot iterator (what select/map/... return): iterating consumes it
  };

  Value() = default;  // Undefined
  static Value undefined(std::string hint = {}, bool unsafe = false);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s, bool markup = false);
  static Value list(List items = {});
  static Value tuple(List items);
  static Value dict();
  static Value dict(std::shared_ptr<Dict> d);
  static Value ns(std::shared_ptr<Dict> d);
  static Value callable(std::shared_ptr<Callable> fn);
  // type: Python's type name of the iterator ("generator", "list_reverseiterator", ...).
  static Value generator(List items, std::string type = "generator");
  // JSON (ordered, as Python's json.loads keeps key order) -> Value.
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // Python's int includes bool.
  bool is_integral() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }
  bool is_number() const { return is_integral() || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  bool is_generator() const { return kind_ == Kind::kGenerator; }
  // markupsafe.Markup: `+` with a plain string HTML-escapes the plain one.
  bool is_markup() const { return kind_ == Kind::kString && markup_; }
  // An Undefined made by the sandbox for an attribute it refuses (list.append...): calling it
  // is a SecurityError rather than an UndefinedError.
  bool is_unsafe_undefined() const { return kind_ == Kind::kUndefined && markup_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_double() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return s_; }
  const std::string& undefined_hint() const { return s_; }
  List& items() const { return *list_; }
  const std::shared_ptr<List>& list_ptr() const { return list_; }
  Dict& as_dict() const { return *dict_; }
  const std::shared_ptr<Dict>& dict_ptr() const { return dict_; }
  Callable& as_callable() const { return *fn_; }

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool markup_ = false;
  int64_t i_ = 0;
  double f_ = 0.0;
  std::string s_;
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Callable> fn_;
};

// An insertion-ordered mapping with Python key equality (1 == 1.0 == True).
class Dict {
 public:
  const Value* find(const Value& key) const;
  Value* find(const Value& key);
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value v);
  void set(std::string_view key, Value v) { set(Value::string(std::string(key)), std::move(v)); }
  bool erase(const Value& key);
  size_t size() const { return entries_.size(); }
  std::vector<std::pair<Value, Value>>& entries() { return entries_; }
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<Value, Value>> entries_;
};

// ---- Python semantics -------------------------------------------------------------------------

// Python's type name, as error messages show it ("dict", "list", "str", "NoneType", ...).
std::string type_name(const Value& v);
bool truthy(const Value& v);
// str(v); Undefined prints as "".
std::string to_str(const Value& v);
// repr(v), used when a list or dict is printed.
std::string repr(const Value& v);
// Python `==`.
bool equals(const Value& a, const Value& b);
// Python `<` ordering: -1, 0, 1; throws a TypeError JinjaError when the types do not order.
int compare(const Value& a, const Value& b);
// repr() of a float: the shortest text that reads back as the same double.
std::string float_repr(double d);

// json.dumps(v, ensure_ascii=False, indent=..., separators=..., sort_keys=...) as transformers'
// tojson filter does. indent: "" for none, else the indent text per level (an int n is n spaces).
struct JsonOptions {
  bool has_indent = false;
  std::string indent;
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool has_separators = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
};
std::string to_json(const Value& v, const JsonOptions& opts);
// Value -> JSON, for callers outside the interpreter.
nlohmann::ordered_json to_json_value(const Value& v);

// ---- UTF-8 in code points ---------------------------------------------------------------------

// Decodes UTF-8; a byte that starts no valid sequence becomes one code point of its own value
// (so that nothing is ever lost or read past the end).
std::u32string utf8_decode(std::string_view s);
void utf8_append(std::string& out, char32_t cp);
std::string utf8_encode(const std::u32string& s);
size_t utf8_length(std::string_view s);
bool utf8_valid(std::string_view s);
// Python's str.isspace() for one code point.
bool py_isspace(char32_t c);
// Python str.strip()/lstrip()/rstrip(); chars == nullptr strips whitespace.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
// markupsafe.escape.
std::string html_escape(std::string_view s);

}  // namespace fg::jinja

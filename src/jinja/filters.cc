// Jinja2's builtin filters and tests as chat templates use them, with transformers' tojson
// (json.dumps with ensure_ascii=False, indent, separators, sort_keys; no HTML escaping).
// Filters that return generators in Jinja2 (map, select, reject, selectattr, rejectattr, unique,
// items, batch, reverse of a list) return one-shot generator values here too, so that
// `|length` or `|tojson` on them fails exactly where Jinja2 fails.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "jinja/builtins_util.h"
#include "jinja/interpreter.h"

namespace fg::jinja {
namespace {

int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(utf8_length(v.as_string()));
    case Value::Kind::kList:
    case Value::Kind::kTuple: return static_cast<int64_t>(v.items().size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.as_dict().size());
    default: throw_type_error("object of type '" + type_name(v) + "' has no len()");
  }
}

// Jinja2's make_attrgetter: "a.b.0" looks up each part with getitem (digits become ints).
Value get_attribute_path(Interpreter& in, const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return in.getitem(item, attribute);
  Value cur = item;
  const std::string& path = attribute.as_string();
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits ? in.getitem(cur, Value::integer(std::atoll(part.c_str()))) : in.getitem(cur, Value::string(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

Value ignore_case(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.as_string()));
  return v;
}

// select/reject/selectattr/rejectattr.
Value select_or_reject(Interpreter& in, const Value& v, CallArgs& a, bool select, bool attr) {
  if (!truthy(v)) return Value::generator({});
  size_t off = 0;
  Value attribute;
  if (attr) {
    if (a.args.empty()) throw_type_error("Missing parameter for attribute name");
    attribute = a.args[0];
    off = 1;
  }
  bool has_test = a.args.size() > off;
  std::string test_name = has_test ? to_str(a.args[off]) : "";
  CallArgs test_args;
  for (size_t i = off + 1; i < a.args.size(); ++i) test_args.args.push_back(a.args[i]);
  test_args.kwargs = a.kwargs;
  List out;
  for (const Value& item : in.iterate(v)) {
    Value x = attr ? get_attribute_path(in, item, attribute) : item;
    CallArgs ta = test_args;
    bool ok = has_test ? in.call_test(test_name, x, ta) : truthy(x);
    if (ok == select) out.push_back(item);
  }
  return Value::generator(std::move(out));
}

Value do_map(Interpreter& in, const Value& v, CallArgs& a) {
  if (!truthy(v)) return Value::generator({});
  List items = in.iterate(v);
  List out;
  if (a.args.empty()) {
    Value attribute, fallback = Value::none();
    bool have_attr = false;
    for (auto& [k, val] : a.kwargs) {
      if (k == "attribute") {
        attribute = val;
        have_attr = true;
      } else if (k == "default") {
        fallback = val;
      } else {
        throw_type_error("Unexpected keyword argument '" + k + "'");
      }
    }
    if (!have_attr) throw_type_error("map requires a filter argument");
    for (const Value& item : items) {
      Value x = get_attribute_path(in, item, attribute);
      if (x.is_undefined() && !fallback.is_none()) x = fallback;
      out.push_back(std::move(x));
    }
    return Value::generator(std::move(out));
  }
  std::string name = to_str(a.args[0]);
  for (const Value& item : items) {
    CallArgs fa;
    fa.args.assign(a.args.begin() + 1, a.args.end());
    fa.kwargs = a.kwargs;
    out.push_back(in.call_filter(name, item, fa));
  }
  return Value::generator(std::move(out));
}

std::string do_indent(const std::string& s_in, const Value& width, bool first, bool blank) {
  std::string indention;
  if (width.is_string()) {
    indention = width.as_string();
  } else {
    int64_t w = want_int(width, "indent width");
    if (w > 0) indention.assign(static_cast<size_t>(std::min<int64_t>(w, 1 << 20)), ' ');
  }
  std::string s = s_in + "\n";
  std::vector<std::string> lines = py_splitlines(s, false);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + indention;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (size_t i = 1; i < lines.size(); ++i) {
        if (i > 1) rv += "\n";
        if (!lines[i].empty()) rv += indention;
        rv += lines[i];
      }
    }
  }
  if (first) rv = indention + rv;
  return rv;
}

// Jinja2's do_title: capitalize each word, where words start after '-', whitespace or an
// opening bracket.
std::string do_title(const std::string& s) {
  std::u32string cps = utf8_decode(s);
  std::string out;
  bool at_start = true;
  for (char32_t c : cps) {
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c);
    std::string one;
    utf8_append(one, c);
    if (sep) {
      out += one;
      at_start = true;
    } else {
      out += at_start ? py_upper(one) : py_lower(one);
      at_start = false;
    }
  }
  return out;
}

bool parse_py_int(std::string s, int base, int64_t* out) {
  s = py_strip(s, nullptr, true, true);
  std::string clean;
  for (char c : s)
    if (c != '_') clean.push_back(c);
  if (clean.empty()) return false;
  size_t i = 0;
  bool neg = false;
  if (clean[0] == '+' || clean[0] == '-') {
    neg = clean[0] == '-';
    i = 1;
  }
  if (base == 16 && clean.size() > i + 1 && clean[i] == '0' && (clean[i + 1] == 'x' || clean[i + 1] == 'X')) i += 2;
  if (i >= clean.size()) return false;
  int64_t v = 0;
  for (; i < clean.size(); ++i) {
    char c = clean[i];
    int d = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'z') ? c - 'a' + 10
            : (c >= 'A' && c <= 'Z') ? c - 'A' + 10
                                     : 99;
    if (d >= base) return false;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return false;
  }
  *out = neg ? -v : v;
  return true;
}

bool parse_py_float(const std::string& s_in, double* out) {
  std::string s = py_strip(s_in, nullptr, true, true);
  if (s.empty()) return false;
  std::string low = py_lower(s);
  const char* p = low.c_str();
  if (*p == '+' || *p == '-') ++p;
  if (!std::strcmp(p, "inf") || !std::strcmp(p, "infinity") || !std::strcmp(p, "nan")) {
    *out = std::strtod(low.c_str(), nullptr);
    return true;
  }
  for (char c : low)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' || c == '-' || c == '_'))
      return false;
  std::string clean;
  for (char c : low)
    if (c != '_') clean.push_back(c);
  char* end = nullptr;
  *out = std::strtod(clean.c_str(), &end);
  return end && *end == '\0';
}

double py_round(double x, int64_t ndigits) {
  if (!std::isfinite(x)) return x;
  if (ndigits > 300) return x;
  if (ndigits < -300) return 0.0 * x;
  char buf[512];
  if (ndigits >= 0) {
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(ndigits), x);
    return std::strtod(buf, nullptr);
  }
  double p = std::pow(10.0, static_cast<double>(-ndigits));
  double y = x / p;
  std::snprintf(buf, sizeof buf, "%.0f", y);
  return std::strtod(buf, nullptr) * p;
}

std::vector<Value> sorted_values(Interpreter& in, List items, bool reverse, bool case_sensitive,
                                 const Value& attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  keyed.reserve(items.size());
  for (Value& it : items) {
    Value key = attribute.is_none() ? it : get_attribute_path(in, it, attribute);
    keyed.emplace_back(ignore_case(key, case_sensitive), std::move(it));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
  });
  std::vector<Value> out;
  out.reserve(keyed.size());
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return out;
}

Value do_tojson(Interpreter& in, const Value& v, CallArgs& a) {
  BoundArgs b(a, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson");
  JsonOptions o;
  o.ensure_ascii = truthy(b.get(0, Value::boolean(false)));
  o.sort_keys = truthy(b.get(3, Value::boolean(false)));
  Value indent = b.get(1);
  if (!indent.is_none()) {
    o.has_indent = true;
    if (indent.is_string()) {
      o.indent = indent.as_string();
    } else {
      int64_t n = want_int(indent, "indent");
      if (n > 0) o.indent.assign(static_cast<size_t>(std::min<int64_t>(n, 1024)), ' ');
    }
    o.item_separator = ",";
  }
  Value seps = b.get(2);
  if (!seps.is_none()) {
    List s = in.iterate(seps);
    if (s.size() != 2) throw_type_error("tojson separators must be a pair of strings");
    o.item_separator = want_str(s[0], "separator");
    o.key_separator = want_str(s[1], "separator");
  }
  std::string out = to_json(v, o);
  in.check_string(out.size());
  return Value::string(std::move(out));
}

}  // namespace

Value apply_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& a) {
  const std::string& n = name;
  if (n == "tojson") return do_tojson(in, v, a);
  if (n == "length" || n == "count") {
    BoundArgs b(a, {}, n);
    return Value::integer(py_len(v));
  }
  if (n == "trim") {
    BoundArgs b(a, {"chars"}, n);
    Value chars = b.get(0);
    std::string cs = chars.is_none() ? "" : to_str(chars);
    return Value::string(py_strip(to_str(v), chars.is_none() ? nullptr : &cs, true, true), v.is_markup());
  }
  if (n == "string") {
    BoundArgs b(a, {}, n);
    if (v.is_string()) return v;
    return Value::string(to_str(v));
  }
  if (n == "default" || n == "d") {
    BoundArgs b(a, {"default_value", "boolean"}, n);
    bool boolean = truthy(b.get(1, Value::boolean(false)));
    if (v.is_undefined() || (boolean && !truthy(v))) return b.get(0, Value::string(""));
    return v;
  }
  if (n == "join") {
    BoundArgs b(a, {"d", "attribute"}, n);
    Value sep = b.get(0, Value::string(""));
    List items = in.iterate(v);
    if (b.given(1))
      for (Value& it : items) it = get_attribute_path(in, it, b.get(1));
    bool any_markup = std::any_of(items.begin(), items.end(), [](const Value& x) { return x.is_markup(); });
    std::string s = to_str(sep);
    if (any_markup && !sep.is_markup()) s = html_escape(s);
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += s;
      std::string part = to_str(items[i]);
      out += (any_markup && !items[i].is_markup()) ? html_escape(part) : part;
      in.check_string(out.size());
    }
    return Value::string(std::move(out), any_markup);
  }
  if (n == "items") {
    BoundArgs b(a, {}, n);
    if (v.is_undefined()) return Value::generator({});
    if (!v.is_dict()) throw_type_error("Can only get item pairs from a mapping.");
    List out;
    for (const auto& [k, val] : v.as_dict().entries()) out.push_back(Value::tuple({k, val}));
    in.step(out.size());
    return Value::generator(std::move(out));
  }
  if (n == "upper" || n == "lower" || n == "capitalize" || n == "title") {
    BoundArgs b(a, {}, n);
    std::string s = to_str(v);
    std::string r = n == "upper"        ? py_upper(s)
                    : n == "lower"      ? py_lower(s)
                    : n == "capitalize" ? py_capitalize(s)
                                        : do_title(s);
    return Value::string(std::move(r), v.is_markup());
  }
  if (n == "safe") {
    BoundArgs b(a, {}, n);
    return Value::string(to_str(v), true);
  }
  if (n == "e" || n == "escape" || n == "forceescape") {
    BoundArgs b(a, {}, n);
    if (v.is_markup() && n != "forceescape") return v;
    return Value::string(html_escape(to_str(v)), true);
  }
  if (n == "dictsort") {
    BoundArgs b(a, {"case_sensitive", "by", "reverse"}, n);
    if (!v.is_dict()) throw_type_error("dictsort filter needs a mapping, got " + type_name(v));
    bool cs = truthy(b.get(0, Value::boolean(false)));
    std::string by = to_str(b.get(1, Value::string("key")));
    if (by != "key" && by != "value") throw_type_error("You can only sort by either \"key\" or \"value\"");
    bool rev = truthy(b.get(2, Value::boolean(false)));
    std::vector<std::pair<Value, Value>> entries = v.as_dict().entries();
    in.step(entries.size());
    std::stable_sort(entries.begin(), entries.end(), [&](const auto& x, const auto& y) {
      const Value& kx = by == "key" ? x.first : x.second;
      const Value& ky = by == "key" ? y.first : y.second;
      int c = compare(ignore_case(kx, cs), ignore_case(ky, cs));
      return rev ? c > 0 : c < 0;
    });
    List out;
    for (auto& [k, val] : entries) out.push_back(Value::tuple({k, val}));
    return Value::list(std::move(out));
  }
  if (n == "list") {
    BoundArgs b(a, {}, n);
    return Value::list(in.iterate(v));
  }
  if (n == "first") {
    BoundArgs b(a, {}, n);
    if (v.is_generator()) {
      List& items = v.items();
      if (items.empty()) return Value::undefined("No first item, sequence was empty.");
      Value f = items.front();
      items.erase(items.begin());
      return f;
    }
    if (v.is_sequence()) {
      if (v.items().empty()) return Value::undefined("No first item, sequence was empty.");
      return v.items().front();
    }
    List items = in.iterate(v);
    if (items.empty()) return Value::undefined("No first item, sequence was empty.");
    return items.front();
  }
  if (n == "last") {
    BoundArgs b(a, {}, n);
    if (v.is_generator()) throw_type_error("'generator' object is not reversible");
    List items = in.iterate(v);
    if (items.empty()) return Value::undefined("No last item, sequence was empty.");
    return items.back();
  }
  if (n == "selectattr" || n == "rejectattr" || n == "select" || n == "reject")
    return select_or_reject(in, v, a, n == "selectattr" || n == "select", n == "selectattr" || n == "rejectattr");
  if (n == "map") return do_map(in, v, a);
  if (n == "replace") {
    BoundArgs b(a, {"old", "new", "count"}, n);
    int64_t count = b.given(2) ? want_int(b.get(2), "count") : -1;
    std::string r = py_replace(to_str(v), to_str(b.get(0)), to_str(b.get(1)), count);
    in.check_string(r.size());
    return Value::string(std::move(r));
  }
  if (n == "indent") {
    BoundArgs b(a, {"width", "first", "blank"}, n);
    std::string r = do_indent(to_str(v), b.get(0, Value::integer(4)), truthy(b.get(1, Value::boolean(false))),
                              truthy(b.get(2, Value::boolean(false))));
    in.check_string(r.size());
    return Value::string(std::move(r), v.is_markup());
  }
  if (n == "int") {
    BoundArgs b(a, {"default", "base"}, n);
    Value def = b.get(0, Value::integer(0));
    int base = static_cast<int>(want_int(b.get(1, Value::integer(10)), "base"));
    if (v.is_integral()) return Value::integer(v.as_int());
    if (v.is_float()) {
      double d = v.as_double();
      if (std::isnan(d)) return def;
      if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) throw_type_error("cannot convert float to integer");
      return Value::integer(static_cast<int64_t>(d));
    }
    if (v.is_string()) {
      int64_t r;
      if (base >= 2 && base <= 36 && parse_py_int(v.as_string(), base, &r)) return Value::integer(r);
      double d;
      if (parse_py_float(v.as_string(), &d)) {
        if (std::isnan(d)) return def;
        if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) throw_type_error("cannot convert float infinity to integer");
        return Value::integer(static_cast<int64_t>(d));
      }
    }
    return def;
  }
  if (n == "float") {
    BoundArgs b(a, {"default"}, n);
    Value def = b.get(0, Value::floating(0.0));
    if (v.is_number()) return Value::floating(v.as_double());
    double d;
    if (v.is_string() && parse_py_float(v.as_string(), &d)) return Value::floating(d);
    return def;
  }
  if (n == "abs") {
    BoundArgs b(a, {}, n);
    if (v.is_float()) return Value::floating(std::fabs(v.as_double()));
    if (v.is_integral()) {
      if (v.as_int() == INT64_MIN) throw JinjaError(ErrorKind::kLimit, "integer overflow");
      return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
    }
    throw_type_error("bad operand type for abs(): '" + type_name(v) + "'");
  }
  if (n == "round") {
    BoundArgs b(a, {"precision", "method"}, n);
    int64_t prec = want_int(b.get(0, Value::integer(0)), "precision");
    std::string method = to_str(b.get(1, Value::string("common")));
    if (!v.is_number()) throw_type_error("type " + type_name(v) + " doesn't define __round__ method");
    if (method == "common") {
      if (v.is_integral()) return Value::integer(v.as_int());
      return Value::floating(py_round(v.as_double(), prec));
    }
    if (method != "floor" && method != "ceil") throw_type_error("method must be common, ceil or floor");
    double p = std::pow(10.0, static_cast<double>(prec));
    double x = v.as_double() * p;
    return Value::floating((method == "floor" ? std::floor(x) : std::ceil(x)) / p);
  }
  if (n == "unique") {
    BoundArgs b(a, {"case_sensitive", "attribute"}, n);
    bool cs = truthy(b.get(0, Value::boolean(false)));
    List seen, out;
    for (const Value& it : in.iterate(v)) {
      Value key = ignore_case(b.given(1) ? get_attribute_path(in, it, b.get(1)) : it, cs);
      bool dup = false;
      for (const Value& s : seen)
        if (equals(s, key)) {
          dup = true;
          break;
        }
      in.step(seen.size() / 64 + 1);
      if (dup) continue;
      seen.push_back(key);
      out.push_back(it);
    }
    return Value::generator(std::move(out));
  }
  if (n == "sort") {
    BoundArgs b(a, {"reverse", "case_sensitive", "attribute"}, n);
    return Value::list(sorted_values(in, in.iterate(v), truthy(b.get(0, Value::boolean(false))),
                                     truthy(b.get(1, Value::boolean(false))), b.get(2)));
  }
  if (n == "reverse") {
    BoundArgs b(a, {}, n);
    if (v.is_string()) {
      std::u32string cps = utf8_decode(v.as_string());
      std::reverse(cps.begin(), cps.end());
      return Value::string(utf8_encode(cps), v.is_markup());
    }
    List items = in.iterate(v);
    std::reverse(items.begin(), items.end());
    if (v.is_generator()) return Value::list(std::move(items));
    return Value::generator(std::move(items), v.is_dict() ? "dict_reversekeyiterator" : "list_reverseiterator");
  }
  if (n == "wordcount") {
    BoundArgs b(a, {}, n);
    int64_t count = 0;
    bool in_word = false;
    for (char32_t c : utf8_decode(to_str(v))) {
      bool w = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
               (c >= 0x80 && !py_isspace(c));
      if (w && !in_word) ++count;
      in_word = w;
    }
    return Value::integer(count);
  }
  if (n == "center") {
    BoundArgs b(a, {"width"}, n);
    CallArgs ca;
    ca.args.push_back(b.get(0, Value::integer(80)));
    return in.call(*get_method(Value::string(to_str(v)), "center"), ca);
  }
  if (n == "attr") {
    BoundArgs b(a, {"name"}, n);
    return in.getattr(v, to_str(b.get(0)));
  }
  if (n == "batch") {
    BoundArgs b(a, {"linecount", "fill_with"}, n);
    int64_t size = want_int(b.get(0), "linecount");
    if (size <= 0) throw_type_error("batch size must be positive");
    List out, cur;
    for (const Value& it : in.iterate(v)) {
      cur.push_back(it);
      if (static_cast<int64_t>(cur.size()) == size) {
        out.push_back(Value::list(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) {
      if (b.given(1))
        while (static_cast<int64_t>(cur.size()) < size) cur.push_back(b.get(1));
      out.push_back(Value::list(std::move(cur)));
    }
    return Value::generator(std::move(out));
  }
  if (n == "sum") {
    BoundArgs b(a, {"attribute", "start"}, n);
    Value acc = b.get(1, Value::integer(0));
    for (const Value& it : in.iterate(v)) {
      Value x = b.given(0) ? get_attribute_path(in, it, b.get(0)) : it;
      if (!acc.is_number() || !x.is_number())
        throw_type_error("unsupported operand type(s) for +: '" + type_name(acc) + "' and '" + type_name(x) + "'");
      if (acc.is_float() || x.is_float()) {
        acc = Value::floating(acc.as_double() + x.as_double());
      } else {
        int64_t r;
        if (__builtin_add_overflow(acc.as_int(), x.as_int(), &r))
          throw JinjaError(ErrorKind::kLimit, "integer overflow");
        acc = Value::integer(r);
      }
    }
    return acc;
  }
  if (n == "min" || n == "max") {
    BoundArgs b(a, {"case_sensitive", "attribute"}, n);
    List items = in.iterate(v);
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    bool cs = truthy(b.get(0, Value::boolean(false)));
    auto key = [&](const Value& x) { return ignore_case(b.given(1) ? get_attribute_path(in, x, b.get(1)) : x, cs); };
    size_t best = 0;
    for (size_t i = 1; i < items.size(); ++i) {
      int c = compare(key(items[i]), key(items[best]));
      if (n == "min" ? c < 0 : c > 0) best = i;
    }
    return items[best];
  }
  if (n == "format") {
    if (!a.kwargs.empty() && !a.args.empty())
      throw_type_error("can't handle positional and keyword arguments at the same time");
    if (!a.kwargs.empty()) throw_type_error("format filter with keyword arguments is not supported");
    std::string r = py_percent_format(to_str(v), Value::tuple(a.args));
    in.check_string(r.size());
    return Value::string(std::move(r));
  }
  if (n == "pprint") {
    BoundArgs b(a, {}, n);
    return Value::string(repr(v));
  }
  throw_type_error("No filter named '" + n + "'.");
}

bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& a) {
  const std::string& n = name;
  auto arg = [&](size_t i) -> Value {
    if (i < a.args.size()) return a.args[i];
    throw_type_error("test '" + n + "' is missing an argument");
  };
  if (n == "defined") return !v.is_undefined();
  if (n == "undefined") return v.is_undefined();
  if (n == "none") return v.is_none();
  if (n == "boolean") return v.is_bool();
  if (n == "true") return v.is_bool() && v.as_bool();
  if (n == "false") return v.is_bool() && !v.as_bool();
  if (n == "string") return v.is_string();
  if (n == "mapping") return v.is_dict();
  if (n == "number") return v.is_number();
  if (n == "integer") return v.is_int();
  if (n == "float") return v.is_float();
  if (n == "iterable") return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict() || v.is_generator();
  if (n == "sequence") return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict();
  if (n == "callable") return v.is_callable() || v.is_undefined();
  if (n == "escaped") return v.is_markup();
  if (n == "odd" || n == "even") {
    if (v.is_undefined()) throw_undefined_error(v.undefined_hint());
    if (!v.is_integral()) throw_type_error("odd/even tests need an integer, got " + type_name(v));
    bool odd = (v.as_int() % 2) != 0;
    return n == "odd" ? odd : !odd;
  }
  if (n == "divisibleby") {
    Value d = arg(0);
    if (!v.is_integral() || !d.is_integral()) throw_type_error("divisibleby needs integers");
    if (d.as_int() == 0) throw_type_error("integer division or modulo by zero");
    return d.as_int() == -1 || v.as_int() % d.as_int() == 0;
  }
  if (n == "eq" || n == "equalto" || n == "==") return equals(v, arg(0));
  if (n == "ne" || n == "!=") return !equals(v, arg(0));
  if (n == "lt" || n == "lessthan" || n == "<" || n == "le" || n == "<=" || n == "gt" || n == "greaterthan" ||
      n == ">" || n == "ge" || n == ">=") {
    Value o = arg(0);
    if (v.is_undefined()) throw_undefined_error(v.undefined_hint());
    if (o.is_undefined()) throw_undefined_error(o.undefined_hint());
    int c = compare(v, o);
    if (n == "lt" || n == "lessthan" || n == "<") return c < 0;
    if (n == "le" || n == "<=") return c <= 0;
    if (n == "gt" || n == "greaterthan" || n == ">") return c > 0;
    return c >= 0;
  }
  if (n == "in") {
    Value seq = arg(0);
    if (seq.is_string()) {
      if (!v.is_string()) throw_type_error("'in <string>' requires string as left operand");
      return seq.as_string().find(v.as_string()) != std::string::npos;
    }
    if (seq.is_dict()) return seq.as_dict().find(v) != nullptr;
    for (const Value& x : in.iterate(seq))
      if (equals(x, v)) return true;
    return false;
  }
  if (n == "sameas") {
    Value o = arg(0);
    if (v.kind() != o.kind()) return false;
    if (v.is_sequence() || v.is_generator()) return v.list_ptr() == o.list_ptr();
    if (v.is_dict() || v.is_namespace()) return v.dict_ptr() == o.dict_ptr();
    if (v.is_callable()) return &v.as_callable() == &o.as_callable();
    return equals(v, o);
  }
  if (n == "lower" || n == "upper") {
    std::string s = to_str(v);
    bool cased = py_lower(s) != py_upper(s);
    return cased && (n == "lower" ? py_lower(s) == s : py_upper(s) == s);
  }
  if (n == "filter" || n == "test") {
    static const char* const kFilters[] = {
        "tojson", "length", "count",      "trim",       "string",     "default", "d",      "join",        "items",
        "upper",  "lower",  "capitalize", "title",      "safe",       "e",       "escape", "forceescape", "dictsort",
        "list",   "first",  "last",       "selectattr", "rejectattr", "select",  "reject", "map",         "replace",
        "indent", "int",    "float",      "abs",        "round",      "unique",  "sort",   "reverse",     "wordcount",
        "center", "attr",   "batch",      "sum",        "min",        "max",     "format", "pprint"};
    static const char* const kTests[] = {
        "defined", "undefined",   "none",  "boolean",  "true",     "false",    "string",   "mapping",
        "number",  "integer",     "float", "iterable", "sequence", "callable", "escaped",  "odd",
        "even",    "divisibleby", "eq",    "equalto",  "ne",       "lt",       "lessthan", "le",
        "gt",      "greaterthan", "ge",    "in",       "sameas",   "lower",    "upper",    "filter",
        "test",    "==",          "!=",    "<",        "<=",       ">",        ">="};
    if (!v.is_string()) return false;
    if (n == "filter") {
      for (const char* f : kFilters)
        if (v.as_string() == f) return true;
    } else {
      for (const char* t : kTests)
        if (v.as_string() == t) return true;
    }
    return false;
  }
  throw_type_error("No test named '" + n + "'.");
}

}  // namespace fg::jinja

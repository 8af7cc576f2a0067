// Methods templates call on values (str.strip, dict.get, ...) and the global functions
// (range, namespace, dict, raise_exception, strftime_now, joiner). Mutating methods of lists
// and dicts are refused the way Jinja2's ImmutableSandboxedEnvironment refuses them: the
// attribute is an Undefined whose call is a SecurityError.
#include <algorithm>
#include <cstdio>
#include <ctime>

#include "jinja/builtins_util.h"
#include "jinja/interpreter.h"

namespace fg::jinja {

// ---- string helpers ---------------------------------------------------------------------------

std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw_type_error("empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        size_t f = s.find(*sep, pos);
        if (f == std::string::npos) break;
        out.push_back(s.substr(pos, f - pos));
        pos = f + sep->size();
      }
      out.push_back(s.substr(pos));
    } else {
      size_t end = s.size();
      std::vector<std::string> rev;
      while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
        if (end < sep->size()) break;
        size_t f = s.rfind(*sep, end - sep->size());
        if (f == std::string::npos) break;
        rev.push_back(s.substr(f + sep->size(), end - f - sep->size()));
        end = f;
      }
      rev.push_back(s.substr(0, end));
      out.assign(rev.rbegin(), rev.rend());
    }
    return out;
  }
  // Whitespace split on code points.
  std::u32string cps = utf8_decode(s);
  const int64_t n = static_cast<int64_t>(cps.size());
  if (!from_right) {
    int64_t i = 0;
    while (true) {
      while (i < n && py_isspace(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        int64_t e = n;
        while (e > i && py_isspace(cps[e - 1])) --e;
        out.push_back(utf8_encode(cps.substr(i, e - i)));
        break;
      }
      int64_t j = i;
      while (j < n && !py_isspace(cps[j])) ++j;
      out.push_back(utf8_encode(cps.substr(i, j - i)));
      i = j;
    }
  } else {
    int64_t i = n;
    std::vector<std::string> rev;
    while (true) {
      while (i > 0 && py_isspace(cps[i - 1])) --i;
      if (i <= 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(rev.size()) == maxsplit) {
        int64_t b = 0;
        while (b < i && py_isspace(cps[b])) ++b;
        rev.push_back(utf8_encode(cps.substr(b, i - b)));
        break;
      }
      int64_t j = i;
      while (j > 0 && !py_isspace(cps[j - 1])) --j;
      rev.push_back(utf8_encode(cps.substr(j, i - j)));
      i = j;
    }
    out.assign(rev.rbegin(), rev.rend());
  }
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts `repl` before every character and at the end.
    std::u32string cps = utf8_decode(s);
    int64_t done = 0;
    for (char32_t c : cps) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      utf8_append(out, c);
    }
    if (count < 0 || done < count) out += repl;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += repl;
    pos = f + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  std::u32string cps = utf8_decode(s);
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  while (i < cps.size()) {
    char32_t c = cps[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
               c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    size_t eol = i + 1;
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') eol = i + 2;
    out.push_back(utf8_encode(cps.substr(start, (keepends ? eol : i) - start)));
    start = i = eol;
  }
  if (start < cps.size()) out.push_back(utf8_encode(cps.substr(start)));
  return out;
}

namespace {

bool is_cased(char32_t c) {
  std::string one;
  utf8_append(one, c);
  return py_upper(one) != one || py_lower(one) != one;
}

}  // namespace

std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : utf8_decode(s)) {
    std::string one;
    utf8_append(one, c);
    bool cased = is_cased(c);
    out += cased ? (prev_cased ? py_lower(one) : py_upper(one)) : one;
    prev_cased = cased;
  }
  return out;
}

std::string py_capitalize(const std::string& s) {
  std::u32string cps = utf8_decode(s);
  if (cps.empty()) return "";
  std::string first;
  utf8_append(first, cps[0]);
  return py_upper(first) + py_lower(utf8_encode(cps.substr(1)));
}

std::string py_percent_format(const std::string& fmt, const Value& args) {
  List items;
  if (args.is_tuple()) {
    items = args.items();
  } else {
    items.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) throw_type_error("incomplete format");
    char c = fmt[i];
    if (c == '%') {
      out.push_back('%');
      continue;
    }
    if (next >= items.size()) throw_type_error("not enough arguments for format string");
    const Value& v = items[next++];
    char buf[64];
    switch (c) {
      case 's': out += to_str(v); break;
      case 'r': out += repr(v); break;
      case 'd':
      case 'i':
        if (!v.is_number()) throw_type_error("%d format: a real number is required, not " + type_name(v));
        out += std::to_string(v.is_float() ? static_cast<int64_t>(v.as_double()) : v.as_int());
        break;
      case 'f':
        if (!v.is_number()) throw_type_error("must be real number, not " + type_name(v));
        std::snprintf(buf, sizeof buf, "%f", v.as_double());
        out += buf;
        break;
      case 'x':
        if (!v.is_integral()) throw_type_error("%x format: an integer is required, not " + type_name(v));
        std::snprintf(buf, sizeof buf, "%llx", static_cast<long long>(v.as_int()));
        out += buf;
        break;
      default: throw_type_error(std::string("unsupported format character '") + c + "'");
    }
  }
  if (next < items.size()) throw_type_error("not all arguments converted during string formatting");
  return out;
}

namespace {

// ---- bound methods ----------------------------------------------------------------------------

size_t cp_index(const std::string& s, size_t byte_pos) {
  return utf8_length(std::string_view(s).substr(0, byte_pos));
}

bool matches_affix(const std::string& s, const Value& affix, bool prefix, const std::string& fn) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) throw_type_error(fn + " first arg must be str or a tuple of str, not " + type_name(a));
    const std::string& x = a.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_tuple()) {
    for (const Value& a : affix.items())
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

Value string_list(const std::vector<std::string>& parts) {
  List l;
  l.reserve(parts.size());
  for (const auto& p : parts) l.push_back(Value::string(p));
  return Value::list(std::move(l));
}

Value str_format(Interpreter& in, const std::string& fmt, CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw_type_error("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    bool as_repr = false;
    size_t colon = field.find(':');
    if (colon != std::string::npos) {
      if (colon + 1 != field.size()) throw_type_error("format specs in str.format are not supported");
      field.resize(colon);
    }
    if (field.size() >= 2 && field[field.size() - 2] == '!') {
      as_repr = field.back() == 'r';
      field.resize(field.size() - 2);
    }
    Value v;
    if (field.empty()) {
      if (auto_idx >= a.args.size()) throw_type_error("Replacement index out of range for positional args tuple");
      v = a.args[auto_idx++];
    } else if (std::all_of(field.begin(), field.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      size_t k = std::stoul(field);
      if (k >= a.args.size()) throw_type_error("Replacement index out of range for positional args tuple");
      v = a.args[k];
    } else {
      bool found = false;
      for (auto& [k, val] : a.kwargs)
        if (k == field) {
          v = val;
          found = true;
        }
      if (!found) throw_type_error("KeyError: '" + field + "'");
    }
    out += as_repr ? repr(v) : to_str(v);
    in.check_string(out.size());
  }
  return Value::string(std::move(out));
}

class BoundMethod : public Callable {
 public:
  BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  std::string name() const override { return name_; }

  Value call(Interpreter& in, CallArgs& a) override {
    if (self_.is_string()) return call_str(in, a);
    if (self_.is_dict()) return call_dict(in, a);
    return call_seq(in, a);
  }

 private:
  Value call_str(Interpreter& in, CallArgs& a) {
    const std::string& s = self_.as_string();
    const bool mk = self_.is_markup();
    const std::string& n = name_;
    if (n == "strip" || n == "lstrip" || n == "rstrip") {
      BoundArgs b(a, {"chars"}, n);
      Value chars = b.get(0);
      std::string cs;
      if (!chars.is_none()) cs = want_str(chars, n + " arg");
      return Value::string(py_strip(s, chars.is_none() ? nullptr : &cs, n != "rstrip", n != "lstrip"), mk);
    }
    if (n == "split" || n == "rsplit") {
      BoundArgs b(a, {"sep", "maxsplit"}, n);
      Value sep = b.get(0);
      std::string sp;
      if (!sep.is_none()) sp = want_str(sep, "sep");
      int64_t maxsplit = b.has(1) ? want_int(b.get(1), "maxsplit") : -1;
      auto parts = py_split(s, sep.is_none() ? nullptr : &sp, maxsplit, n == "rsplit");
      in.step(parts.size());
      return string_list(parts);
    }
    if (n == "startswith" || n == "endswith") {
      BoundArgs b(a, {"affix"}, n);
      if (!b.has(0)) throw_type_error(n + "() takes at least 1 argument (0 given)");
      return Value::boolean(matches_affix(s, b.get(0), n == "startswith", n));
    }
    if (n == "upper") return Value::string(py_upper(s), mk);
    if (n == "lower" || n == "casefold") return Value::string(py_lower(s), mk);
    if (n == "title") return Value::string(py_title(s), mk);
    if (n == "capitalize") return Value::string(py_capitalize(s), mk);
    if (n == "replace") {
      BoundArgs b(a, {"old", "new", "count"}, n);
      const std::string& o = want_str(b.get(0), "replace() argument 1");
      const std::string& r = want_str(b.get(1), "replace() argument 2");
      int64_t count = b.has(2) ? want_int(b.get(2), "count") : -1;
      std::string res = py_replace(s, o, r, count);
      in.check_string(res.size());
      return Value::string(std::move(res), mk);
    }
    if (n == "find" || n == "rfind" || n == "index" || n == "rindex" || n == "count") {
      BoundArgs b(a, {"sub"}, n);
      const std::string& sub = want_str(b.get(0), n + "() argument");
      if (n == "count") {
        if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
        int64_t c = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++c;
        return Value::integer(c);
      }
      size_t p = (n == "find" || n == "index") ? s.find(sub) : s.rfind(sub);
      if (p == std::string::npos) {
        if (n == "index" || n == "rindex") throw_type_error("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<int64_t>(cp_index(s, p)));
    }
    if (n == "join") {
      BoundArgs b(a, {"iterable"}, n);
      List items = in.iterate(b.get(0));
      std::string out;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].is_string())
          throw_type_error("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(items[i]) +
                           " found");
        if (i) out += s;
        out += items[i].as_string();
        in.check_string(out.size());
      }
      return Value::string(std::move(out));
    }
    if (n == "format") return str_format(in, s, a);
    if (n == "splitlines") {
      BoundArgs b(a, {"keepends"}, n);
      return string_list(py_splitlines(s, truthy(b.get(0, Value::boolean(false)))));
    }
    if (n == "removeprefix" || n == "removesuffix") {
      BoundArgs b(a, {"affix"}, n);
      const std::string& x = want_str(b.get(0), n + "() argument");
      if (n == "removeprefix" && s.compare(0, x.size(), x) == 0 && x.size() <= s.size())
        return Value::string(s.substr(x.size()), mk);
      if (n == "removesuffix" && x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
        return Value::string(s.substr(0, s.size() - x.size()), mk);
      return self_;
    }
    if (n == "isdigit" || n == "isalpha" || n == "isalnum" || n == "isspace" || n == "islower" || n == "isupper") {
      BoundArgs b(a, {}, n);
      std::u32string cps = utf8_decode(s);
      if (cps.empty()) return Value::boolean(false);
      if (n == "islower" || n == "isupper") {
        bool any_cased = std::any_of(cps.begin(), cps.end(), is_cased);
        return Value::boolean(any_cased && (n == "islower" ? py_lower(s) == s : py_upper(s) == s));
      }
      for (char32_t c : cps) {
        bool digit = c >= '0' && c <= '9';
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= 0x80 && is_cased(c));
        bool ok = n == "isdigit" ? digit : n == "isalpha" ? alpha : n == "isalnum" ? (digit || alpha) : py_isspace(c);
        if (!ok) return Value::boolean(false);
      }
      return Value::boolean(true);
    }
    if (n == "zfill" || n == "center" || n == "ljust" || n == "rjust") {
      BoundArgs b(a, {"width", "fillchar"}, n);
      int64_t width = want_int(b.get(0), "width");
      std::string fill = b.has(1) ? want_str(b.get(1), "fillchar") : (n == "zfill" ? "0" : " ");
      int64_t len = static_cast<int64_t>(utf8_length(s));
      if (width <= len) return self_;
      in.check_string(static_cast<size_t>(width) * fill.size());
      int64_t pad = width - len;
      auto rep = [&](int64_t k) {
        std::string r;
        for (int64_t i = 0; i < k; ++i) r += fill;
        return r;
      };
      if (n == "ljust") return Value::string(s + rep(pad), mk);
      if (n == "rjust") return Value::string(rep(pad) + s, mk);
      if (n == "zfill") {
        if (!s.empty() && (s[0] == '-' || s[0] == '+')) return Value::string(s.substr(0, 1) + rep(pad) + s.substr(1));
        return Value::string(rep(pad) + s);
      }
      int64_t left = pad / 2 + (pad & width & 1);
      return Value::string(rep(left) + s + rep(pad - left), mk);
    }
    if (n == "partition" || n == "rpartition") {
      BoundArgs b(a, {"sep"}, n);
      const std::string& sep = want_str(b.get(0), "sep");
      if (sep.empty()) throw_type_error("empty separator");
      size_t p = n == "partition" ? s.find(sep) : s.rfind(sep);
      if (p == std::string::npos) {
        if (n == "partition") return Value::tuple({self_, Value::string(""), Value::string("")});
        return Value::tuple({Value::string(""), Value::string(""), self_});
      }
      return Value::tuple({Value::string(s.substr(0, p)), Value::string(sep), Value::string(s.substr(p + sep.size()))});
    }
    throw_type_error("str." + n + " is not supported");
  }

  Value call_dict(Interpreter& in, CallArgs& a) {
    Dict& d = self_.as_dict();
    const std::string& n = name_;
    if (n == "get") {
      BoundArgs b(a, {"key", "default"}, n);
      if (!b.has(0)) throw_type_error("get expected at least 1 argument, got 0");
      Value key = b.get(0);
      if (key.is_list() || key.is_dict()) throw_type_error("unhashable type: '" + type_name(key) + "'");
      if (const Value* v = d.find(key)) return *v;
      return b.get(1);
    }
    BoundArgs b(a, {}, n);
    in.step(d.size());
    List out;
    for (const auto& [k, v] : d.entries()) {
      if (n == "items")
        out.push_back(Value::tuple({k, v}));
      else if (n == "keys")
        out.push_back(k);
      else
        out.push_back(v);
    }
    if (n == "copy") {
      auto c = std::make_shared<Dict>(d);
      return Value::dict(std::move(c));
    }
    return Value::list(std::move(out));
  }

  Value call_seq(Interpreter& in, CallArgs& a) {
    const List& items = self_.items();
    const std::string& n = name_;
    if (n == "count" || n == "index") {
      BoundArgs b(a, {"value"}, n);
      Value x = b.get(0);
      in.step(items.size());
      int64_t c = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!equals(items[i], x)) continue;
        if (n == "index") return Value::integer(static_cast<int64_t>(i));
        ++c;
      }
      if (n == "index") throw_type_error(repr(x) + " is not in list");
      return Value::integer(c);
    }
    BoundArgs b(a, {}, n);
    in.step(items.size());
    return Value::list(items);  // copy
  }

  Value self_;
  std::string name_;
};

bool one_of(const std::string& n, std::initializer_list<const char*> names) {
  for (const char* x : names)
    if (n == x) return true;
  return false;
}

}  // namespace

std::optional<Value> get_method(const Value& obj, const std::string& name) {
  auto bound = [&]() { return Value::callable(std::make_shared<BoundMethod>(obj, name)); };
  auto unsafe = [&]() {
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.", true);
  };
  if (obj.is_string()) {
    if (one_of(name, {"strip",        "lstrip",       "rstrip",   "split",   "rsplit",     "startswith", "endswith",
                      "upper",        "lower",        "casefold", "title",   "capitalize", "replace",    "find",
                      "rfind",        "index",        "rindex",   "count",   "join",       "format",     "splitlines",
                      "removeprefix", "removesuffix", "isdigit",  "isalpha", "isalnum",    "isspace",    "islower",
                      "isupper",      "zfill",        "center",   "ljust",   "rjust",      "partition",  "rpartition"}))
      return bound();
    return std::nullopt;
  }
  if (obj.is_dict()) {
    if (one_of(name, {"get", "items", "keys", "values", "copy"})) return bound();
    if (one_of(name, {"pop", "popitem", "setdefault", "update", "clear"})) return unsafe();
    return std::nullopt;
  }
  if (obj.is_list()) {
    if (one_of(name, {"count", "index", "copy"})) return bound();
    if (one_of(name, {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"})) return unsafe();
    return std::nullopt;
  }
  if (obj.is_tuple()) {
    if (one_of(name, {"count", "index"})) return bound();
    return std::nullopt;
  }
  return std::nullopt;
}

// ---- globals ----------------------------------------------------------------------------------

namespace {

class GlobalFn : public Callable {
 public:
  using Fn = Value (*)(Interpreter&, CallArgs&);
  GlobalFn(std::string name, Fn fn) : name_(std::move(name)), fn_(fn) {}
  Value call(Interpreter& in, CallArgs& a) override { return fn_(in, a); }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  Fn fn_;
};

class JoinerFn : public Callable {
 public:
  explicit JoinerFn(std::string sep) : sep_(std::move(sep)) {}
  Value call(Interpreter&, CallArgs&) override {
    if (!used_) {
      used_ = true;
      return Value::string("");
    }
    return Value::string(sep_);
  }
  std::string name() const override { return "joiner"; }

 private:
  std::string sep_;
  bool used_ = false;
};

constexpr int64_t kMaxRange = 100000;  // the sandbox's MAX_RANGE

Value g_range(Interpreter& in, CallArgs& a) {
  if (!a.kwargs.empty()) throw_type_error("range() takes no keyword arguments");
  if (a.args.empty() || a.args.size() > 3)
    throw_type_error("range expected at most 3 arguments, got " + std::to_string(a.args.size()));
  for (const Value& v : a.args)
    if (!v.is_integral()) throw_type_error("'" + type_name(v) + "' object cannot be interpreted as an integer");
  int64_t start = 0, stop, stepv = 1;
  if (a.args.size() == 1) {
    stop = a.args[0].as_int();
  } else {
    start = a.args[0].as_int();
    stop = a.args[1].as_int();
    if (a.args.size() == 3) stepv = a.args[2].as_int();
  }
  if (stepv == 0) throw_type_error("range() arg 3 must not be zero");
  __int128 count = 0;
  if (stepv > 0 && stop > start) count = (static_cast<__int128>(stop) - start + stepv - 1) / stepv;
  if (stepv < 0 && stop < start) count = (static_cast<__int128>(start) - stop - stepv - 1) / -stepv;
  if (count > kMaxRange)
    throw JinjaError(ErrorKind::kLimit, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  in.step(static_cast<uint64_t>(count));
  List out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) out.push_back(Value::integer(start + i * stepv));
  return Value::list(std::move(out));
}

std::shared_ptr<Dict> dict_from_args(Interpreter& in, CallArgs& a, const char* fn) {
  auto d = std::make_shared<Dict>();
  if (a.args.size() > 1)
    throw_type_error(std::string(fn) + " expected at most 1 argument, got " + std::to_string(a.args.size()));
  if (a.args.size() == 1) {
    const Value& src = a.args[0];
    if (src.is_dict() || src.is_namespace()) {
      for (const auto& [k, v] : src.as_dict().entries()) d->set(k, v);
    } else {
      for (const Value& pair : in.iterate(src)) {
        List kv = in.iterate(pair);
        if (kv.size() != 2) throw_type_error("dictionary update sequence element has wrong length");
        d->set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : a.kwargs) d->set(k, v);
  return d;
}

Value g_dict(Interpreter& in, CallArgs& a) {
  return Value::dict(dict_from_args(in, a, "dict"));
}

Value g_namespace(Interpreter& in, CallArgs& a) {
  auto d = dict_from_args(in, a, "namespace");
  for (const auto& [k, v] : d->entries())
    if (k.is_string() && !k.as_string().empty() && k.as_string()[0] == '_')
      throw JinjaError(
          ErrorKind::kSecurity,
          "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + k.as_string() + "'");
  in.keep_namespace(d);
  return Value::ns(std::move(d));
}

Value g_raise_exception(Interpreter&, CallArgs& a) {
  std::string msg = a.args.empty() ? "" : to_str(a.args[0]);
  throw JinjaError(ErrorKind::kRaised, msg);
}

Value g_strftime_now(Interpreter& in, CallArgs& a) {
  BoundArgs b(a, {"format"}, "strftime_now");
  const std::string& fmt = want_str(b.get(0), "strftime_now() format");
  std::tm tm{};
  if (in.fixed_now()) {
    tm = *in.fixed_now();
  } else {
    std::time_t t = std::time(nullptr);
    localtime_r(&t, &tm);
  }
  if (fmt.size() > 256) throw_type_error("strftime_now() format too long");
  std::string out(fmt.size() * 8 + 64, '\0');
  size_t n = std::strftime(out.data(), out.size(), fmt.c_str(), &tm);
  out.resize(n);
  return Value::string(std::move(out));
}

Value g_joiner(Interpreter&, CallArgs& a) {
  BoundArgs b(a, {"sep"}, "joiner");
  return Value::callable(std::make_shared<JoinerFn>(b.has(0) ? to_str(b.get(0)) : ", "));
}

}  // namespace

void install_globals(Dict& builtins) {
  auto add = [&](const char* name, GlobalFn::Fn fn) {
    builtins.set(name, Value::callable(std::make_shared<GlobalFn>(name, fn)));
  };
  add("range", g_range);
  add("dict", g_dict);
  add("namespace", g_namespace);
  add("raise_exception", g_raise_exception);
  add("strftime_now", g_strftime_now);
  add("joiner", g_joiner);
}

}  // namespace fg::jinja

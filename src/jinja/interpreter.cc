// Statement execution and expression evaluation (see interpreter.h). Attribute and item access
// follow the sandboxed Jinja2 environment: `x.y` tries the attribute (a method) and then the
// item, `x['y']` the item and then the attribute; a miss is an Undefined that only fails when
// it is used (called, indexed, or its attribute read).
#include "jinja/interpreter.h"

#include <cmath>
#include <limits>

#include "core/status.h"
#include "jinja/builtins_util.h"
#include "jinja/error.h"

namespace fg::jinja {
namespace {

std::string object_desc(const Value& v) {
  if (v.is_none()) return "'None'";
  return "'" + type_name(v) + " object'";
}

[[noreturn]] void fail_undefined(const Value& u) {
  if (u.is_unsafe_undefined()) throw JinjaError(ErrorKind::kSecurity, u.undefined_hint());
  throw_undefined_error(u.undefined_hint().empty() ? "value is undefined" : u.undefined_hint());
}

Value missing_attr(const Value& obj, const std::string& name) {
  return Value::undefined(object_desc(obj) + " has no attribute '" + name + "'");
}

// A macro or a call block's `caller`, bound to the frame it was defined in.
// A macro (or a call block's `caller`) and the frame it was defined in. The frame is held weakly:
// a macro is stored in the very frame it closes over, and a strong reference would make that a
// cycle that outlives the render (every render of a template with a macro would leak its frames
// and everything in them). The Interpreter keeps closure frames alive until the render ends
// (Interpreter::keep_frame), so the frame is always there when the macro runs.
class MacroFn : public Callable {
 public:
  MacroFn(const Stmt* stmt, const FramePtr& closure, std::string name)
      : stmt_(stmt), closure_(closure), name_(std::move(name)) {}
  Value call(Interpreter& in, CallArgs& args) override {
    const FramePtr closure = closure_.lock();
    FG_CHECK(closure != nullptr, "a macro outlived the render that defined it");
    return in.call_macro(*stmt_, closure, name_, args);
  }
  std::string name() const override { return name_; }

 private:
  const Stmt* stmt_;
  std::weak_ptr<Frame> closure_;
  std::string name_;
};

// loop.cycle(a, b, ...)
class CycleFn : public Callable {
 public:
  explicit CycleFn(size_t index0) : index0_(index0) {}
  Value call(Interpreter&, CallArgs& a) override {
    if (a.args.empty()) throw_type_error("no items for cycling given");
    return a.args[index0_ % a.args.size()];
  }
  std::string name() const override { return "cycle"; }

 private:
  size_t index0_;
};

bool checked_add(int64_t a, int64_t b, int64_t* r) {
  return !__builtin_add_overflow(a, b, r);
}
bool checked_sub(int64_t a, int64_t b, int64_t* r) {
  return !__builtin_sub_overflow(a, b, r);
}
bool checked_mul(int64_t a, int64_t b, int64_t* r) {
  return !__builtin_mul_overflow(a, b, r);
}

[[noreturn]] void overflow() {
  throw JinjaError(ErrorKind::kLimit, "integer overflow (flashgen's templates use 64-bit integers)");
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw_type_error("integer division or modulo by zero");
  if (a == std::numeric_limits<int64_t>::min() && b == -1) overflow();
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == 0) throw_type_error("integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Interpreter::Interpreter(const Limits& limits, const Dict& globals, std::optional<std::tm> fixed_now)
    : limits_(limits), fixed_now_(fixed_now), globals_(globals) {
  install_globals(builtins_);
}

void Interpreter::render(const Body& body, std::string& out) {
  auto root = std::make_shared<Frame>();
  exec(body, root, out);
}

void Interpreter::keep_frame(const FramePtr& frame) {
  if (closure_frames_.empty() || closure_frames_.back() != frame) closure_frames_.push_back(frame);
}

Interpreter::~Interpreter() {
  // Values in these frames may hold macros of other kept frames; clearing every frame's variables
  // first releases them all whatever their order.
  for (const FramePtr& f : closure_frames_) f->vars.clear();
  for (const std::shared_ptr<Dict>& ns : namespaces_) ns->entries().clear();
}

void Interpreter::step(uint64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps)
    throw JinjaError(ErrorKind::kLimit, "template exceeded the step limit (" + std::to_string(limits_.max_steps) +
                                            " loop iterations/calls)");
}

void Interpreter::check_string(size_t n) {
  if (n > limits_.max_output_bytes)
    throw JinjaError(ErrorKind::kLimit,
                     "template output exceeds the limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
  work_bytes_ += n;
  if (work_bytes_ > limits_.max_work_bytes)
    throw JinjaError(ErrorKind::kLimit,
                     "template produced more than " + std::to_string(limits_.max_work_bytes) + " bytes in total");
}

void Interpreter::append(std::string& out, const std::string& text) {
  check_string(out.size() + text.size());
  out += text;
}

// ---- statements -------------------------------------------------------------------------------

Interpreter::Flow Interpreter::exec(const Body& body, const FramePtr& frame, std::string& out) {
  for (const StmtPtr& s : body) {
    Flow f;
    try {
      f = exec_stmt(*s, frame, out);
    } catch (JinjaError& e) {
      e.set_line_if_unset(s->line);
      throw;
    }
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_stmt(const Stmt& s, const FramePtr& frame, std::string& out) {
  switch (s.kind) {
    case StmtKind::kData: append(out, s.text); return Flow::kNormal;
    case StmtKind::kOutput: append(out, to_str(eval(*s.expr, frame))); return Flow::kNormal;
    case StmtKind::kIf: return truthy(eval(*s.expr, frame)) ? exec(s.body, frame, out) : exec(s.else_body, frame, out);
    case StmtKind::kFor: exec_for(s, frame, out); return Flow::kNormal;
    case StmtKind::kSet: assign(*s.target, eval(*s.expr, frame), frame); return Flow::kNormal;
    case StmtKind::kSetBlock: {
      std::string buf;
      auto inner = std::make_shared<Frame>();
      inner->parent = frame;
      exec(s.body, inner, buf);
      Value v = Value::string(std::move(buf));
      if (s.filter) v = eval_filter(*s.filter, frame, &v);
      assign(*s.target, v, frame);
      return Flow::kNormal;
    }
    case StmtKind::kMacro:
      keep_frame(frame);
      frame->vars[s.name] = Value::callable(std::make_shared<MacroFn>(&s, frame, s.name));
      return Flow::kNormal;
    case StmtKind::kCallBlock: {
      const Expr& call = *s.expr;
      Value callee = eval(*call.children[0], frame);
      CallArgs args;
      eval_args(call, 1, frame, args);
      keep_frame(frame);
      args.kwargs.emplace_back("caller", Value::callable(std::make_shared<MacroFn>(&s, frame, "caller")));
      append(out, to_str(this->call(callee, args)));
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      std::string buf;
      auto inner = std::make_shared<Frame>();
      inner->parent = frame;
      exec(s.body, inner, buf);
      Value v = Value::string(std::move(buf));
      append(out, to_str(eval_filter(*s.expr, frame, &v)));
      return Flow::kNormal;
    }
    case StmtKind::kWith: {
      auto inner = std::make_shared<Frame>();
      inner->parent = frame;
      for (const Param& p : s.params) inner->vars[p.name] = eval(*p.default_value, frame);
      return exec(s.body, inner, out);
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
    case StmtKind::kScope: return exec(s.body, frame, out);
  }
  return Flow::kNormal;
}

void Interpreter::exec_for(const Stmt& s, const FramePtr& frame, std::string& out) {
  if (s.recursive) throw_type_error("recursive for-loops are not supported by flashgen");
  List items = iterate(eval(*s.expr, frame));
  if (s.filter) {
    List kept;
    for (Value& item : items) {
      step();
      auto f = std::make_shared<Frame>();
      f->parent = frame;
      assign(*s.target, item, f);
      if (truthy(eval(*s.filter, f))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto f = std::make_shared<Frame>();
    f->parent = frame;
    exec(s.else_body, f, out);
    return;
  }
  const size_t n = items.size();
  const int64_t len = static_cast<int64_t>(n);
  for (size_t i = 0; i < n; ++i) {
    step();
    auto f = std::make_shared<Frame>();
    f->parent = frame;
    assign(*s.target, items[i], f);
    auto loop = std::make_shared<Dict>();
    const int64_t idx = static_cast<int64_t>(i);
    loop->set("index0", Value::integer(idx));
    loop->set("index", Value::integer(idx + 1));
    loop->set("revindex0", Value::integer(len - idx - 1));
    loop->set("revindex", Value::integer(len - idx));
    loop->set("first", Value::boolean(i == 0));
    loop->set("last", Value::boolean(i + 1 == n));
    loop->set("length", Value::integer(len));
    loop->set("depth", Value::integer(1));
    loop->set("depth0", Value::integer(0));
    loop->set("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
    loop->set("nextitem", i + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
    loop->set("cycle", Value::callable(std::make_shared<CycleFn>(i)));
    f->vars["loop"] = Value::dict(std::move(loop));
    Flow fl = exec(s.body, f, out);
    if (fl == Flow::kBreak) break;
  }
}

void Interpreter::assign(const Expr& target, const Value& v, const FramePtr& frame) {
  if (target.kind == ExprKind::kName) {
    frame->vars[target.name] = v;
    return;
  }
  if (target.kind == ExprKind::kTuple) {
    if (!(v.is_sequence() || v.is_string() || v.is_dict() || v.is_generator() || v.is_undefined()))
      throw_type_error("cannot unpack non-iterable " + type_name(v) + " object");
    List items = iterate(v);
    const size_t want = target.children.size();
    if (items.size() > want) throw_type_error("too many values to unpack (expected " + std::to_string(want) + ")");
    if (items.size() < want)
      throw_type_error("not enough values to unpack (expected " + std::to_string(want) + ", got " +
                       std::to_string(items.size()) + ")");
    for (size_t i = 0; i < want; ++i) assign(*target.children[i], items[i], frame);
    return;
  }
  if (target.kind == ExprKind::kGetattr) {  // {% set ns.attr = value %}
    Value ns = lookup(target.children[0]->name, frame);
    if (!ns.is_namespace()) throw_type_error("cannot assign attribute on non-namespace object");
    if (!target.name.empty() && target.name[0] == '_')
      throw JinjaError(ErrorKind::kSecurity, "cannot store underscore-prefixed attributes on a namespace");
    ns.as_dict().set(target.name, v);
    return;
  }
  throw_type_error("cannot assign to this expression");
}

Value Interpreter::call_macro(const Stmt& macro, const FramePtr& closure, const std::string& name, CallArgs& args) {
  step();
  if (call_depth_ >= limits_.max_call_depth)
    throw JinjaError(ErrorKind::kLimit, "macro calls nested deeper than " + std::to_string(limits_.max_call_depth));
  struct DepthGuard {
    int& d;
    explicit DepthGuard(int& depth) : d(depth) { ++d; }
    ~DepthGuard() { --d; }
  } guard(call_depth_);

  auto f = std::make_shared<Frame>();
  f->parent = closure;
  const auto& params = macro.params;
  if (args.args.size() > params.size() && !macro.uses_varargs)
    throw_type_error("macro '" + name + "' takes not more than " + std::to_string(params.size()) + " argument(s)");
  std::vector<bool> filled(params.size(), false);
  for (size_t i = 0; i < params.size() && i < args.args.size(); ++i) {
    f->vars[params[i].name] = args.args[i];
    filled[i] = true;
  }
  auto extra_kwargs = std::make_shared<Dict>();
  Value caller;
  bool has_caller = false;
  for (auto& [k, v] : args.kwargs) {
    bool matched = false;
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i].name != k) continue;
      if (filled[i]) throw_type_error("macro '" + name + "' got multiple values for argument '" + k + "'");
      f->vars[k] = v;
      filled[i] = true;
      matched = true;
      break;
    }
    if (matched) continue;
    if (k == "caller" && macro.uses_caller) {
      caller = v;
      has_caller = true;
      continue;
    }
    if (!macro.uses_kwargs) throw_type_error("macro '" + name + "' takes no keyword argument '" + k + "'");
    extra_kwargs->set(k, v);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (filled[i]) continue;
    if (params[i].default_value) {
      f->vars[params[i].name] = eval(*params[i].default_value, f);
    } else {
      f->vars[params[i].name] = Value::undefined("parameter '" + params[i].name + "' was not provided");
    }
  }
  if (macro.uses_varargs) {
    List rest;
    for (size_t i = params.size(); i < args.args.size(); ++i) rest.push_back(args.args[i]);
    f->vars["varargs"] = Value::tuple(std::move(rest));
  }
  if (macro.uses_kwargs) f->vars["kwargs"] = Value::dict(extra_kwargs);
  if (macro.uses_caller) f->vars["caller"] = has_caller ? caller : Value::undefined("No caller defined");
  std::string buf;
  exec(macro.body, f, buf);
  return Value::string(std::move(buf));
}

// ---- expressions ------------------------------------------------------------------------------

Value Interpreter::lookup(const std::string& name, const FramePtr& frame) {
  for (Frame* f = frame.get(); f; f = f->parent.get()) {
    auto it = f->vars.find(name);
    if (it != f->vars.end()) return it->second;
  }
  if (const Value* v = globals_.find(std::string_view(name))) return *v;
  if (const Value* v = builtins_.find(std::string_view(name))) return *v;
  return Value::undefined("'" + name + "' is undefined");
}

void Interpreter::eval_args(const Expr& e, size_t first, const FramePtr& frame, CallArgs& args) {
  for (size_t i = first; i < e.children.size(); ++i) args.args.push_back(eval(*e.children[i], frame));
  for (const auto& [k, v] : e.kwargs) args.kwargs.emplace_back(k, eval(*v, frame));
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_callable()) return callee.as_callable().call(*this, args);
  if (callee.is_undefined()) fail_undefined(callee);
  throw_type_error("'" + type_name(callee) + "' object is not callable");
}

Value Interpreter::call_filter(const std::string& name, const Value& v, CallArgs& args) {
  return apply_filter(*this, name, v, args);
}

bool Interpreter::call_test(const std::string& name, const Value& v, CallArgs& args) {
  return apply_test(*this, name, v, args);
}

Value Interpreter::eval_filter(const Expr& e, const FramePtr& frame, const Value* block_input) {
  Value input = e.children[0]
                    ? (e.children[0]->kind == ExprKind::kFilter ? eval_filter(*e.children[0], frame, block_input)
                                                                : eval(*e.children[0], frame))
                    : *block_input;
  CallArgs args;
  eval_args(e, 1, frame, args);
  return apply_filter(*this, e.name, input, args);
}

Value Interpreter::getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (name.size() >= 2 && name[0] == '_' && name[1] == '_')
    return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.", true);
  if (obj.is_namespace()) {
    if (const Value* v = obj.as_dict().find(std::string_view(name))) return *v;
    return missing_attr(obj, name);
  }
  if (std::optional<Value> m = get_method(obj, name)) return *m;
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(std::string_view(name))) return *v;
  }
  return missing_attr(obj, name);
}

Value Interpreter::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    if (key.is_list() || key.is_dict()) throw_type_error("unhashable type: '" + type_name(key) + "'");
    if (const Value* v = obj.as_dict().find(key)) return *v;
  } else if ((obj.is_sequence() || obj.is_string()) && key.is_integral()) {
    int64_t i = key.as_int();
    if (obj.is_string()) {
      std::u32string cps = utf8_decode(obj.as_string());
      int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        std::string s;
        utf8_append(s, cps[static_cast<size_t>(i)]);
        return Value::string(std::move(s), obj.is_markup());
      }
    } else {
      int64_t n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
    }
    return Value::undefined(object_desc(obj) + " has no element " + std::to_string(key.as_int()));
  }
  if (key.is_string()) return getattr(obj, key.as_string());
  return Value::undefined(object_desc(obj) + " has no element " + repr(key));
}

Value Interpreter::slice(const Value& obj, const Expr& se, const FramePtr& frame) {
  Value bounds[3];
  for (int i = 0; i < 3; ++i)
    if (se.children[i]) bounds[i] = eval(*se.children[i], frame);
  if (obj.is_undefined()) fail_undefined(obj);
  for (const Value& b : bounds)
    if (!b.is_undefined() && !b.is_none() && !b.is_integral())
      return Value::undefined(object_desc(obj) + " has no element slice");
  if (!(obj.is_sequence() || obj.is_string())) return Value::undefined(object_desc(obj) + " has no element slice");
  auto has = [&](int i) { return !bounds[i].is_undefined() && !bounds[i].is_none(); };
  int64_t step_v = has(2) ? bounds[2].as_int() : 1;
  if (step_v == 0) throw_type_error("slice step cannot be zero");
  std::u32string cps;
  int64_t n;
  if (obj.is_string()) {
    cps = utf8_decode(obj.as_string());
    n = static_cast<int64_t>(cps.size());
  } else {
    n = static_cast<int64_t>(obj.items().size());
  }
  int64_t start, stop;
  if (step_v > 0) {
    start = has(0) ? bounds[0].as_int() : 0;
    stop = has(1) ? bounds[1].as_int() : n;
    if (start < 0) start = std::max<int64_t>(start + n, 0);
    if (start > n) start = n;
    if (stop < 0) stop = std::max<int64_t>(stop + n, 0);
    if (stop > n) stop = n;
  } else {
    start = has(0) ? bounds[0].as_int() : n - 1;
    stop = has(1) ? bounds[1].as_int() : -1 - n;  // sentinel meaning "before the start"
    if (start < 0) start = std::max<int64_t>(start + n, -1);
    if (start >= n) start = n - 1;
    if (has(1)) {
      if (stop < 0) stop = std::max<int64_t>(stop + n, -1);
      if (stop >= n) stop = n - 1;
    } else {
      stop = -1;
    }
  }
  std::vector<int64_t> idx;
  if (step_v > 0) {
    for (int64_t i = start; i < stop; i += step_v) idx.push_back(i);
  } else {
    for (int64_t i = start; i > stop; i += step_v) idx.push_back(i);
  }
  step(idx.size());
  if (obj.is_string()) {
    std::u32string r;
    for (int64_t i : idx) r.push_back(cps[static_cast<size_t>(i)]);
    return Value::string(utf8_encode(r), obj.is_markup());
  }
  List r;
  for (int64_t i : idx) r.push_back(obj.items()[static_cast<size_t>(i)]);
  return obj.is_tuple() ? Value::tuple(std::move(r)) : Value::list(std::move(r));
}

List Interpreter::iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList:
    case Value::Kind::kTuple: step(v.items().size()); return v.items();
    case Value::Kind::kGenerator: {
      List items = std::move(v.items());
      v.items().clear();
      step(items.size());
      return items;
    }
    case Value::Kind::kString: {
      List out;
      for (char32_t c : utf8_decode(v.as_string())) {
        std::string s;
        utf8_append(s, c);
        out.push_back(Value::string(std::move(s), v.is_markup()));
      }
      step(out.size());
      return out;
    }
    case Value::Kind::kDict: {
      List out;
      for (const auto& [k, val] : v.as_dict().entries()) out.push_back(k);
      step(out.size());
      return out;
    }
    default: throw_type_error("'" + type_name(v) + "' object is not iterable");
  }
}

bool Interpreter::contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string()) throw_type_error("'in <string>' requires string as left operand, not " + type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      step(container.items().size());
      for (const Value& x : container.items())
        if (equals(x, item)) return true;
      return false;
    case Value::Kind::kGenerator: {
      List& items = container.items();
      size_t i = 0;
      bool found = false;
      for (; i < items.size(); ++i) {
        if (equals(items[i], item)) {
          found = true;
          ++i;
          break;
        }
      }
      step(i);
      items.erase(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(i));
      return found;
    }
    case Value::Kind::kDict:
      if (item.is_list() || item.is_dict()) throw_type_error("unhashable type: '" + type_name(item) + "'");
      return container.as_dict().find(item) != nullptr;
    default: throw_type_error("argument of type '" + type_name(container) + "' is not iterable");
  }
}

bool Interpreter::compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (!((a.is_number() && b.is_number()) || (a.is_string() && b.is_string()) || (a.is_list() && b.is_list()) ||
        (a.is_tuple() && b.is_tuple())))
    throw_type_error("'" + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) +
                     "'");
  int c = compare(a, b);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;  // >=
}

Value Interpreter::binary(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  auto unsupported = [&]() -> Value {
    throw_type_error("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
  };
  const bool nums = a.is_number() && b.is_number();
  const bool ints = a.is_integral() && b.is_integral();
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (!checked_add(a.as_int(), b.as_int(), &r)) overflow();
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      check_string(a.as_string().size() + b.as_string().size());
      if (a.is_markup() || b.is_markup()) {
        std::string l = a.is_markup() ? a.as_string() : html_escape(a.as_string());
        std::string r = b.is_markup() ? b.as_string() : html_escape(b.as_string());
        return Value::string(l + r, true);
      }
      return Value::string(a.as_string() + b.as_string());
    }
    if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
      List r = a.items();
      step(r.size() + b.items().size());
      r.insert(r.end(), b.items().begin(), b.items().end());
      return a.is_list() ? Value::list(std::move(r)) : Value::tuple(std::move(r));
    }
    if (a.is_string() || a.is_list() || a.is_tuple())
      throw_type_error("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
    return unsupported();
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (!checked_sub(a.as_int(), b.as_int(), &r)) overflow();
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() - b.as_double());
    return unsupported();
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (!checked_mul(a.as_int(), b.as_int(), &r)) overflow();
      return Value::integer(r);
    }
    if (nums) return Value::floating(a.as_double() * b.as_double());
    const Value* seq = nullptr;
    const Value* count = nullptr;
    if ((a.is_string() || a.is_sequence()) && b.is_integral()) {
      seq = &a;
      count = &b;
    } else if (a.is_integral() && (b.is_string() || b.is_sequence())) {
      seq = &b;
      count = &a;
    }
    if (!seq) return unsupported();
    int64_t times = std::max<int64_t>(count->as_int(), 0);
    // An empty sequence repeated is empty however many times (and must not loop that often).
    if (seq->is_string() ? seq->as_string().empty() : seq->items().empty()) times = 0;
    if (seq->is_string()) {
      size_t unit = seq->as_string().size();
      if (unit && static_cast<uint64_t>(times) > limits_.max_output_bytes / unit + 1) check_string(SIZE_MAX);
      check_string(unit * static_cast<size_t>(times));
      std::string r;
      for (int64_t i = 0; i < times; ++i) r += seq->as_string();
      return Value::string(std::move(r), seq->is_markup());
    }
    size_t unit = seq->items().size();
    if (unit && static_cast<uint64_t>(times) > limits_.max_steps / unit + 1) step(limits_.max_steps + 1);
    step(unit * static_cast<uint64_t>(times));
    List r;
    for (int64_t i = 0; i < times; ++i) r.insert(r.end(), seq->items().begin(), seq->items().end());
    return seq->is_list() ? Value::list(std::move(r)) : Value::tuple(std::move(r));
  }
  if (op == "/") {
    if (!nums) return unsupported();
    if (b.as_double() == 0.0) throw_type_error("division by zero");
    return Value::floating(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (ints) return Value::integer(floor_div(a.as_int(), b.as_int()));
    if (nums) {
      if (b.as_double() == 0.0) throw_type_error("float floor division by zero");
      return Value::floating(std::floor(a.as_double() / b.as_double()));
    }
    return unsupported();
  }
  if (op == "%") {
    if (ints) return Value::integer(floor_mod(a.as_int(), b.as_int()));
    if (nums) {
      double y = b.as_double();
      if (y == 0.0) throw_type_error("float modulo");
      double m = std::fmod(a.as_double(), y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::floating(m);
    }
    if (a.is_string()) {
      std::string r = py_percent_format(a.as_string(), b);
      check_string(r.size());
      return Value::string(std::move(r));
    }
    return unsupported();
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), r = 1;
      while (e > 0) {
        if (e & 1)
          if (!checked_mul(r, base, &r)) overflow();
        e >>= 1;
        if (e > 0 && !checked_mul(base, base, &base)) overflow();
      }
      return Value::integer(r);
    }
    if (nums) {
      if (a.as_double() == 0.0 && b.as_double() < 0) throw_type_error("0.0 cannot be raised to a negative power");
      return Value::floating(std::pow(a.as_double(), b.as_double()));
    }
    return unsupported();
  }
  return unsupported();
}

Value Interpreter::eval(const Expr& e, const FramePtr& frame) {
  try {
    switch (e.kind) {
      case ExprKind::kConst: return e.value;
      case ExprKind::kName: return lookup(e.name, frame);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        List items;
        items.reserve(e.children.size());
        for (const auto& c : e.children) items.push_back(eval(*c, frame));
        return e.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
      }
      case ExprKind::kDict: {
        auto d = std::make_shared<Dict>();
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          Value k = eval(*e.children[i], frame);
          if (k.is_list() || k.is_dict()) throw_type_error("unhashable type: '" + type_name(k) + "'");
          d->set(k, eval(*e.children[i + 1], frame));
        }
        return Value::dict(std::move(d));
      }
      case ExprKind::kGetattr: return getattr(eval(*e.children[0], frame), e.name);
      case ExprKind::kGetitem: {
        Value obj = eval(*e.children[0], frame);
        if (e.children[1]->kind == ExprKind::kSlice) return slice(obj, *e.children[1], frame);
        return getitem(obj, eval(*e.children[1], frame));
      }
      case ExprKind::kSlice: throw_type_error("a slice is only valid inside []");
      case ExprKind::kCall: {
        Value callee = eval(*e.children[0], frame);
        CallArgs args;
        eval_args(e, 1, frame, args);
        return call(callee, args);
      }
      case ExprKind::kFilter: return eval_filter(e, frame, nullptr);
      case ExprKind::kTest: {
        Value v = eval(*e.children[0], frame);
        CallArgs args;
        eval_args(e, 1, frame, args);
        return Value::boolean(apply_test(*this, e.name, v, args));
      }
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        Value v = eval(*e.children[0], frame);
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number())
          throw_type_error(std::string("bad operand type for unary ") + (e.kind == ExprKind::kNeg ? "-" : "+") + ": '" +
                           type_name(v) + "'");
        if (e.kind == ExprKind::kPos) return v.is_bool() ? Value::integer(v.as_int()) : v;
        if (v.is_float()) return Value::floating(-v.as_double());
        if (v.as_int() == std::numeric_limits<int64_t>::min()) overflow();
        return Value::integer(-v.as_int());
      }
      case ExprKind::kNot: return Value::boolean(!truthy(eval(*e.children[0], frame)));
      case ExprKind::kBinary: return binary(e.name, eval(*e.children[0], frame), eval(*e.children[1], frame));
      case ExprKind::kCompare: {
        Value left = eval(*e.children[0], frame);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.children[i + 1], frame);
          if (!compare_op(e.ops[i], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case ExprKind::kAnd: {
        Value l = eval(*e.children[0], frame);
        if (!truthy(l)) return l;
        return eval(*e.children[1], frame);
      }
      case ExprKind::kOr: {
        Value l = eval(*e.children[0], frame);
        if (truthy(l)) return l;
        return eval(*e.children[1], frame);
      }
      case ExprKind::kConcat: {
        std::string s;
        for (const auto& c : e.children) {
          std::string part = to_str(eval(*c, frame));
          check_string(s.size() + part.size());
          s += part;
        }
        return Value::string(std::move(s));
      }
      case ExprKind::kCondExpr: {
        if (truthy(eval(*e.children[0], frame))) return eval(*e.children[1], frame);
        if (e.children[2]) return eval(*e.children[2], frame);
        return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                " evaluated to false and no else section was defined.");
      }
    }
  } catch (JinjaError& err) {
    err.set_line_if_unset(e.line);
    throw;
  }
  return Value();
}

}  // namespace fg::jinja

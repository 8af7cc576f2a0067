// Renders a parsed template (ast.h) against a context of variables, with the semantics of
// Jinja2's ImmutableSandboxedEnvironment as transformers configures it for chat templates.
// One Interpreter renders one template once; it is not shared between threads.
//
// Errors are thrown as JinjaError inside the interpreter and turned into an fg::Status by
// Template::render. Every loop iteration, call and produced byte counts against Limits, so a
// hostile template ends with a kLimit error instead of hanging or exhausting memory.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "jinja/ast.h"
#include "jinja/value.h"

namespace fg::jinja {

struct Limits {
  size_t max_output_bytes = size_t{32} << 20;     // any one string or output buffer
  uint64_t max_work_bytes = uint64_t{512} << 20;  // all bytes produced during one render
  uint64_t max_steps = 20'000'000;                // loop iterations + calls + items touched by filters
  int max_call_depth = 200;                       // nested macro calls
  int max_nesting = 200;                          // nested expressions/blocks in the source
};

// A variable scope. Loops get a fresh frame per iteration (Jinja2 does not carry `set`s from one
// iteration to the next); macros get one per call whose parent is the frame they were defined in.
struct Frame {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;
};
using FramePtr = std::shared_ptr<Frame>;

class Interpreter {
 public:
  // globals: the template's variables (messages, tools, add_generation_prompt, ...).
  Interpreter(const Limits& limits, const Dict& globals, std::optional<std::tm> fixed_now);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Appends the rendering of `body` to out.
  void render(const Body& body, std::string& out);

  // ---- services for the builtins (filters, tests, methods, globals) --------------------------
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  // Python iteration: list/tuple items, str code points, dict keys; consumes generators;
  // Undefined iterates as empty; anything else is a TypeError.
  List iterate(const Value& v);
  Value call(const Value& callee, CallArgs& args);
  Value call_filter(const std::string& name, const Value& v, CallArgs& args);
  bool call_test(const std::string& name, const Value& v, CallArgs& args);
  // Counts work; throws kLimit past Limits::max_steps.
  void step(uint64_t n = 1);
  // Accounts for a string of n bytes about to be built; throws kLimit when too large.
  void check_string(size_t n);
  const Limits& limits() const { return limits_; }
  const std::optional<std::tm>& fixed_now() const { return fixed_now_; }
  // Renders a macro body for a call (used by the macro callable).
  Value call_macro(const Stmt& macro, const FramePtr& closure, const std::string& name, CallArgs& args);
  // Records a namespace() made by this render. Namespaces are the only values a template can
  // change after making them (`set ns.x = ...`), so the only ones that can come to hold
  // themselves (`set ns.x = ns`); the Interpreter empties them when the render ends, which breaks
  // any such cycle.
  void keep_namespace(const std::shared_ptr<Dict>& ns) { namespaces_.push_back(ns); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec(const Body& body, const FramePtr& frame, std::string& out);
  Flow exec_stmt(const Stmt& s, const FramePtr& frame, std::string& out);
  void exec_for(const Stmt& s, const FramePtr& frame, std::string& out);
  Value eval(const Expr& e, const FramePtr& frame);
  Value eval_filter(const Expr& e, const FramePtr& frame, const Value* block_input);
  void eval_args(const Expr& e, size_t first, const FramePtr& frame, CallArgs& args);
  Value lookup(const std::string& name, const FramePtr& frame);
  void assign(const Expr& target, const Value& v, const FramePtr& frame);
  void append(std::string& out, const std::string& text);
  Value binary(const std::string& op, const Value& a, const Value& b);
  bool compare_op(const std::string& op, const Value& a, const Value& b);
  bool contains(const Value& container, const Value& item);
  Value slice(const Value& obj, const Expr& slice_expr, const FramePtr& frame);
  // Keeps a frame that a macro closes over alive until the render ends (macros hold it weakly).
  void keep_frame(const FramePtr& frame);

  Limits limits_;
  std::optional<std::tm> fixed_now_;
  Dict globals_;
  Dict builtins_;
  uint64_t steps_ = 0;
  uint64_t work_bytes_ = 0;
  int call_depth_ = 0;
  std::vector<FramePtr> closure_frames_;
  std::vector<std::shared_ptr<Dict>> namespaces_;
};

// ---- builtins (builtins.cc) -------------------------------------------------------------------

// Applies the named filter; throws kType "no filter named ..." for unknown names.
Value apply_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
// A bound method of a str/dict/list/tuple value, an unsafe Undefined for the sandbox's refused
// mutating methods (list.append, dict.pop, ...), or nullopt when the type has no such method.
std::optional<Value> get_method(const Value& obj, const std::string& name);
// range, dict, namespace, raise_exception, strftime_now, cycler, joiner.
void install_globals(Dict& builtins);

}  // namespace fg::jinja

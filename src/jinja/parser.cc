// Recursive-descent parser for the Jinja2 subset (see parser.h). Precedence, lowest first:
// conditional expression, or, and, not, comparisons (== != < <= > >= in, not in), + -, ~,
// * / // %, ** (left-associative, as in Jinja2), unary - +, then primaries with postfix
// attribute/subscript/call, filters (|) and tests (is).
#include "jinja/parser.h"

#include <set>

#include "jinja/error.h"
#include "jinja/lexer.h"

namespace fg::jinja {
namespace {

class Parser {
 public:
  Parser(std::vector<Token> tokens, int max_nesting) : toks_(std::move(tokens)), max_nesting_(max_nesting) {}

  Body parse_root() {
    Body body = subparse({});
    if (cur().type != TokenType::kEof) fail("unexpected '" + cur().value + "'");
    return body;
  }

 private:
  // ---- token stream ---------------------------------------------------------------------------
  const Token& cur() const { return toks_[pos_]; }
  const Token& look() const { return toks_[pos_ + 1 < toks_.size() ? pos_ + 1 : pos_]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::kOperator && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == TokenType::kName && cur().value == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& msg) const { throw JinjaError(ErrorKind::kSyntax, msg, cur().line); }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kEof: return "end of template";
      case TokenType::kBlockEnd: return "end of statement block";
      case TokenType::kVariableEnd: return "end of print statement";
      case TokenType::kBlockBegin: return "begin of statement block";
      case TokenType::kVariableBegin: return "begin of print statement";
      case TokenType::kData: return "template data";
      default: return "'" + t.value + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected token '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) fail("expected name, got " + describe(cur()));
    return next().value;
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) fail("expected end of statement block, got " + describe(cur()));
    next();
  }

  struct DepthGuard {
    Parser* p;
    explicit DepthGuard(Parser* parser) : p(parser) {
      if (++p->depth_ > p->max_nesting_) p->fail("template nested too deeply");
    }
    ~DepthGuard() { --p->depth_; }
  };

  ExprPtr make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // ---- statements -----------------------------------------------------------------------------
  // Parses until a block tag whose name is in `end_names` (left unconsumed) or end of template.
  Body subparse(const std::set<std::string>& end_names) {
    DepthGuard guard(this);
    Body body;
    while (cur().type != TokenType::kEof) {
      const Token& t = cur();
      if (t.type == TokenType::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kData;
        s->line = t.line;
        s->text = t.value;
        next();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kVariableBegin) {
        int line = t.line;
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = line;
        s->expr = parse_tuple(false, true, {}, false);
        if (cur().type != TokenType::kVariableEnd) fail("expected end of print statement, got " + describe(cur()));
        next();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        next();
        if (cur().type == TokenType::kName && end_names.count(cur().value)) return body;
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(t));
      }
    }
    return body;
  }

  // After a statement's header: `%}` body up to one of end_names. drop_needle consumes the end
  // tag's name (the caller still expects its `%}`... no: we consume it fully when dropping).
  Body parse_statements(const std::set<std::string>& end_names, bool drop_needle) {
    skip_op(":");
    expect_block_end();
    Body body = subparse(end_names);
    if (cur().type == TokenType::kEof) {
      std::string names;
      for (const auto& n : end_names) names += (names.empty() ? "'" : " or '") + n + "'";
      fail("unexpected end of template, expected " + names);
    }
    if (drop_needle) {
      next();
      expect_block_end();
    }
    return body;
  }

  StmtPtr parse_statement() {
    DepthGuard guard(this);
    const Token& t = cur();
    if (t.type != TokenType::kName) fail("tag name expected");
    const std::string tag = t.value;
    int line = t.line;
    StmtPtr s;
    if (tag == "for") {
      s = parse_for();
    } else if (tag == "if") {
      s = parse_if();
    } else if (tag == "set") {
      s = parse_set();
    } else if (tag == "macro") {
      s = parse_macro();
    } else if (tag == "call") {
      s = parse_call_block();
    } else if (tag == "filter") {
      s = parse_filter_block();
    } else if (tag == "with") {
      s = parse_with();
    } else if (tag == "generation") {
      next();
      s = std::make_unique<Stmt>();
      s->kind = StmtKind::kScope;
      s->body = parse_statements({"endgeneration"}, true);
    } else if (tag == "break" || tag == "continue") {
      next();
      if (loop_depth_ == 0) fail("'" + tag + "' outside of a loop");
      s = std::make_unique<Stmt>();
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      expect_block_end();
    } else if (tag == "extends" || tag == "include" || tag == "import" || tag == "from" || tag == "block" ||
               tag == "autoescape" || tag == "do" || tag == "trans") {
      fail("the '" + tag + "' tag is not supported in chat templates");
    } else {
      fail("Encountered unknown tag '" + tag + "'");
    }
    s->line = line;
    return s;
  }

  StmtPtr parse_for() {
    next();  // for
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kFor;
    s->target = parse_assign_target({"in"});
    if (!skip_name("in")) fail("expected 'in', got " + describe(cur()));
    s->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->filter = parse_expression(true);
    s->recursive = skip_name("recursive");
    ++loop_depth_;
    s->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (next().value == "endfor") {
      expect_block_end();
    } else {
      s->else_body = parse_statements({"endfor"}, true);
    }
    return s;
  }

  StmtPtr parse_if() {
    next();  // if / elif
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kIf;
    s->expr = parse_tuple(false, false, {}, false);
    s->body = parse_statements({"elif", "else", "endif"}, false);
    const Token& t = next();
    if (t.value == "elif") {
      --pos_;  // let the nested parse_if consume `elif` as its `if`
      auto nested = parse_if();
      nested->line = t.line;
      s->else_body.push_back(std::move(nested));
    } else if (t.value == "else") {
      s->else_body = parse_statements({"endif"}, true);
    } else {
      expect_block_end();
    }
    return s;
  }

  StmtPtr parse_set() {
    next();  // set
    auto s = std::make_unique<Stmt>();
    if (cur().type == TokenType::kName && look().type == TokenType::kOperator && look().value == ".") {
      int line = cur().line;
      std::string ns = next().value;
      next();  // .
      std::string attr = expect_name();
      auto target = make(ExprKind::kGetattr, line);
      auto name = make(ExprKind::kName, line);
      name->name = ns;
      target->children.push_back(std::move(name));
      target->name = attr;
      s->target = std::move(target);
    } else {
      s->target = parse_assign_target({});
    }
    if (skip_op("=")) {
      s->kind = StmtKind::kSet;
      s->expr = parse_tuple(false, true, {}, false);
      expect_block_end();
      return s;
    }
    s->kind = StmtKind::kSetBlock;
    if (is_op("|")) s->filter = parse_filter(nullptr, false);
    s->body = parse_statements({"endset"}, true);
    return s;
  }

  void parse_signature(Stmt& s) {
    expect_op("(");
    bool seen_default = false;
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      Param p;
      p.name = expect_name();
      if (skip_op("=")) {
        p.default_value = parse_expression(true);
        seen_default = true;
      } else if (seen_default) {
        fail("non-default argument follows default argument");
      }
      s.params.push_back(std::move(p));
    }
    expect_op(")");
  }

  StmtPtr parse_macro() {
    next();  // macro
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kMacro;
    s->name = expect_name();
    parse_signature(*s);
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    macros_.push_back(s.get());
    s->body = parse_statements({"endmacro"}, true);
    macros_.pop_back();
    loop_depth_ = saved_loops;
    return s;
  }

  StmtPtr parse_call_block() {
    next();  // call
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kCallBlock;
    if (is_op("(")) parse_signature(*s);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::kCall) fail("expected call");
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    macros_.push_back(s.get());
    s->body = parse_statements({"endcall"}, true);
    macros_.pop_back();
    loop_depth_ = saved_loops;
    return s;
  }

  StmtPtr parse_filter_block() {
    next();  // filter
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kFilterBlock;
    s->expr = parse_filter(nullptr, true);
    s->body = parse_statements({"endfilter"}, true);
    return s;
  }

  StmtPtr parse_with() {
    next();  // with
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kWith;
    while (cur().type != TokenType::kBlockEnd) {
      if (!s->params.empty()) expect_op(",");
      Param p;
      p.name = expect_name();
      expect_op("=");
      p.default_value = parse_expression(true);
      s->params.push_back(std::move(p));
    }
    s->body = parse_statements({"endwith"}, true);
    return s;
  }

  // A name or a tuple of names (for-loop targets, set targets).
  ExprPtr parse_assign_target(const std::set<std::string>& extra_end) {
    ExprPtr t = parse_tuple(true, true, extra_end, false);
    auto check = [&](const Expr& e) {
      if (e.kind != ExprKind::kName) fail("can't assign to this expression");
      if (e.name == "true" || e.name == "false" || e.name == "none" || e.name == "True" || e.name == "False" ||
          e.name == "None")
        fail("can't assign to '" + e.name + "'");
    };
    if (t->kind == ExprKind::kTuple) {
      for (const auto& c : t->children) check(*c);
    } else {
      check(*t);
    }
    return t;
  }

  // ---- expressions ----------------------------------------------------------------------------
  bool is_tuple_end(const std::set<std::string>& extra_end) const {
    const Token& t = cur();
    if (t.type == TokenType::kVariableEnd || t.type == TokenType::kBlockEnd || t.type == TokenType::kEof) return true;
    if (t.type == TokenType::kOperator && t.value == ")") return true;
    if (t.type == TokenType::kName && extra_end.count(t.value)) return true;
    return false;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const std::set<std::string>& extra_end,
                      bool explicit_parentheses) {
    int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      if (simplified) {
        args.push_back(parse_primary());
      } else {
        args.push_back(parse_expression(with_condexpr));
      }
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parentheses) fail("expected an expression, got " + describe(cur()));
    }
    auto t = make(ExprKind::kTuple, line);
    t->children = std::move(args);
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    int line = cur().line;
    ExprPtr e1 = parse_or();
    while (skip_name("if")) {
      ExprPtr e2 = parse_or();
      ExprPtr e3;
      if (skip_name("else")) e3 = parse_condexpr();
      auto c = make(ExprKind::kCondExpr, line);
      c->children.push_back(std::move(e2));
      c->children.push_back(std::move(e1));
      c->children.push_back(std::move(e3));
      e1 = std::move(c);
      line = cur().line;
    }
    return e1;
  }

  ExprPtr parse_or() {
    int line = cur().line;
    ExprPtr left = parse_and();
    while (skip_name("or")) {
      auto n = make(ExprKind::kOr, line);
      n->children.push_back(std::move(left));
      n->children.push_back(parse_and());
      left = std::move(n);
    }
    return left;
  }

  ExprPtr parse_and() {
    int line = cur().line;
    ExprPtr left = parse_not();
    while (skip_name("and")) {
      auto n = make(ExprKind::kAnd, line);
      n->children.push_back(std::move(left));
      n->children.push_back(parse_not());
      left = std::move(n);
    }
    return left;
  }

  ExprPtr parse_not() {
    DepthGuard guard(this);
    if (is_name("not")) {
      int line = next().line;
      auto n = make(ExprKind::kNot, line);
      n->children.push_back(parse_not());
      return n;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr expr = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == TokenType::kOperator && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                                 cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        op = next().value;
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && look().type == TokenType::kName && look().value == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::kCompare, line);
        cmp->children.push_back(std::move(expr));
      }
      cmp->ops.push_back(op);
      cmp->children.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(expr);
  }

  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
    auto n = make(ExprKind::kBinary, line);
    n->name = op;
    n->children.push_back(std::move(a));
    n->children.push_back(std::move(b));
    return n;
  }

  ExprPtr parse_math1() {
    int line = cur().line;
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = next().value;
      ExprPtr right = parse_concat();
      left = binary(op, std::move(left), std::move(right), line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto n = make(ExprKind::kConcat, line);
    n->children.push_back(std::move(first));
    while (skip_op("~")) n->children.push_back(parse_math2());
    return n;
  }

  ExprPtr parse_math2() {
    int line = cur().line;
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = next().value;
      ExprPtr right = parse_pow();
      left = binary(op, std::move(left), std::move(right), line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    int line = cur().line;
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) {
      ExprPtr right = parse_unary(true);
      left = binary("**", std::move(left), std::move(right), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    int line = cur().line;
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      bool neg = next().value == "-";
      node = make(neg ? ExprKind::kNeg : ExprKind::kPos, line);
      node->children.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(this);
    const Token& t = cur();
    int line = t.line;
    if (t.type == TokenType::kName) {
      std::string v = next().value;
      auto n = make(ExprKind::kConst, line);
      if (v == "true" || v == "True") {
        n->value = Value::boolean(true);
      } else if (v == "false" || v == "False") {
        n->value = Value::boolean(false);
      } else if (v == "none" || v == "None") {
        n->value = Value::none();
      } else {
        n->kind = ExprKind::kName;
        n->name = v;
        note_name(v);
      }
      return n;
    }
    if (t.type == TokenType::kString) {
      std::string s;
      while (cur().type == TokenType::kString) s += next().value;  // adjacent literals join
      auto n = make(ExprKind::kConst, line);
      n->value = Value::string(std::move(s));
      return n;
    }
    if (t.type == TokenType::kInteger || t.type == TokenType::kFloat) {
      auto n = make(ExprKind::kConst, line);
      n->value = t.type == TokenType::kInteger ? Value::integer(t.int_value) : Value::floating(t.float_value);
      next();
      return n;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto n = make(ExprKind::kList, line);
      while (!is_op("]")) {
        if (!n->children.empty()) expect_op(",");
        if (is_op("]")) break;
        n->children.push_back(parse_expression(true));
      }
      expect_op("]");
      return n;
    }
    if (is_op("{")) {
      next();
      auto n = make(ExprKind::kDict, line);
      while (!is_op("}")) {
        if (!n->children.empty()) expect_op(",");
        if (is_op("}")) break;
        n->children.push_back(parse_expression(true));
        expect_op(":");
        n->children.push_back(parse_expression(true));
      }
      expect_op("}");
      return n;
    }
    fail("unexpected " + describe(t));
  }

  void note_name(const std::string& v) {
    if (macros_.empty()) return;
    Stmt* m = macros_.back();
    if (v == "varargs") m->uses_varargs = true;
    if (v == "kwargs") m->uses_kwargs = true;
    if (v == "caller") m->uses_caller = true;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    DepthGuard guard(this);
    const Token& t = next();
    int line = t.line;
    if (t.value == ".") {
      const Token& a = cur();
      if (a.type == TokenType::kName) {
        auto n = make(ExprKind::kGetattr, line);
        n->name = next().value;
        n->children.push_back(std::move(node));
        return n;
      }
      if (a.type != TokenType::kInteger) fail("expected name or number");
      auto idx = make(ExprKind::kConst, line);
      idx->value = Value::integer(a.int_value);
      next();
      auto n = make(ExprKind::kGetitem, line);
      n->children.push_back(std::move(node));
      n->children.push_back(std::move(idx));
      return n;
    }
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto n = make(ExprKind::kGetitem, line);
    n->children.push_back(std::move(node));
    if (args.size() == 1) {
      n->children.push_back(std::move(args[0]));
    } else {
      auto tup = make(ExprKind::kTuple, line);
      tup->children = std::move(args);
      n->children.push_back(std::move(tup));
    }
    return n;
  }

  ExprPtr parse_subscribed() {
    int line = cur().line;
    std::vector<ExprPtr> args;
    if (is_op(":")) {
      next();
      args.push_back(nullptr);
    } else {
      ExprPtr e = parse_expression(true);
      if (!is_op(":")) return e;
      next();
      args.push_back(std::move(e));
    }
    if (is_op(":")) {
      args.push_back(nullptr);
    } else if (!is_op("]") && !is_op(",")) {
      args.push_back(parse_expression(true));
    } else {
      args.push_back(nullptr);
    }
    if (is_op(":")) {
      next();
      if (!is_op("]") && !is_op(",")) {
        args.push_back(parse_expression(true));
      } else {
        args.push_back(nullptr);
      }
    } else {
      args.push_back(nullptr);
    }
    auto n = make(ExprKind::kSlice, line);
    n->children = std::move(args);
    return n;
  }

  void parse_call_args(Expr& n) {
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().type == TokenType::kName && look().type == TokenType::kOperator && look().value == "=") {
        std::string key = next().value;
        next();  // =
        n.kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!n.kwargs.empty()) fail("invalid syntax for function call expression");
        n.children.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    DepthGuard guard(this);
    auto n = make(ExprKind::kCall, cur().line);
    n->children.push_back(std::move(node));
    parse_call_args(*n);
    return n;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      DepthGuard guard(this);
      if (!start_inline) next();
      int line = cur().line;
      std::string name = expect_name();
      while (skip_op(".")) {
        name.push_back('.');
        name += expect_name();
      }
      auto n = make(ExprKind::kFilter, line);
      n->name = name;
      n->children.push_back(std::move(node));
      if (is_op("(")) parse_call_args(*n);
      node = std::move(n);
      start_inline = false;
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    DepthGuard guard(this);
    int line = next().line;  // is
    bool negated = skip_name("not");
    std::string name = expect_name();
    while (skip_op(".")) {
      name.push_back('.');
      name += expect_name();
    }
    auto n = make(ExprKind::kTest, line);
    n->name = name;
    n->children.push_back(std::move(node));
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(*n);
    } else if ((t.type == TokenType::kName || t.type == TokenType::kString || t.type == TokenType::kInteger ||
                t.type == TokenType::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
               !(t.type == TokenType::kName && (t.value == "else" || t.value == "or" || t.value == "and"))) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      ExprPtr arg = parse_postfix(parse_primary());
      n->children.push_back(std::move(arg));
    }
    if (negated) {
      auto notn = make(ExprKind::kNot, line);
      notn->children.push_back(std::move(n));
      return notn;
    }
    return n;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int max_nesting_;
  int loop_depth_ = 0;
  std::vector<Stmt*> macros_;
};

}  // namespace

Body parse_template(std::string_view source, int max_nesting) {
  Parser p(tokenize(source), max_nesting);
  return p.parse_root();
}

}  // namespace fg::jinja

// The syntax tree of a parsed template: expressions and statements, as plain tagged structs.
// Built once by the parser, read-only afterwards (a parsed template may render concurrently).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace fg::jinja {

enum class ExprKind {
  kConst,    // value
  kName,     // name
  kList,     // children: items
  kTuple,    // children: items
  kDict,     // children: key0, value0, key1, value1, ...
  kGetattr,  // children[0].name            (x.y)
  kGetitem,  // children[0][children[1]]    (x[y]; children[1] may be a kSlice)
  kSlice,    // children: start, stop, step (each may be null)
  kCall,     // children[0](children[1..], kwargs)
  kFilter,   // children[0] | name(children[1..], kwargs); children[0] null inside {% filter %}
  kTest,     // children[0] is name(children[1..], kwargs)
  kNeg,      // -children[0]
  kPos,      // +children[0]
  kNot,      // not children[0]
  kBinary,   // children[0] <name> children[1]; name in + - * / // % **
  kCompare,  // children[0] ops[0] children[1] ops[1] children[2] ...
  kAnd,
  kOr,
  kConcat,    // children joined with ~
  kCondExpr,  // children[1] if children[0] else children[2] (children[2] may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kConst;
  int line = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare: == != < <= > >= in notin
};

enum class StmtKind {
  kData,         // text
  kOutput,       // {{ expr }}
  kIf,           // if expr: body else else_body (elif is a nested kIf in else_body)
  kFor,          // for target in expr [if filter]: body else else_body
  kSet,          // set target = expr
  kSetBlock,     // set target [| filter]: body endset
  kMacro,        // macro name(params): body
  kCallBlock,    // call(params) expr: body  (the body becomes `caller`)
  kFilterBlock,  // filter expr: body
  kWith,         // with params: body
  kBreak,
  kContinue,
  kScope,  // a body rendered in place ({% generation %})
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  StmtKind kind = StmtKind::kData;
  int line = 0;
  std::string text;  // kData
  std::string name;  // kMacro
  ExprPtr expr;      // output / condition / iterable / value / call / filter chain
  ExprPtr target;    // kFor, kSet, kSetBlock: a kName, a kTuple of kName, or (set only) kGetattr
  ExprPtr filter;    // kFor loop filter, kSetBlock filter chain
  Body body;
  Body else_body;
  std::vector<Param> params;  // kMacro, kCallBlock, kWith (assignments)
  bool recursive = false;     // kFor
  bool uses_varargs = false;  // kMacro / kCallBlock: the body reads `varargs`
  bool uses_kwargs = false;   // ... reads `kwargs`
  bool uses_caller = false;   // ... reads `caller`
};

}  // namespace fg::jinja

// chat_template_expr.hpp — the values and expressions of a chat template (chat_template.hpp):
// Jinja's data model as far as chat templates reach, a parser that refuses what it lacks at load,
// and evaluation against a scope.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace loom::serve::llm::tmpl {

struct Value {
  enum Kind { kUndefined, kNone, kBool, kInt, kString, kList, kDict } kind = kUndefined;
  bool b = false;
  int64_t i = 0;
  std::string s;
  std::shared_ptr<std::vector<Value>> list;
  std::shared_ptr<std::map<std::string, Value>> dict;

  static Value none() { Value v; v.kind = kNone; return v; }
  static Value boolean(bool x) { Value v; v.kind = kBool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = kInt; v.i = x; return v; }
  static Value str(std::string x) { Value v; v.kind = kString; v.s = std::move(x); return v; }
  static Value new_list() { Value v; v.kind = kList; v.list = std::make_shared<std::vector<Value>>(); return v; }
  static Value new_dict() { Value v; v.kind = kDict; v.dict = std::make_shared<std::map<std::string, Value>>(); return v; }
  bool truthy() const;
  std::string text() const;  // as {{ }} prints it: Python's str()
};

// Variables by name, innermost scope last (a for loop's body is a scope: Jinja's `set` inside a
// loop does not leak out).
struct Scope {
  std::vector<std::map<std::string, Value>> frames;
  Value get(const std::string& name) const;
  void set(const std::string& name, Value v) { frames.back()[name] = std::move(v); }
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum Op { kLit, kVar, kList, kAttr, kIndex, kSlice, kCall, kMethod, kFilter, kTest, kNot, kNeg, kBin, kAnd, kOr, kIf } op;
  Value lit;
  std::string name;  // variable, attribute, function, method, filter, test or binary operator
  std::vector<ExprPtr> args;
  bool negate = false;  // `is not`
};

// Parses `text` (the inside of {{ }} or a statement's expression); `pos` advances past it and
// parsing stops at a token it cannot continue with. Throws rt::Error naming what is not supported.
ExprPtr parse_expr(const std::string& text, size_t& pos);
// The next word at `pos` ("for", "in", "=", ...), skipping spaces; empty at the end.
std::string next_word(const std::string& text, size_t& pos);
Value eval(const Expr& e, Scope& scope);

}  // namespace loom::serve::llm::tmpl

// chat_template_expr.hpp — the values and expressions of a chat template (chat_template.hpp):
// Jinja's data model as far as chat templates reach, a parser that refuses what it lacks at load,
// and evaluation against a scope.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <nlohmann/ordered_map.hpp>
#include <string>
#include <vector>

namespace loom::serve::llm::tmpl {

struct Value {
  enum Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict } kind = kUndefined;
  bool b = false;  // kBool: the value; kDict: a namespace() (whose attributes {% set ns.x = %} may change)
  int64_t i = 0;
  double f = 0;  // kFloat: carried from a request's JSON and printed, not computed with
  std::string s;
  std::shared_ptr<std::vector<Value>> list;
  std::shared_ptr<nlohmann::ordered_map<std::string, Value>> dict;  // in insertion order, as Python's dicts

  static Value none() { Value v; v.kind = kNone; return v; }
  static Value boolean(bool x) { Value v; v.kind = kBool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = kInt; v.i = x; return v; }
  static Value str(std::string x) { Value v; v.kind = kString; v.s = std::move(x); return v; }
  static Value new_list() { Value v; v.kind = kList; v.list = std::make_shared<std::vector<Value>>(); return v; }
  static Value new_dict() { Value v; v.kind = kDict; v.dict = std::make_shared<nlohmann::ordered_map<std::string, Value>>(); return v; }
  bool truthy() const;
  std::string text() const;  // as {{ }} prints it: Python's str() (lists and dicts as their repr)
};

// What one rendering may spend. A template comes with a model's folder: it is a program a
// stranger wrote, so every construct that repeats, nests or grows is counted, and each limit
// passed is the client's 400 naming it, the server unharmed.
struct Budget {
  static constexpr int64_t kSteps = 1000000;         // loop iterations, macro, function, filter and method calls, values walked
  static constexpr int64_t kBytes = 64 << 20;        // bytes of strings and list items built, all told
  static constexpr size_t kMaxString = 4 << 20;      // the most one string built may hold
  static constexpr int kMaxDepth = 256;              // expressions being evaluated, through macro calls too
  static constexpr int kMaxValueDepth = 64;          // lists and dicts inside each other
  int64_t steps = kSteps, bytes = kBytes;
  int depth = 0;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();

  void step(int64_t n = 1);  // throws past kSteps or the deadline
  void spend(size_t n);      // throws past kBytes
  // Throws when a string of `n` bytes would pass kMaxString; spends them otherwise.
  void grow(size_t n);
};

// Variables by name, innermost scope last (a for loop's body is a scope: Jinja's `set` inside a
// loop does not leak out).
struct Scope {
  std::vector<std::map<std::string, Value>> frames;
  Budget budget;
  // Calls the template's {% macro %} `name` with positional and keyword arguments: its text.
  std::function<Value(const std::string& name, const std::vector<Value>& pos, const std::map<std::string, Value>& kw)> macro;
  Value get(const std::string& name) const;
  void set(const std::string& name, Value v) { frames.back()[name] = std::move(v); }
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum Op { kLit, kVar, kList, kDict, kAttr, kIndex, kSlice, kCall, kMethod, kFilter, kTest, kNot, kNeg, kBin, kAnd, kOr, kIf } op;
  Value lit;
  std::string name;  // variable, attribute, function, method, filter, test or binary operator
  std::vector<ExprPtr> args;
  std::vector<std::string> kw;  // calls, filters and methods: each argument's keyword ("" for positional), as args
  bool negate = false;  // `is not`
  int height = 1;       // the longest chain of arguments below, itself included
};

// Parses `text` (the inside of {{ }} or a statement's expression); `pos` advances past it and
// parsing stops at a token it cannot continue with. Throws rt::Error naming what is not supported.
// `macros`: the names of the template's macros read so far, which it may call like functions.
ExprPtr parse_expr(const std::string& text, size_t& pos, const std::set<std::string>* macros = nullptr);
// The names a template may call as functions ("raise_exception", "range", "namespace", "strftime_now").
bool is_function(const std::string& name);
bool is_filter(const std::string& name);  // the filters it renders
bool is_test(const std::string& name);    // the tests (`is NAME`, select/reject) it renders
// The next word at `pos` ("for", "in", "=", ...), skipping spaces; empty at the end.
std::string next_word(const std::string& text, size_t& pos);
Value eval(const Expr& e, Scope& scope);
// What a for loop or a filter such as list, join or select walks: a list's items, a string's
// characters, a dict's keys; nothing for undefined or none. Throws ServeError kInput saying what
// the template was `doing` ("loops over") with anything else.
std::vector<Value> elements(const Value& v, const char* doing);
// transformers' tojson: json.dumps with ensure_ascii off, keys in their order, and Python's
// separators (", " and ": "; "," and ": " with an indent, negative for none). Throws past
// Budget::kMaxString bytes or Budget::kMaxValueDepth levels.
std::string to_json_text(const Value& v, int indent = -1);
// Throws unless `v` nests at most Budget::kMaxValueDepth levels and does not hold `inside` (a
// namespace being set, which would then hold itself); each list and dict walked is a step.
void check_nesting(const Value& v, const void* inside, Budget& budget);
// A request's JSON as template data (objects as dicts in their order); throws ServeError kInput
// past 64 levels of nesting.
Value from_json(const nlohmann::ordered_json& j, int depth = 0);

// What the evaluator (chat_template_eval.cpp) and the filters (chat_template_filters.cpp) share.
// A call's arguments once evaluated: positional, then by keyword.
struct Args {
  std::vector<Value> pos;
  std::map<std::string, Value> kw;
  Budget* budget = nullptr;  // the rendering's, for what a filter or method builds
  // The argument at position i or named `key`; undefined when neither was given.
  Value get(size_t i, const char* key) const {
    auto it = kw.find(key);
    if (it != kw.end()) return it->second;
    return i < pos.size() ? pos[i] : Value();
  }
};
// Throws ServeError kInput: "the chat template: " + why.
[[noreturn]] void fail(const std::string& why);
int64_t length(const Value& v);                       // a string's, list's or dict's; fails otherwise
bool equal(const Value& a, const Value& b);           // Jinja's ==
Value index(const Value& obj, const Value& key);      // obj[key]; undefined when it is not there
Value method(const std::string& name, const Value& self, const Args& a);  // s.strip(), d.items(), ...
bool test(const std::string& name, const Value& v, const Value& arg = Value());  // `v is name`
Value filter(const std::string& name, const Value& v, const Args& a);     // `v | name`

}  // namespace loom::serve::llm::tmpl

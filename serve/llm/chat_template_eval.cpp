// chat_template_eval.cpp — evaluating a chat template's expressions (chat_template_expr.hpp) as
// Jinja does: Python's truthiness, str() and comparisons for the values templates hold. The
// filters, tests and methods it calls are in chat_template_filters.cpp.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>

#include "chat_template_expr.hpp"
#include "core/kserve_json.hpp"
#include "core/status.hpp"

namespace loom::serve::llm::tmpl {

[[noreturn]] void fail(const std::string& why) { throw ServeError(Status::kInput, "the chat template: " + why); }

namespace {

constexpr int64_t kMaxRange = 100000;

std::string json_string(const std::string& s) { return dump_json(nlohmann::json(s)); }

// Throws when `out` has passed the most one string may hold, or `level` the most nesting.
void bounded(const std::string& out, int level) {
  if (out.size() > Budget::kMaxString) fail("a value's text passes " + std::to_string(Budget::kMaxString) + " bytes");
  if (level > Budget::kMaxValueDepth) fail("a value nested deeper than " + std::to_string(Budget::kMaxValueDepth) + " levels");
}

void write_json(const Value& v, int indent, int level, std::string& out) {
  bounded(out, level);
  const std::string pad = indent < 0 ? "" : "\n" + std::string(static_cast<size_t>(indent * (level + 1)), ' ');
  const std::string close = indent < 0 ? "" : "\n" + std::string(static_cast<size_t>(indent * level), ' ');
  const char* comma = indent < 0 ? ", " : ",";
  switch (v.kind) {
    case Value::kBool: out += v.b ? "true" : "false"; return;
    case Value::kInt: out += std::to_string(v.i); return;
    case Value::kFloat: out += nlohmann::json(v.f).dump(); return;
    case Value::kString: out += json_string(v.s); return;
    case Value::kList:
      if (v.list->empty()) return void(out += "[]");
      out += "[";
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? comma : "") + pad, write_json((*v.list)[k], indent, level + 1, out);
      out += close + "]";
      return;
    case Value::kDict: {
      if (v.dict->empty()) return void(out += "{}");
      out += "{";
      bool first = true;
      for (const auto& kv : *v.dict) {
        out += (first ? "" : comma) + pad + json_string(kv.first) + ": ";
        write_json(kv.second, indent, level + 1, out);
        first = false;
      }
      out += close + "}";
      return;
    }
    default: out += "null";
  }
}

// Python's repr() of a string: single quotes unless it holds one and no double quote.
std::string py_repr(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == q || ch == '\\') out += '\\', out += ch;
    else if (ch == '\n') out += "\\n";
    else if (ch == '\r') out += "\\r";
    else if (ch == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + q;
}

void write_repr(const Value& v, int level, std::string& out) {
  bounded(out, level);
  if (v.kind == Value::kString) return void(out += py_repr(v.s));
  if (v.kind == Value::kList) {
    out += "[";
    for (size_t k = 0; k < v.list->size(); ++k) out += k ? ", " : "", write_repr((*v.list)[k], level + 1, out);
    return void(out += "]");
  }
  if (v.kind == Value::kDict) {
    out += "{";
    bool first = true;
    for (const auto& kv : *v.dict) out += (first ? "" : ", ") + py_repr(kv.first) + ": ", write_repr(kv.second, level + 1, out), first = false;
    return void(out += "}");
  }
  out += v.kind == Value::kUndefined ? "Undefined" : v.text();
}

std::string repr(const Value& v) {
  std::string out;
  write_repr(v, 0, out);
  return out;
}

}  // namespace

int64_t length(const Value& v) {
  if (v.kind == Value::kString) return static_cast<int64_t>(v.s.size());
  if (v.kind == Value::kList) return static_cast<int64_t>(v.list->size());
  if (v.kind == Value::kDict) return static_cast<int64_t>(v.dict->size());
  fail("length of a value that has none");
}

bool equal(const Value& a, const Value& b) {
  if (a.kind == Value::kFloat || b.kind == Value::kFloat)
    return (a.kind == Value::kFloat ? a.f : static_cast<double>(a.i)) == (b.kind == Value::kFloat ? b.f : static_cast<double>(b.i)) &&
           (a.kind == Value::kFloat || a.kind == Value::kInt) && (b.kind == Value::kFloat || b.kind == Value::kInt);
  if (a.kind == Value::kInt && b.kind == Value::kBool) return a.i == (b.b ? 1 : 0);
  if (a.kind == Value::kBool && b.kind == Value::kInt) return b.i == (a.b ? 1 : 0);
  if (a.kind != b.kind) return (a.kind == Value::kUndefined || a.kind == Value::kNone) && (b.kind == Value::kUndefined || b.kind == Value::kNone) && a.kind == b.kind;
  switch (a.kind) {
    case Value::kBool: return a.b == b.b;
    case Value::kInt: return a.i == b.i;
    case Value::kString: return a.s == b.s;
    case Value::kList: return to_json_text(a) == to_json_text(b);
    case Value::kDict: return to_json_text(a) == to_json_text(b);
    default: return true;
  }
}

Value index(const Value& obj, const Value& key) {
  if (obj.kind == Value::kDict && key.kind == Value::kString) {
    auto it = obj.dict->find(key.s);
    return it == obj.dict->end() ? Value() : it->second;
  }
  if ((obj.kind == Value::kList || obj.kind == Value::kString) && key.kind == Value::kInt) {
    const int64_t n = length(obj), i = key.i < 0 ? key.i + n : key.i;
    if (i < 0 || i >= n) return Value();
    return obj.kind == Value::kList ? (*obj.list)[static_cast<size_t>(i)] : Value::str(obj.s.substr(static_cast<size_t>(i), 1));
  }
  return Value();
}

namespace {

// obj[lo:hi:step] with Python's rules for missing, negative and out-of-range bounds.
Value slice(const Value& obj, const Value& lo, const Value& hi, const Value& step) {
  if (obj.kind != Value::kList && obj.kind != Value::kString) fail("a slice of a value that is not a list or string");
  const int64_t n = length(obj), st = step.kind == Value::kInt ? step.i : 1;
  if (st == 0) fail("a slice step of zero");
  auto at = [n, st](const Value& v, int64_t dflt) {
    if (v.kind != Value::kInt) return dflt;
    const int64_t i = v.i < 0 ? v.i + n : v.i;
    return st > 0 ? std::max<int64_t>(0, std::min(n, i)) : std::max<int64_t>(-1, std::min(n - 1, i));
  };
  const int64_t a = at(lo, st > 0 ? 0 : n - 1), b = at(hi, st > 0 ? n : -1);
  Value out = obj.kind == Value::kString ? Value::str("") : Value::new_list();
  // i stays within [-1, n]: a step past the end stops before it is added (a huge step overflows otherwise).
  for (int64_t i = a; st > 0 ? i < b : i > b;) {
    if (obj.kind == Value::kString) out.s += obj.s[static_cast<size_t>(i)];
    else out.list->push_back((*obj.list)[static_cast<size_t>(i)]);
    if (st > 0 ? st >= b - i : st <= b - i) break;
    i += st;
  }
  return out;
}

int64_t whole(const std::string& op, const Value& a, const Value& b) {
  int64_t r = 0;
  const bool over = op == "+" ? __builtin_add_overflow(a.i, b.i, &r) : op == "-" ? __builtin_sub_overflow(a.i, b.i, &r)
                    : op == "*" ? __builtin_mul_overflow(a.i, b.i, &r) : (b.i == -1 && a.i == INT64_MIN && op == "//");
  if (over) fail("an integer overflow in " + a.text() + " " + op + " " + b.text());
  if (op == "%") {  // Python's: the sign of the divisor (x % -1 is 0, INT64_MIN % -1 included)
    r = b.i == -1 ? 0 : a.i % b.i;
    return r != 0 && ((r < 0) != (b.i < 0)) ? r + b.i : r;
  }
  if (op == "//") {  // Python's: towards minus infinity
    r = a.i / b.i;
    return r * b.i != a.i && ((a.i < 0) != (b.i < 0)) ? r - 1 : r;
  }
  return r;
}

Value arithmetic(const std::string& op, const Value& a, const Value& b, Budget& budget) {
  if (op == "~") {
    std::string at = a.text(), bt = b.text();
    budget.grow(at.size() + bt.size());
    return Value::str(at + bt);
  }
  if (op == "+" && a.kind == Value::kString && b.kind == Value::kString) return budget.grow(a.s.size() + b.s.size()), Value::str(a.s + b.s);
  if (op == "+" && a.kind == Value::kList && b.kind == Value::kList) {
    Value out = Value::new_list();
    budget.spend((a.list->size() + b.list->size()) * sizeof(Value));  // before the copy: lists doubled are refused early
    *out.list = *a.list;
    out.list->insert(out.list->end(), b.list->begin(), b.list->end());
    return out;
  }
  if (a.kind != Value::kInt || b.kind != Value::kInt) fail("'" + op + "' between " + a.text() + " and " + b.text());
  if ((op == "/" || op == "//" || op == "%") && b.i == 0) fail("a division by zero");
  if (op == "/") {  // Python's true division
    Value v;
    v.kind = Value::kFloat;
    v.f = static_cast<double>(a.i) / static_cast<double>(b.i);
    return v;
  }
  return Value::integer(whole(op, a, b));
}

Value binary(const std::string& op, const Value& a, const Value& b, Budget& budget) {
  if (op == "==") return Value::boolean(equal(a, b));
  if (op == "!=") return Value::boolean(!equal(a, b));
  if (op == "in") {
    if (b.kind == Value::kString) return Value::boolean(b.s.find(a.text()) != std::string::npos);
    if (b.kind == Value::kDict) return Value::boolean(a.kind == Value::kString && b.dict->count(a.s) > 0);
    if (b.kind == Value::kList)
      return Value::boolean(std::any_of(b.list->begin(), b.list->end(), [&](const Value& x) { return equal(a, x); }));
    fail("'in' a value that holds nothing");
  }
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    int c = 0;
    if (a.kind == Value::kInt && b.kind == Value::kInt) c = a.i < b.i ? -1 : a.i > b.i;
    else if (a.kind == Value::kString && b.kind == Value::kString) c = a.s.compare(b.s);
    else fail("'" + op + "' between values of different kinds");
    return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
  }
  return arithmetic(op, a, b, budget);
}

Value call(const std::string& name, const Args& args, Budget& budget) {
  const std::vector<Value>& a = args.pos;
  budget.step();
  if (name == "raise_exception") throw ServeError(Status::kInput, a.empty() ? "the chat template refused the conversation" : a[0].text());
  if (name == "namespace") {  // attributes from a mapping and from keywords
    Value ns = Value::new_dict();
    ns.b = true;
    for (const Value& d : a)
      if (d.kind == Value::kDict) ns.dict->insert(d.dict->begin(), d.dict->end());
    for (const auto& kv : args.kw) (*ns.dict)[kv.first] = kv.second;
    return ns;
  }
  if (name == "strftime_now") {  // transformers' helper: the server's local time
    if (a.empty() || a[0].kind != Value::kString || a[0].s.size() > 256) fail("strftime_now() takes a format string");
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[1024];
    return Value::str(std::string(buf, std::strftime(buf, sizeof buf, a[0].s.c_str(), &tm)));
  }
  if (a.empty() || a[0].kind != Value::kInt || a[0].i < 0 || a[0].i > kMaxRange) fail("range() takes a whole number up to 100000");
  budget.spend(static_cast<size_t>(a[0].i) * sizeof(Value));
  Value out = Value::new_list();
  for (int64_t i = 0; i < a[0].i; ++i) out.list->push_back(Value::integer(i));
  return out;
}

}  // namespace

bool Value::truthy() const {
  switch (kind) {
    case kBool: return b;
    case kInt: return i != 0;
    case kFloat: return f != 0;
    case kString: return !s.empty();
    case kList: return !list->empty();
    case kDict: return !dict->empty();
    default: return false;
  }
}

std::string Value::text() const {
  switch (kind) {
    case kNone: return "None";
    case kBool: return b ? "True" : "False";
    case kInt: return std::to_string(i);
    case kFloat: return nlohmann::json(f).dump();  // the shortest form that reads back, as Python's repr
    case kString: return s;
    case kList:
    case kDict: return repr(*this);
    default: return "";
  }
}

Value Scope::get(const std::string& name) const {
  for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
    auto f = it->find(name);
    if (f != it->end()) return f->second;
  }
  return Value();
}

Value from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > 64) fail("data nested deeper than 64 levels");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      if (j.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(j.get<int64_t>());
      [[fallthrough]];
    case nlohmann::ordered_json::value_t::number_float: {
      Value v;
      v.kind = Value::kFloat;
      v.f = j.get<double>();
      return v;
    }
    case nlohmann::ordered_json::value_t::string: return Value::str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Value v = Value::new_list();
      for (const auto& x : j) v.list->push_back(from_json(x, depth + 1));
      return v;
    }
    case nlohmann::ordered_json::value_t::object: {
      Value v = Value::new_dict();
      for (auto it = j.begin(); it != j.end(); ++it) (*v.dict)[it.key()] = from_json(it.value(), depth + 1);
      return v;
    }
    default: return Value();
  }
}

std::vector<Value> elements(const Value& v, const char* doing) {
  std::vector<Value> out;
  if (v.kind == Value::kList) out = *v.list;
  else if (v.kind == Value::kString) for (char c : v.s) out.push_back(Value::str(std::string(1, c)));
  else if (v.kind == Value::kDict) for (const auto& kv : *v.dict) out.push_back(Value::str(kv.first));
  else if (v.kind != Value::kUndefined && v.kind != Value::kNone)
    throw ServeError(Status::kInput, std::string("the chat template ") + doing + " " + v.text() + ", which is not a sequence");
  return out;
}

namespace {

// How deep `v` nests (1 for a list of scalars), each list and dict once; `seen` holds those
// walked (-1 while being walked: one met again then holds itself).
int nesting(const Value& v, const void* inside, Budget& budget, std::map<const void*, int>& seen) {
  const void* key = v.kind == Value::kList ? static_cast<const void*>(v.list.get()) : v.kind == Value::kDict ? static_cast<const void*>(v.dict.get()) : nullptr;
  if (!key) return 0;
  if (key == inside) fail("a namespace set to a value that holds the namespace itself");
  auto [it, fresh] = seen.emplace(key, -1);
  if (!fresh) {
    if (it->second < 0) fail("a value that holds itself");
    return it->second;
  }
  budget.step();
  int deepest = 0;
  if (v.kind == Value::kList)
    for (const Value& x : *v.list) deepest = std::max(deepest, nesting(x, inside, budget, seen));
  else
    for (const auto& kv : *v.dict) deepest = std::max(deepest, nesting(kv.second, inside, budget, seen));
  if (deepest + 1 > Budget::kMaxValueDepth) fail("a value nested deeper than " + std::to_string(Budget::kMaxValueDepth) + " levels");
  return seen[key] = deepest + 1;
}

}  // namespace

void check_nesting(const Value& v, const void* inside, Budget& budget) {
  std::map<const void*, int> seen;
  nesting(v, inside, budget, seen);
}

void Budget::step(int64_t n) {
  steps -= n;
  if (steps < 0) fail("more than " + std::to_string(kSteps) + " steps (loop iterations, macro calls, filters and methods)");
  if ((steps & 1023) < n && std::chrono::steady_clock::now() > deadline) fail("its rendering passed the request's deadline");
}

void Budget::spend(size_t n) {
  if (n > static_cast<size_t>(bytes)) fail("builds more than " + std::to_string(kBytes >> 20) + " MiB of values");
  bytes -= static_cast<int64_t>(n);
}

void Budget::grow(size_t n) {
  if (n > kMaxString) fail("builds a string of more than " + std::to_string(kMaxString) + " bytes");
  spend(n);
}

std::string to_json_text(const Value& v, int indent) {
  std::string out;
  write_json(v, indent, 0, out);
  return out;
}

namespace {

// What building `v` took: a string's bytes; a list's or dict's items and the strings they copied.
void charge(const Value& v, Budget& budget) {
  if (v.kind == Value::kString) return budget.grow(v.s.size());
  size_t bytes = 0;
  if (v.kind == Value::kList)
    for (const Value& x : *v.list) bytes += sizeof(Value) + x.s.size();
  if (v.kind == Value::kDict)
    for (const auto& kv : *v.dict) bytes += sizeof(Value) + kv.first.size() + kv.second.s.size();
  budget.spend(bytes);
}

Value eval_inside(const Expr& e, Scope& scope) {
  auto arg = [&](size_t k) { return eval(*e.args[k], scope); };
  auto rest = [&](size_t from) {
    Args a;
    a.budget = &scope.budget;
    for (size_t k = from; k < e.args.size(); ++k) {
      if (k < e.kw.size() && !e.kw[k].empty()) a.kw[e.kw[k]] = arg(k);
      else a.pos.push_back(arg(k));
    }
    return a;
  };
  Budget& budget = scope.budget;
  switch (e.op) {
    case Expr::kLit: return e.lit;
    case Expr::kVar: return scope.get(e.name);
    case Expr::kList: {
      Value out = Value::new_list();
      *out.list = rest(0).pos;
      charge(out, budget);
      return out;
    }
    case Expr::kDict: {
      Value out = Value::new_dict();
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = arg(k);
        if (key.kind != Value::kString) fail("a dict key that is not a string: " + key.text());
        (*out.dict)[key.s] = arg(k + 1);
      }
      charge(out, budget);
      return out;
    }
    case Expr::kAttr: return index(arg(0), Value::str(e.name));
    case Expr::kIndex: return index(arg(0), arg(1));
    case Expr::kSlice: {
      Value out = slice(arg(0), arg(1), arg(2), e.args.size() > 3 ? arg(3) : Value());
      charge(out, budget);
      return out;
    }
    case Expr::kCall: {
      Args a = rest(0);
      if (is_function(e.name)) return call(e.name, a, budget);
      if (!scope.macro) fail("a call of " + e.name + "() outside its template");
      budget.step();
      return scope.macro(e.name, a.pos, a.kw);
    }
    case Expr::kMethod:
    case Expr::kFilter: {
      Value self = arg(0);
      const Args a = rest(1);
      budget.step();
      Value out = e.op == Expr::kMethod ? method(e.name, self, a) : filter(e.name, self, a);
      charge(out, budget);
      return out;
    }
    case Expr::kTest: return Value::boolean(test(e.name, arg(0)) != e.negate);
    case Expr::kNot: return Value::boolean(!arg(0).truthy());
    case Expr::kNeg: return arithmetic("-", Value::integer(0), arg(0), budget);
    case Expr::kAnd: {
      Value a = arg(0);
      return a.truthy() ? arg(1) : a;
    }
    case Expr::kOr: {
      Value a = arg(0);
      return a.truthy() ? a : arg(1);
    }
    case Expr::kIf: return arg(0).truthy() ? arg(1) : e.args.size() > 2 ? arg(2) : Value();
    case Expr::kBin: return binary(e.name, arg(0), arg(1), budget);
  }
  return Value();
}

}  // namespace

Value eval(const Expr& e, Scope& scope) {
  Budget& budget = scope.budget;
  if (++budget.depth > Budget::kMaxDepth) fail("expressions and macro calls nested deeper than " + std::to_string(Budget::kMaxDepth));
  Value v = eval_inside(e, scope);
  --budget.depth;
  return v;
}

}  // namespace loom::serve::llm::tmpl

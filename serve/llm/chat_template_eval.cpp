// chat_template_eval.cpp — evaluating a chat template's expressions (chat_template_expr.hpp) as
// Jinja does: Python's truthiness, str() and comparisons for the values templates hold.
#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "../kserve_json.hpp"
#include "../status.hpp"
#include "chat_template_expr.hpp"

namespace loom::serve::llm::tmpl {

namespace {

constexpr int64_t kMaxRange = 100000;

[[noreturn]] void fail(const std::string& why) { throw ServeError(Status::kInput, "the chat template: " + why); }

nlohmann::json to_json(const Value& v) {
  switch (v.kind) {
    case Value::kBool: return v.b;
    case Value::kInt: return v.i;
    case Value::kString: return v.s;
    case Value::kList: {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& x : *v.list) a.push_back(to_json(x));
      return a;
    }
    case Value::kDict: {
      nlohmann::json o = nlohmann::json::object();
      for (const auto& kv : *v.dict) o[kv.first] = to_json(kv.second);
      return o;
    }
    default: return nullptr;
  }
}

int64_t length(const Value& v) {
  if (v.kind == Value::kString) return static_cast<int64_t>(v.s.size());
  if (v.kind == Value::kList) return static_cast<int64_t>(v.list->size());
  if (v.kind == Value::kDict) return static_cast<int64_t>(v.dict->size());
  fail("length of a value that has none");
}

bool equal(const Value& a, const Value& b) {
  if (a.kind == Value::kInt && b.kind == Value::kBool) return a.i == (b.b ? 1 : 0);
  if (a.kind == Value::kBool && b.kind == Value::kInt) return b.i == (a.b ? 1 : 0);
  if (a.kind != b.kind) return (a.kind == Value::kUndefined || a.kind == Value::kNone) && (b.kind == Value::kUndefined || b.kind == Value::kNone) && a.kind == b.kind;
  switch (a.kind) {
    case Value::kBool: return a.b == b.b;
    case Value::kInt: return a.i == b.i;
    case Value::kString: return a.s == b.s;
    case Value::kList: return to_json(a) == to_json(b);
    case Value::kDict: return to_json(a) == to_json(b);
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

Value slice(const Value& obj, const Value& lo, const Value& hi) {
  if (obj.kind != Value::kList && obj.kind != Value::kString) fail("a slice of a value that is not a list or string");
  const int64_t n = length(obj);
  auto at = [n](const Value& v, int64_t dflt) {
    if (v.kind != Value::kInt) return dflt;
    const int64_t i = v.i < 0 ? v.i + n : v.i;
    return std::max<int64_t>(0, std::min(n, i));
  };
  const int64_t a = at(lo, 0), b = std::max(a, at(hi, n));
  if (obj.kind == Value::kString) return Value::str(obj.s.substr(static_cast<size_t>(a), static_cast<size_t>(b - a)));
  Value out = Value::new_list();
  out.list->assign(obj.list->begin() + a, obj.list->begin() + b);
  return out;
}

std::string strip(const std::string& s, bool left, bool right) {
  size_t b = 0, e = s.size();
  while (left && b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (right && e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

Value method(const std::string& name, const Value& self, const std::vector<Value>& a) {
  if (self.kind != Value::kString) fail("." + name + "() of a value that is not a string");
  if (name == "strip" || name == "lstrip" || name == "rstrip") return Value::str(strip(self.s, name != "rstrip", name != "lstrip"));
  if (name == "upper" || name == "lower") {
    std::string s = self.s;
    for (char& c : s) c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
    return Value::str(s);
  }
  if (a.empty() || a[0].kind != Value::kString) fail("." + name + "() takes a string");
  const std::string& x = a[0].s;
  if (name == "startswith") return Value::boolean(self.s.compare(0, x.size(), x) == 0);
  return Value::boolean(self.s.size() >= x.size() && self.s.compare(self.s.size() - x.size(), x.size(), x) == 0);
}

Value filter(const std::string& name, const Value& v, const std::vector<Value>& a) {
  if (name == "trim") return Value::str(strip(v.text(), true, true));
  if (name == "upper" || name == "lower") return method(name, Value::str(v.text()), a);
  if (name == "length" || name == "count") return Value::integer(length(v));
  if (name == "default") return v.kind == Value::kUndefined ? (a.empty() ? Value::str("") : a[0]) : v;
  if (name == "first" || name == "last") {
    const int64_t n = length(v);
    return n == 0 ? Value() : index(v, Value::integer(name == "first" ? 0 : n - 1));
  }
  if (name == "tojson") return Value::str(dump_json(to_json(v)));
  return Value::str(v.text());  // string
}

bool test(const std::string& name, const Value& v) {
  if (name == "defined") return v.kind != Value::kUndefined;
  if (name == "undefined") return v.kind == Value::kUndefined;
  if (name == "none") return v.kind == Value::kNone;
  if (name == "string") return v.kind == Value::kString;
  if (name == "number") return v.kind == Value::kInt;
  if (name == "mapping") return v.kind == Value::kDict;
  return v.kind == Value::kList || v.kind == Value::kString || v.kind == Value::kDict;  // sequence, iterable
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::str(a.text() + b.text());
  if (op == "+" && a.kind == Value::kString && b.kind == Value::kString) return Value::str(a.s + b.s);
  if (op == "+" && a.kind == Value::kList && b.kind == Value::kList) {
    Value out = Value::new_list();
    *out.list = *a.list;
    out.list->insert(out.list->end(), b.list->begin(), b.list->end());
    return out;
  }
  if (a.kind != Value::kInt || b.kind != Value::kInt) fail("'" + op + "' between " + a.text() + " and " + b.text());
  if ((op == "/" || op == "//" || op == "%") && b.i == 0) fail("a division by zero");
  if (op == "+") return Value::integer(a.i + b.i);
  if (op == "-") return Value::integer(a.i - b.i);
  if (op == "*") return Value::integer(a.i * b.i);
  if (op == "%") return Value::integer(((a.i % b.i) + b.i) % b.i);  // Python's sign
  return Value::integer(a.i / b.i);  // / and // on whole numbers
}

Value binary(const std::string& op, const Value& a, const Value& b) {
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
  return arithmetic(op, a, b);
}

Value call(const std::string& name, const std::vector<Value>& a) {
  if (name == "raise_exception") throw ServeError(Status::kInput, a.empty() ? "the chat template refused the conversation" : a[0].text());
  if (a.empty() || a[0].kind != Value::kInt || a[0].i < 0 || a[0].i > kMaxRange) fail("range() takes a whole number up to 100000");
  Value out = Value::new_list();
  for (int64_t i = 0; i < a[0].i; ++i) out.list->push_back(Value::integer(i));
  return out;
}

}  // namespace

bool Value::truthy() const {
  switch (kind) {
    case kBool: return b;
    case kInt: return i != 0;
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
    case kString: return s;
    case kList:
    case kDict: return dump_json(to_json(*this));
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

Value eval(const Expr& e, Scope& scope) {
  auto arg = [&](size_t k) { return eval(*e.args[k], scope); };
  auto rest = [&](size_t from) {
    std::vector<Value> a;
    for (size_t k = from; k < e.args.size(); ++k) a.push_back(arg(k));
    return a;
  };
  switch (e.op) {
    case Expr::kLit: return e.lit;
    case Expr::kVar: return scope.get(e.name);
    case Expr::kList: {
      Value out = Value::new_list();
      *out.list = rest(0);
      return out;
    }
    case Expr::kAttr: return index(arg(0), Value::str(e.name));
    case Expr::kIndex: return index(arg(0), arg(1));
    case Expr::kSlice: return slice(arg(0), arg(1), arg(2));
    case Expr::kCall: return call(e.name, rest(0));
    case Expr::kMethod: return method(e.name, arg(0), rest(1));
    case Expr::kFilter: return filter(e.name, arg(0), rest(1));
    case Expr::kTest: return Value::boolean(test(e.name, arg(0)) != e.negate);
    case Expr::kNot: return Value::boolean(!arg(0).truthy());
    case Expr::kNeg: return arithmetic("-", Value::integer(0), arg(0));
    case Expr::kAnd: {
      Value a = arg(0);
      return a.truthy() ? arg(1) : a;
    }
    case Expr::kOr: {
      Value a = arg(0);
      return a.truthy() ? a : arg(1);
    }
    case Expr::kIf: return arg(0).truthy() ? arg(1) : e.args.size() > 2 ? arg(2) : Value();
    case Expr::kBin: return binary(e.name, arg(0), arg(1));
  }
  return Value();
}

}  // namespace loom::serve::llm::tmpl

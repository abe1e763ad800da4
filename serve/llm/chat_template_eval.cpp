// chat_template_eval.cpp — evaluating a chat template's expressions (chat_template_expr.hpp) as
// Jinja does: Python's truthiness, str() and comparisons for the values templates hold. The
// filters, tests and methods it calls are in chat_template_filters.cpp.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "../kserve_json.hpp"
#include "../status.hpp"
#include "chat_template_expr.hpp"

namespace loom::serve::llm::tmpl {

[[noreturn]] void fail(const std::string& why) { throw ServeError(Status::kInput, "the chat template: " + why); }

namespace {

constexpr int64_t kMaxRange = 100000;

std::string json_string(const std::string& s) { return dump_json(nlohmann::json(s)); }

void write_json(const Value& v, int indent, int level, std::string& out) {
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

std::string repr(const Value& v) {
  if (v.kind == Value::kString) return py_repr(v.s);
  if (v.kind == Value::kList) {
    std::string out = "[";
    for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + repr((*v.list)[k]);
    return out + "]";
  }
  if (v.kind == Value::kDict) {
    std::string out = "{";
    bool first = true;
    for (const auto& kv : *v.dict) out += (first ? "" : ", ") + py_repr(kv.first) + ": " + repr(kv.second), first = false;
    return out + "}";
  }
  return v.kind == Value::kUndefined ? "Undefined" : v.text();
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
  for (int64_t i = a; st > 0 ? i < b : i > b; i += st) {
    if (obj.kind == Value::kString) out.s += obj.s[static_cast<size_t>(i)];
    else out.list->push_back((*obj.list)[static_cast<size_t>(i)]);
  }
  return out;
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

Value call(const std::string& name, const Args& args) {
  const std::vector<Value>& a = args.pos;
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

std::string to_json_text(const Value& v, int indent) {
  std::string out;
  write_json(v, indent, 0, out);
  return out;
}

Value eval(const Expr& e, Scope& scope) {
  auto arg = [&](size_t k) { return eval(*e.args[k], scope); };
  auto rest = [&](size_t from) {
    Args a;
    for (size_t k = from; k < e.args.size(); ++k) {
      if (k < e.kw.size() && !e.kw[k].empty()) a.kw[e.kw[k]] = arg(k);
      else a.pos.push_back(arg(k));
    }
    return a;
  };
  switch (e.op) {
    case Expr::kLit: return e.lit;
    case Expr::kVar: return scope.get(e.name);
    case Expr::kList: {
      Value out = Value::new_list();
      *out.list = rest(0).pos;
      return out;
    }
    case Expr::kDict: {
      Value out = Value::new_dict();
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = arg(k);
        if (key.kind != Value::kString) fail("a dict key that is not a string: " + key.text());
        (*out.dict)[key.s] = arg(k + 1);
      }
      return out;
    }
    case Expr::kAttr: return index(arg(0), Value::str(e.name));
    case Expr::kIndex: return index(arg(0), arg(1));
    case Expr::kSlice: return slice(arg(0), arg(1), arg(2), e.args.size() > 3 ? arg(3) : Value());
    case Expr::kCall: {
      Args a = rest(0);
      if (is_function(e.name)) return call(e.name, a);
      if (!scope.macro) fail("a call of " + e.name + "() outside its template");
      return scope.macro(e.name, a.pos, a.kw);
    }
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

// chat_template_filters.cpp — the filters (`x | trim`), tests (`x is defined`) and string and
// dict methods (`s.strip()`, `d.items()`) a chat template may use, as Jinja and Python give them.
#include <algorithm>
#include <cctype>
#include <cstring>

#include "chat_template_expr.hpp"

namespace loom::serve::llm::tmpl {

namespace {

// Python's str.strip family: whitespace, or the characters of `chars` when given.
std::string strip(const std::string& s, bool left, bool right, const Value& chars = Value()) {
  auto gone = [&](char c) {
    return chars.kind == Value::kString ? chars.s.find(c) != std::string::npos : std::isspace(static_cast<unsigned char>(c)) != 0;
  };
  size_t b = 0, e = s.size();
  while (left && b < e && gone(s[b])) ++b;
  while (right && e > b && gone(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// upper, lower, capitalize and title. Python's str.title() starts a word after any character that
// is not a letter; Jinja's title filter only after spaces, '-' and opening brackets.
std::string recase(std::string s, const std::string& how, bool jinja_filter = false) {
  bool start = true;
  for (char& ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const bool up = how == "upper" || ((how == "title" || how == "capitalize") && start);
    ch = static_cast<char>(up ? std::toupper(c) : how == "upper" ? c : std::tolower(c));
    if (how == "title") start = jinja_filter ? std::isspace(c) || (c && std::strchr("-({[<", c)) : !std::isalpha(c);
    else start = false;
  }
  return s;
}

// Python's str.split: on runs of whitespace without a separator.
Value split(const std::string& s, const Value& sep, Budget& budget) {
  Value out = Value::new_list();
  budget.spend(s.size());  // the pieces' bytes; their count below
  if (sep.kind == Value::kString && sep.s.empty()) fail(".split() with an empty separator");
  if (sep.kind == Value::kString) {
    size_t b = 0;
    for (size_t k; (k = s.find(sep.s, b)) != std::string::npos; b = k + sep.s.size()) {
      budget.spend(sizeof(Value));
      out.list->push_back(Value::str(s.substr(b, k - b)));
    }
    out.list->push_back(Value::str(s.substr(b)));
    return out;
  }
  size_t k = 0;
  while (k < s.size()) {
    while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
    const size_t b = k;
    while (k < s.size() && !std::isspace(static_cast<unsigned char>(s[k]))) ++k;
    if (k > b) budget.spend(sizeof(Value)), out.list->push_back(Value::str(s.substr(b, k - b)));
  }
  return out;
}

std::string replace(const std::string& s, const Value& from, const Value& to) {
  if (from.kind != Value::kString || to.kind != Value::kString || from.s.empty()) fail("replace() takes two strings, the first not empty");
  std::string out;
  size_t b = 0;
  for (size_t k; (k = s.find(from.s, b)) != std::string::npos; b = k + from.s.size()) {
    out.append(s, b, k - b).append(to.s);
    if (out.size() > Budget::kMaxString) fail("replace() builds a string of more than " + std::to_string(Budget::kMaxString) + " bytes");
  }
  return out.append(s, b, std::string::npos);
}

// A dict's items as [key, value] lists, in its order (keys sorted: dicts here are std::map).
Value items(const Value& d) {
  Value out = Value::new_list();
  for (const auto& kv : *d.dict) {
    Value pair = Value::new_list();
    pair.list->push_back(Value::str(kv.first));
    pair.list->push_back(kv.second);
    out.list->push_back(pair);
  }
  return out;
}

Value dict_method(const std::string& name, const Value& self, const Args& a) {
  if (name == "items") return items(self);
  if (name == "get") {
    const Value v = index(self, a.get(0, "key"));
    return v.kind == Value::kUndefined ? (a.pos.size() > 1 ? a.pos[1] : Value::none()) : v;
  }
  if (name != "keys" && name != "values") fail("." + name + "() of a mapping");
  Value out = Value::new_list();
  for (const auto& kv : *self.dict) out.list->push_back(name == "keys" ? Value::str(kv.first) : kv.second);
  return out;
}

Value from(std::vector<Value> items) {
  Value out = Value::new_list();
  *out.list = std::move(items);
  return out;
}

}  // namespace

Value method(const std::string& name, const Value& self, const Args& a) {
  if (self.kind == Value::kDict) return dict_method(name, self, a);
  if (self.kind != Value::kString) fail("." + name + "() of a value that is not a string");
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return Value::str(strip(self.s, name != "rstrip", name != "lstrip", a.get(0, "chars")));
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") return Value::str(recase(self.s, name));
  if (name == "split") return split(self.s, a.get(0, "sep"), *a.budget);
  if (name == "replace") return Value::str(replace(self.s, a.get(0, "old"), a.get(1, "new")));
  if (name != "startswith" && name != "endswith") fail("." + name + "() of a string");
  if (a.pos.empty() || a.pos[0].kind != Value::kString) fail("." + name + "() takes a string");
  const std::string& x = a.pos[0].s;
  if (name == "startswith") return Value::boolean(self.s.compare(0, x.size(), x) == 0);
  return Value::boolean(self.s.size() >= x.size() && self.s.compare(self.s.size() - x.size(), x.size(), x) == 0);
}

bool test(const std::string& name, const Value& v, const Value& arg) {
  if (name == "defined") return v.kind != Value::kUndefined;
  if (name == "undefined") return v.kind == Value::kUndefined;
  if (name == "none") return v.kind == Value::kNone;
  if (name == "string") return v.kind == Value::kString;
  if (name == "number") return v.kind == Value::kInt || v.kind == Value::kFloat;
  if (name == "integer") return v.kind == Value::kInt;
  if (name == "boolean") return v.kind == Value::kBool;
  if (name == "true" || name == "false") return v.kind == Value::kBool && v.b == (name == "true");
  if (name == "mapping") return v.kind == Value::kDict;
  if (name == "equalto" || name == "eq" || name == "==") return equal(v, arg);
  if (name == "ne" || name == "!=") return !equal(v, arg);
  return v.kind == Value::kList || v.kind == Value::kString || v.kind == Value::kDict;  // sequence, iterable
}

namespace {

// select, reject, selectattr, rejectattr: the items (or their attribute) that pass the test.
Value choose(const std::string& name, const Value& v, const Args& a) {
  const bool attr = name == "selectattr" || name == "rejectattr", keep = name == "select" || name == "selectattr";
  const size_t t = attr ? 1 : 0;
  const Value test_name = a.get(t, "test");
  if (test_name.kind != Value::kUndefined && (test_name.kind != Value::kString || !is_test(test_name.s)))
    fail(name + "() with the test " + test_name.text() + ", which loom-serve does not render");
  std::vector<Value> out;
  for (const Value& x : elements(v, "filters")) {
    const Value subject = attr ? index(x, a.get(0, "attribute")) : x;
    const bool pass = test_name.kind == Value::kUndefined ? subject.truthy() : test(test_name.s, subject, a.get(t + 1, "value"));
    if (pass == keep) out.push_back(x);
  }
  return from(std::move(out));
}

}  // namespace

Value filter(const std::string& name, const Value& v, const Args& a) {
  if (name == "trim") return Value::str(strip(v.text(), true, true, a.get(0, "chars")));
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") return Value::str(recase(v.text(), name, true));
  if (name == "length" || name == "count") return Value::integer(length(v));
  if (name == "default" || name == "d") {
    const bool use = v.kind == Value::kUndefined || (a.get(1, "boolean").truthy() && !v.truthy());
    return use ? (a.pos.empty() ? Value::str("") : a.pos[0]) : v;
  }
  if (name == "first" || name == "last") {
    const int64_t n = length(v);
    return n == 0 ? Value() : index(v, Value::integer(name == "first" ? 0 : n - 1));
  }
  if (name == "tojson") {
    const Value indent = a.get(0, "indent");
    return Value::str(to_json_text(v, indent.kind == Value::kInt ? static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(indent.i, 16))) : -1));
  }
  if (name == "int") {
    if (v.kind == Value::kInt) return v;
    if (v.kind == Value::kBool) return Value::integer(v.b);
    try { return Value::integer(std::stoll(strip(v.text(), true, true))); } catch (...) { return Value::integer(0); }
  }
  if (name == "join") {
    std::string out;
    const std::vector<Value> xs = elements(v, "filters");
    const std::string sep = a.get(0, "d").text();
    for (size_t k = 0; k < xs.size(); ++k) {
      out += (k ? sep : "") + xs[k].text();
      if (out.size() > Budget::kMaxString) fail("join() builds a string of more than " + std::to_string(Budget::kMaxString) + " bytes");
    }
    return Value::str(out);
  }
  if (name == "list") return from(elements(v, "filters"));
  if (name == "items") return v.kind == Value::kDict ? items(v) : v.kind == Value::kUndefined ? Value::new_list() : (fail("items of a value that is not a mapping"), v);
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") return choose(name, v, a);
  if (name == "map") {
    std::vector<Value> out;
    const Value attr = a.get(99, "attribute"), f = a.pos.empty() ? Value() : a.pos[0];
    if (attr.kind == Value::kUndefined && (f.kind != Value::kString || !is_filter(f.s) || f.s == "map")) fail("map() takes attribute= or a filter's name");
    Args rest;
    rest.budget = a.budget;
    rest.pos.assign(a.pos.begin() + (a.pos.empty() ? 0 : 1), a.pos.end());
    for (const Value& x : elements(v, "filters")) out.push_back(attr.kind != Value::kUndefined ? index(x, attr) : filter(f.s, x, rest));
    return from(std::move(out));
  }
  if (name == "replace") return Value::str(replace(v.text(), a.get(0, "old"), a.get(1, "new")));
  return Value::str(v.text());  // string, safe
}

}  // namespace loom::serve::llm::tmpl

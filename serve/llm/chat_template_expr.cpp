// chat_template_expr.cpp — a chat template's expressions (chat_template_expr.hpp): tokens, a
// recursive-descent parser with Jinja's precedence, and evaluation.
#include "chat_template_expr.hpp"

#include <algorithm>
#include <cctype>

#include "loom/rt/error.hpp"

namespace loom::serve::llm::tmpl {

namespace {

constexpr int kMaxDepth = 64;       // nesting of one expression: brackets, calls, unary operators
constexpr int kMaxHeight = 128;     // operators on operators (`a ~ b ~ c`, `x.a.b`): evaluated and freed recursively

[[noreturn]] void unsupported(const std::string& what) { throw rt::Error("the chat template uses " + what + ", which loom-serve does not render"); }

struct Tok {
  enum Kind { kEnd, kName, kString, kInt, kOp } kind = kEnd;
  std::string s;
  int64_t i = 0;
};

Tok lex(const std::string& t, size_t& p) {
  while (p < t.size() && std::isspace(static_cast<unsigned char>(t[p]))) ++p;
  Tok k;
  if (p >= t.size()) return k;
  const char c = t[p];
  if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
    const size_t b = p;
    while (p < t.size() && (std::isalnum(static_cast<unsigned char>(t[p])) || t[p] == '_')) ++p;
    return {Tok::kName, t.substr(b, p - b)};
  }
  if (std::isdigit(static_cast<unsigned char>(c))) {
    const size_t b = p;
    while (p < t.size() && std::isdigit(static_cast<unsigned char>(t[p]))) ++p;
    if (p - b > 18) unsupported("a number past 18 digits");
    return {Tok::kInt, "", std::stoll(t.substr(b, p - b))};
  }
  if (c == '\'' || c == '"') {
    std::string s;
    for (++p; p < t.size() && t[p] != c; ++p) {
      if (t[p] != '\\' || p + 1 >= t.size()) {
        s += t[p];
        continue;
      }
      const char e = t[++p];
      s += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
    }
    if (p >= t.size()) unsupported("a string without its closing quote");
    ++p;
    return {Tok::kString, s};
  }
  for (const char* op : {"==", "!=", "<=", ">=", "//"})
    if (t.compare(p, 2, op) == 0) return p += 2, Tok{Tok::kOp, op};
  if (std::string("+-*/%~<>()[]{}.,:|=").find(c) != std::string::npos) return ++p, Tok{Tok::kOp, std::string(1, c)};
  unsupported(std::string("the character '") + c + "'");
}

}  // namespace

namespace {

bool named(const std::string& name, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* k) { return name == k; });
}

class Parser {
 public:
  Parser(const std::string& t, size_t& p, const std::set<std::string>* macros) : t_(t), p_(p), macros_(macros) { peek_ = lex(t_, p_); }
  ExprPtr expr();

 private:
  const std::string& t_;
  size_t& p_;
  const std::set<std::string>* macros_;
  Tok peek_;
  size_t before_ = 0;  // where peek_ began, to give it back
  int depth_ = 0;

  // Counts one level of the parser's recursion for as long as it lives.
  struct Deeper {
    explicit Deeper(int& d) : d_(d) {
      if (++d_ > kMaxDepth) unsupported("expressions nested deeper than 64");
    }
    ~Deeper() { --d_; }
    int& d_;
  };

  Tok take() {
    Tok k = peek_;
    before_ = p_;
    peek_ = lex(t_, p_);
    return k;
  }
  bool is(const char* s) const { return (peek_.kind == Tok::kOp || peek_.kind == Tok::kName) && peek_.s == s; }
  void expect(const char* s) {
    if (!is(s)) unsupported("'" + peek_.s + "' where '" + s + "' belongs");
    take();
  }
  static ExprPtr node(Expr::Op op, std::string name = "") {
    auto e = std::make_unique<Expr>();
    e->op = op, e->name = std::move(name);
    return e;
  }
  static ExprPtr bin(Expr::Op op, std::string name, ExprPtr a, ExprPtr b) {
    ExprPtr e = node(op, std::move(name));
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return built(std::move(e));
  }
  // `e` with its arguments in place: its height checked, so that no expression is deeper than
  // evaluation and freeing can recurse.
  static ExprPtr built(ExprPtr e) {
    for (const auto& a : e->args) e->height = std::max(e->height, a->height + 1);
    if (e->height > kMaxHeight) throw rt::Error("the chat template has an expression of more than " + std::to_string(kMaxHeight) + " operators in a chain");
    return e;
  }
  ExprPtr or_expr();
  ExprPtr and_expr();
  ExprPtr not_expr();
  ExprPtr compare();
  ExprPtr additive();
  ExprPtr concat();
  ExprPtr term();
  ExprPtr unary();
  ExprPtr postfix(ExprPtr e);
  ExprPtr primary();
  void call_args(Expr& into);

 public:
  void give_back() { p_ = peek_.kind == Tok::kEnd ? p_ : before_; }
};

ExprPtr Parser::expr() {
  Deeper d(depth_);
  ExprPtr e = or_expr();
  if (is("if")) {
    take();
    ExprPtr c = node(Expr::kIf);
    c->args.push_back(or_expr());
    c->args.push_back(std::move(e));
    if (is("else")) take(), c->args.push_back(expr());
    e = built(std::move(c));
  }
  return e;
}

ExprPtr Parser::or_expr() {
  ExprPtr e = and_expr();
  while (is("or")) take(), e = bin(Expr::kOr, "or", std::move(e), and_expr());
  return e;
}

ExprPtr Parser::and_expr() {
  ExprPtr e = not_expr();
  while (is("and")) take(), e = bin(Expr::kAnd, "and", std::move(e), not_expr());
  return e;
}

ExprPtr Parser::not_expr() {
  if (!is("not")) return compare();
  Deeper d(depth_);
  take();
  ExprPtr e = node(Expr::kNot);
  e->args.push_back(not_expr());
  return built(std::move(e));
}

ExprPtr Parser::compare() {
  ExprPtr e = additive();
  for (;;) {
    if (is("==") || is("!=") || is("<") || is(">") || is("<=") || is(">=") || is("in")) {
      const std::string op = take().s;
      e = bin(Expr::kBin, op, std::move(e), additive());
    } else if (is("not")) {
      take();
      expect("in");
      ExprPtr n = node(Expr::kNot);
      n->args.push_back(bin(Expr::kBin, "in", std::move(e), additive()));
      e = built(std::move(n));
    } else if (is("is")) {
      take();
      ExprPtr test = node(Expr::kTest);
      if (is("not")) take(), test->negate = true;
      if (peek_.kind != Tok::kName) unsupported("'is' without a test name");
      test->name = take().s;
      if (!is_test(test->name)) unsupported("the test '" + test->name + "'");
      test->args.push_back(std::move(e));
      e = built(std::move(test));
    } else {
      return e;
    }
  }
}

ExprPtr Parser::additive() {
  ExprPtr e = concat();
  while (is("+") || is("-")) {
    const std::string op = take().s;
    e = bin(Expr::kBin, op, std::move(e), concat());
  }
  return e;
}

ExprPtr Parser::concat() {
  ExprPtr e = term();
  while (is("~")) take(), e = bin(Expr::kBin, "~", std::move(e), term());
  return e;
}

ExprPtr Parser::term() {
  ExprPtr e = unary();
  while (is("*") || is("/") || is("//") || is("%")) {
    const std::string op = take().s;
    e = bin(Expr::kBin, op, std::move(e), unary());
  }
  return e;
}

ExprPtr Parser::unary() {
  if (!is("-")) return postfix(primary());
  Deeper d(depth_);
  take();
  ExprPtr e = node(Expr::kNeg);
  e->args.push_back(unary());
  return built(std::move(e));
}

// `(a, b, key=c)` into `into`'s arguments, after those it holds.
void Parser::call_args(Expr& into) {
  into.kw.resize(into.args.size());
  expect("(");
  while (!is(")")) {
    if (peek_.kind == Tok::kEnd) unsupported("a call without its ')'");
    size_t after = p_;
    while (after < t_.size() && std::isspace(static_cast<unsigned char>(t_[after]))) ++after;
    std::string key;
    if (peek_.kind == Tok::kName && after < t_.size() && t_[after] == '=' && t_.compare(after, 2, "==") != 0) {
      key = take().s;
      take();  // =
    }
    into.args.push_back(expr());
    into.kw.push_back(key);
    if (!is(")")) expect(",");
  }
  take();
}



ExprPtr Parser::postfix(ExprPtr e) {
  for (;;) {
    if (is(".")) {
      take();
      if (peek_.kind != Tok::kName) unsupported("'.' without a name");
      const std::string name = take().s;
      if (is("(")) {
        if (!named(name, {"strip", "lstrip", "rstrip", "upper", "lower", "title", "capitalize", "startswith", "endswith",
                          "split", "replace", "items", "keys", "values", "get"}))
          unsupported("the method ." + name + "()");
        ExprPtr m = node(Expr::kMethod, name);
        m->args.push_back(std::move(e));
        call_args(*m);
        e = built(std::move(m));
      } else {
        ExprPtr a = node(Expr::kAttr, name);
        a->args.push_back(std::move(e));
        e = built(std::move(a));
      }
    } else if (is("[")) {
      take();
      ExprPtr lo = is(":") ? node(Expr::kLit) : expr();
      if (is(":")) {  // [lo:hi] or [lo:hi:step], each part optional
        take();
        ExprPtr s = node(Expr::kSlice);
        s->args.push_back(std::move(e));
        s->args.push_back(std::move(lo));
        s->args.push_back(is("]") || is(":") ? node(Expr::kLit) : expr());
        if (is(":")) take(), s->args.push_back(is("]") ? node(Expr::kLit) : expr());
        e = built(std::move(s));
      } else {
        e = bin(Expr::kIndex, "", std::move(e), std::move(lo));
      }
      expect("]");
    } else if (is("|")) {
      take();
      if (peek_.kind != Tok::kName) unsupported("'|' without a filter name");
      ExprPtr f = node(Expr::kFilter, take().s);
      if (!is_filter(f->name)) unsupported("the filter '" + f->name + "'");
      f->args.push_back(std::move(e));
      if (is("(")) call_args(*f);
      e = built(std::move(f));
    } else {
      return e;
    }
  }
}

ExprPtr Parser::primary() {
  Tok k = take();
  if (k.kind == Tok::kString || k.kind == Tok::kInt) {
    ExprPtr e = node(Expr::kLit);
    e->lit = k.kind == Tok::kString ? Value::str(k.s) : Value::integer(k.i);
    return e;
  }
  if (k.kind == Tok::kOp && k.s == "(") {
    ExprPtr e = expr();
    expect(")");
    return e;
  }
  if (k.kind == Tok::kOp && k.s == "[") {
    ExprPtr e = node(Expr::kList);
    while (!is("]")) {
      if (peek_.kind == Tok::kEnd) unsupported("a list without its ']'");
      e->args.push_back(expr());
      if (!is("]")) expect(",");
    }
    take();
    return built(std::move(e));
  }
  if (k.kind == Tok::kOp && k.s == "{") {  // a dict: keys and values in turn
    ExprPtr e = node(Expr::kDict);
    while (!is("}")) {
      if (peek_.kind == Tok::kEnd) unsupported("a dict without its '}'");
      e->args.push_back(expr());
      expect(":");
      e->args.push_back(expr());
      if (!is("}")) expect(",");
    }
    take();
    return built(std::move(e));
  }
  if (k.kind != Tok::kName) unsupported(k.kind == Tok::kEnd ? std::string("an expression that ends early") : "'" + k.s + "' where a value belongs");
  ExprPtr e = node(Expr::kLit);
  if (k.s == "true" || k.s == "True") e->lit = Value::boolean(true);
  else if (k.s == "false" || k.s == "False") e->lit = Value::boolean(false);
  else if (k.s == "none" || k.s == "None") e->lit = Value::none();
  else if (is("(")) {
    if (!is_function(k.s) && !(macros_ && macros_->count(k.s))) unsupported("the function " + k.s + "()");
    e = node(Expr::kCall, k.s);
    call_args(*e);
    e = built(std::move(e));
  } else {
    e = node(Expr::kVar, k.s);
  }
  return e;
}

}  // namespace

bool is_function(const std::string& name) { return named(name, {"raise_exception", "range", "namespace", "strftime_now"}); }

bool is_filter(const std::string& name) {
  return named(name, {"trim", "upper", "lower", "title", "capitalize", "length", "count", "default", "d", "first", "last",
                      "tojson", "string", "safe", "int", "join", "list", "items", "select", "reject", "selectattr",
                      "rejectattr", "map", "replace"});
}

bool is_test(const std::string& name) {
  return named(name, {"defined", "undefined", "none", "string", "number", "integer", "boolean", "true", "false", "mapping",
                      "sequence", "iterable", "equalto", "eq", "==", "ne", "!="});
}

ExprPtr parse_expr(const std::string& text, size_t& pos, const std::set<std::string>* macros) {
  Parser p(text, pos, macros);
  ExprPtr e = p.expr();
  p.give_back();
  return e;
}

std::string next_word(const std::string& text, size_t& pos) {
  const Tok k = lex(text, pos);
  return k.kind == Tok::kEnd ? "" : k.kind == Tok::kInt ? std::to_string(k.i) : k.s;
}

}  // namespace loom::serve::llm::tmpl

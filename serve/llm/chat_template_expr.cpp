// chat_template_expr.cpp — a chat template's expressions (chat_template_expr.hpp): tokens, a
// recursive-descent parser with Jinja's precedence, and evaluation.
#include "chat_template_expr.hpp"

#include <algorithm>
#include <cctype>

#include "loom/rt/error.hpp"

namespace loom::serve::llm::tmpl {

namespace {

constexpr int kMaxDepth = 64;       // nesting of one expression

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
  if (std::string("+-*/%~<>()[].,:|=").find(c) != std::string::npos) return ++p, Tok{Tok::kOp, std::string(1, c)};
  unsupported(std::string("the character '") + c + "'");
}

}  // namespace

namespace {

class Parser {
 public:
  Parser(const std::string& t, size_t& p) : t_(t), p_(p) { peek_ = lex(t_, p_); }
  ExprPtr expr();

 private:
  const std::string& t_;
  size_t& p_;
  Tok peek_;
  size_t before_ = 0;  // where peek_ began, to give it back
  int depth_ = 0;

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
  std::vector<ExprPtr> call_args();

 public:
  void give_back() { p_ = peek_.kind == Tok::kEnd ? p_ : before_; }
};

ExprPtr Parser::expr() {
  if (++depth_ > kMaxDepth) unsupported("expressions nested deeper than 64");
  ExprPtr e = or_expr();
  if (is("if")) {
    take();
    ExprPtr c = node(Expr::kIf);
    c->args.push_back(or_expr());
    c->args.push_back(std::move(e));
    if (is("else")) take(), c->args.push_back(expr());
    e = std::move(c);
  }
  --depth_;
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
  take();
  ExprPtr e = node(Expr::kNot);
  e->args.push_back(not_expr());
  return e;
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
      e = std::move(n);
    } else if (is("is")) {
      take();
      ExprPtr test = node(Expr::kTest);
      if (is("not")) take(), test->negate = true;
      if (peek_.kind != Tok::kName) unsupported("'is' without a test name");
      test->name = take().s;
      if (test->name != "defined" && test->name != "undefined" && test->name != "none" && test->name != "string" &&
          test->name != "number" && test->name != "mapping" && test->name != "sequence" && test->name != "iterable")
        unsupported("the test '" + test->name + "'");
      test->args.push_back(std::move(e));
      e = std::move(test);
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
  take();
  ExprPtr e = node(Expr::kNeg);
  e->args.push_back(unary());
  return e;
}

std::vector<ExprPtr> Parser::call_args() {
  std::vector<ExprPtr> args;
  expect("(");
  while (!is(")")) {
    if (peek_.kind == Tok::kEnd) unsupported("a call without its ')'");
    args.push_back(expr());
    if (!is(")")) expect(",");
  }
  take();
  return args;
}

ExprPtr Parser::postfix(ExprPtr e) {
  for (;;) {
    if (is(".")) {
      take();
      if (peek_.kind != Tok::kName) unsupported("'.' without a name");
      const std::string name = take().s;
      if (is("(")) {
        ExprPtr m = node(Expr::kMethod, name);
        m->args.push_back(std::move(e));
        for (auto& a : call_args()) m->args.push_back(std::move(a));
        static const char* kMethods[] = {"strip", "lstrip", "rstrip", "upper", "lower", "startswith", "endswith"};
        if (std::find_if(std::begin(kMethods), std::end(kMethods), [&](const char* k) { return name == k; }) == std::end(kMethods))
          unsupported("the method ." + name + "()");
        e = std::move(m);
      } else {
        ExprPtr a = node(Expr::kAttr, name);
        a->args.push_back(std::move(e));
        e = std::move(a);
      }
    } else if (is("[")) {
      take();
      ExprPtr lo = is(":") ? node(Expr::kLit) : expr();
      if (is(":")) {
        take();
        ExprPtr s = node(Expr::kSlice);
        s->args.push_back(std::move(e));
        s->args.push_back(std::move(lo));
        s->args.push_back(is("]") ? node(Expr::kLit) : expr());
        e = std::move(s);
      } else {
        e = bin(Expr::kIndex, "", std::move(e), std::move(lo));
      }
      expect("]");
    } else if (is("|")) {
      take();
      if (peek_.kind != Tok::kName) unsupported("'|' without a filter name");
      ExprPtr f = node(Expr::kFilter, take().s);
      static const char* kFilters[] = {"trim", "upper", "lower", "length", "count", "default", "first", "last", "tojson", "string"};
      if (std::find_if(std::begin(kFilters), std::end(kFilters), [&](const char* k) { return f->name == k; }) == std::end(kFilters))
        unsupported("the filter '" + f->name + "'");
      f->args.push_back(std::move(e));
      if (is("("))
        for (auto& a : call_args()) f->args.push_back(std::move(a));
      e = std::move(f);
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
    return e;
  }
  if (k.kind != Tok::kName) unsupported(k.kind == Tok::kEnd ? std::string("an expression that ends early") : "'" + k.s + "' where a value belongs");
  ExprPtr e = node(Expr::kLit);
  if (k.s == "true" || k.s == "True") e->lit = Value::boolean(true);
  else if (k.s == "false" || k.s == "False") e->lit = Value::boolean(false);
  else if (k.s == "none" || k.s == "None") e->lit = Value::none();
  else if (is("(")) {
    if (k.s != "raise_exception" && k.s != "range") unsupported("the function " + k.s + "()");
    e = node(Expr::kCall, k.s);
    e->args = call_args();
  } else {
    e = node(Expr::kVar, k.s);
  }
  return e;
}

}  // namespace

ExprPtr parse_expr(const std::string& text, size_t& pos) {
  Parser p(text, pos);
  ExprPtr e = p.expr();
  p.give_back();
  return e;
}

std::string next_word(const std::string& text, size_t& pos) {
  const Tok k = lex(text, pos);
  return k.kind == Tok::kEnd ? "" : k.kind == Tok::kInt ? std::to_string(k.i) : k.s;
}

}  // namespace loom::serve::llm::tmpl

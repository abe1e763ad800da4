// chat_template.cpp — a chat template's text and statements (chat_template.hpp): the source cut
// into text, {{ }}, {% %} and {# #} with Jinja's whitespace rules (trim_blocks, lstrip_blocks,
// '-'), parsed into a tree once, rendered per request.
#include "chat_template.hpp"

#include <algorithm>
#include <set>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "chat_template_expr.hpp"
#include "core/status.hpp"
#include "loom/rt/error.hpp"
#include "loom/rt/io/json.hpp"
#include "tokenizer.hpp"

namespace loom::serve::llm {

using tmpl::ExprPtr;
using tmpl::Scope;
using tmpl::Value;

using Body = std::vector<std::unique_ptr<ChatTemplate::Node>>;

struct ChatTemplate::Node {
  enum Kind { kText, kOut, kFor, kIf, kSet, kBreak, kContinue, kMacro } kind = kText;
  std::string text;  // kText: the text; kSet, kMacro: the name
  std::string attr;  // kSet: the namespace's attribute set (`set ns.attr = ...`), or empty
  std::vector<std::string> names;  // kFor: the loop variables (`for k, v in ...` unpacks each item); kMacro: its parameters
  std::vector<ExprPtr> defaults;   // kMacro: each parameter's default value (null: none)
  ExprPtr expr;      // kOut, kSet: the value; kFor: what it iterates
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: conditions (null: else) and bodies; kFor: body, else
};

namespace {

constexpr size_t kMaxTemplateBytes = 1 << 20;
constexpr int kMaxNesting = 32;

[[noreturn]] void bad(const std::string& why) { throw rt::Error("the chat template " + why); }

struct Seg {
  enum Kind { kText, kExpr, kStmt } kind;
  std::string s;
};

bool blank(char c) { return c == ' ' || c == '\t'; }
bool space(char c) { return blank(c) || c == '\n' || c == '\r'; }

// Where the tag opened at `q` (kind '{', '%' or '#') closes; quote-aware inside {{ }} and {% %}.
size_t close_of(const std::string& src, size_t q, char kind) {
  const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
  if (kind == '#') return src.find(close, q + 2);
  char quote = 0;
  for (size_t k = q + 2; k + 1 < src.size(); ++k) {
    if (quote) {
      if (src[k] == '\\') ++k;
      else if (src[k] == quote) quote = 0;
    } else if (src[k] == '\'' || src[k] == '"') {
      quote = src[k];
    } else if (src.compare(k, 2, close) == 0) {
      return k;
    }
  }
  return std::string::npos;
}

std::vector<Seg> segments(const std::string& src) {
  std::vector<Seg> out;
  size_t p = 0;
  bool strip_all = false, trim_newline = false;  // what the last tag's close asks of the next text
  for (;;) {
    size_t q = p;
    for (; (q = src.find('{', q)) != std::string::npos; ++q)
      if (q + 1 < src.size() && (src[q + 1] == '{' || src[q + 1] == '%' || src[q + 1] == '#')) break;
    std::string text = src.substr(p, q == std::string::npos ? std::string::npos : q - p);
    if (strip_all) text.erase(0, text.find_first_not_of(" \t\r\n") == std::string::npos ? text.size() : text.find_first_not_of(" \t\r\n"));
    else if (trim_newline && text.rfind("\r\n", 0) == 0) text.erase(0, 2);
    else if (trim_newline && text.rfind("\n", 0) == 0) text.erase(0, 1);
    if (q == std::string::npos) {
      out.push_back({Seg::kText, text});
      return out;
    }
    const char kind = src[q + 1];
    const char mark = q + 2 < src.size() ? src[q + 2] : 0;
    if (mark == '-') {
      while (!text.empty() && space(text.back())) text.pop_back();
    } else if (kind != '{' && mark != '+') {  // lstrip_blocks: blanks from the line's start to a block
      size_t k = q;
      while (k > p && blank(src[k - 1])) --k;
      if (k == 0 || src[k - 1] == '\n') text.erase(text.size() - std::min(q - k, text.size()));
    }
    out.push_back({Seg::kText, text});
    const size_t c = close_of(src, q, kind);
    if (c == std::string::npos) bad("has a tag without its close");
    const size_t b = q + 2 + (mark == '-' || mark == '+' ? 1 : 0);
    const bool minus = c > b && src[c - 1] == '-';
    if (kind != '#') out.push_back({kind == '{' ? Seg::kExpr : Seg::kStmt, src.substr(b, c - b - (minus ? 1 : 0))});
    strip_all = minus;
    trim_newline = !minus && kind != '{';
    p = c + 2;
  }
}

class Builder {
 public:
  explicit Builder(std::vector<Seg> segs) : segs_(std::move(segs)) {}
  Body parse(std::string* end_word, const std::vector<std::string>& ends, std::string* end_rest, int depth);
  std::map<std::string, const ChatTemplate::Node*> macros;  // what parse() read, by name

 private:
  std::vector<Seg> segs_;
  size_t i_ = 0;
  int loops_ = 0;  // for loops around the statement being read
  std::set<std::string> macro_names_;

  ExprPtr whole_expr(const std::string& s, size_t pos, const char* where) {
    ExprPtr e = tmpl::parse_expr(s, pos, &macro_names_);
    if (!tmpl::next_word(s, pos).empty()) bad("has more after the expression in " + std::string(where) + ": '" + s + "'");
    return e;
  }
  std::unique_ptr<ChatTemplate::Node> statement(const std::string& word, const std::string& s, size_t pos, int depth);
  void macro(ChatTemplate::Node& n, const std::string& s, size_t pos, int depth);
};

// {% macro name(a, b=default) %}: its parameters, then its body up to {% endmacro %}.
void Builder::macro(ChatTemplate::Node& n, const std::string& s, size_t pos, int depth) {
  n.kind = ChatTemplate::Node::kMacro;
  n.text = tmpl::next_word(s, pos);
  if (n.text.empty() || tmpl::is_function(n.text) || tmpl::next_word(s, pos) != "(") bad("uses a {% macro %} other than 'macro name(params)': '" + s + "'");
  std::string w = tmpl::next_word(s, pos);
  while (w != ")") {
    if (w.empty() || !(std::isalpha(static_cast<unsigned char>(w[0])) || w[0] == '_')) bad("has a macro parameter list it cannot read: '" + s + "'");
    n.names.push_back(w);
    w = tmpl::next_word(s, pos);
    if (w == "=") {
      n.defaults.push_back(tmpl::parse_expr(s, pos, &macro_names_));
      w = tmpl::next_word(s, pos);
    } else {
      n.defaults.push_back(nullptr);
    }
    if (w == ",") w = tmpl::next_word(s, pos);
  }
  if (!tmpl::next_word(s, pos).empty()) bad("has more after a macro's parameters: '" + s + "'");
  macro_names_.insert(n.text);  // it may call itself
  const int loops = loops_;
  loops_ = 0;  // a macro's body is not inside the loop around its definition
  std::string end, rest;
  n.branches.emplace_back(nullptr, parse(&end, {"endmacro"}, &rest, depth + 1));
  loops_ = loops;
  macros[n.text] = &n;
}

std::unique_ptr<ChatTemplate::Node> Builder::statement(const std::string& word, const std::string& s, size_t pos, int depth) {
  auto n = std::make_unique<ChatTemplate::Node>();
  std::string end, rest;
  if (word == "set") {
    n->kind = ChatTemplate::Node::kSet;
    n->text = tmpl::next_word(s, pos);
    std::string w = tmpl::next_word(s, pos);
    if (w == ".") n->attr = tmpl::next_word(s, pos), w = tmpl::next_word(s, pos);
    if (w != "=") bad("uses {% set %} other than 'set name = value' or 'set ns.name = value': '" + s + "'");
    n->expr = whole_expr(s, pos, "{% set %}");
  } else if (word == "for") {
    n->kind = ChatTemplate::Node::kFor;
    std::string w;
    do {
      n->names.push_back(tmpl::next_word(s, pos));
    } while ((w = tmpl::next_word(s, pos)) == ",");
    if (w != "in") bad("uses a for loop other than 'for name[, name...] in sequence': '" + s + "'");
    n->expr = whole_expr(s, pos, "{% for %}");
    ++loops_;
    n->branches.emplace_back(nullptr, parse(&end, {"endfor", "else"}, &rest, depth + 1));
    --loops_;
    if (end == "else") n->branches.emplace_back(nullptr, parse(&end, {"endfor"}, &rest, depth + 1));
  } else if (word == "macro") {
    macro(*n, s, pos, depth);
  } else if (word == "break" || word == "continue") {  // transformers loads Jinja's loopcontrols
    if (loops_ == 0) bad("uses {% " + word + " %} outside a loop");
    n->kind = word == "break" ? ChatTemplate::Node::kBreak : ChatTemplate::Node::kContinue;
  } else if (word == "generation") {  // transformers' assistant-mask marker: its body renders as it is
    n->kind = ChatTemplate::Node::kIf;
    n->branches.emplace_back(nullptr, parse(&end, {"endgeneration"}, &rest, depth + 1));
  } else if (word == "if") {
    n->kind = ChatTemplate::Node::kIf;
    ExprPtr cond = whole_expr(s, pos, "{% if %}");
    for (;;) {
      Body body = parse(&end, {"elif", "else", "endif"}, &rest, depth + 1);
      n->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "endif") break;
      cond = end == "elif" ? whole_expr(rest, 0, "{% elif %}") : nullptr;
      if (end == "else") {
        n->branches.emplace_back(nullptr, parse(&end, {"endif"}, &rest, depth + 1));
        break;
      }
    }
  } else {
    bad("uses {% " + word + " %}, which loom-serve does not render");
  }
  return n;
}

Body Builder::parse(std::string* end_word, const std::vector<std::string>& ends, std::string* end_rest, int depth) {
  if (depth > kMaxNesting) bad("nests blocks deeper than 32");
  Body body;
  while (i_ < segs_.size()) {
    const Seg& g = segs_[i_++];
    if (g.kind == Seg::kText) {
      if (g.s.empty()) continue;
      auto n = std::make_unique<ChatTemplate::Node>();
      n->text = g.s;
      body.push_back(std::move(n));
    } else if (g.kind == Seg::kExpr) {
      auto n = std::make_unique<ChatTemplate::Node>();
      n->kind = ChatTemplate::Node::kOut;
      n->expr = whole_expr(g.s, 0, "{{ }}");
      body.push_back(std::move(n));
    } else {
      size_t pos = 0;
      const std::string word = tmpl::next_word(g.s, pos);
      for (const auto& e : ends)
        if (word == e) {
          *end_word = word;
          *end_rest = g.s.substr(pos);
          return body;
        }
      body.push_back(statement(word, g.s, pos, depth));
    }
  }
  if (!ends.empty()) bad("ends before its {% " + ends.front() + " %}");
  return body;
}

struct Render {
  Scope scope;
  std::string out;
  size_t max_bytes;
  ChatTemplate::Node::Kind jump = ChatTemplate::Node::kText;  // kBreak or kContinue while one leaves its loop's body

  void body(const Body& b) {
    for (const auto& n : b) {
      node(*n);
      if (jump != ChatTemplate::Node::kText) return;
    }
  }
  void set(const ChatTemplate::Node& n);
  Value call(const ChatTemplate::Node& m, const std::vector<Value>& pos, const std::map<std::string, Value>& kw);
  int calls_deep = 0;
  void node(const ChatTemplate::Node& n);
  void loop(const ChatTemplate::Node& n);
};

void Render::node(const ChatTemplate::Node& n) {
  switch (n.kind) {
    case ChatTemplate::Node::kText: out += n.text; break;
    case ChatTemplate::Node::kOut: out += tmpl::eval(*n.expr, scope).text(); break;
    case ChatTemplate::Node::kSet: set(n); break;
    case ChatTemplate::Node::kBreak:
    case ChatTemplate::Node::kContinue: jump = n.kind; break;
    case ChatTemplate::Node::kMacro: break;  // read with the template; called from expressions
    case ChatTemplate::Node::kIf:
      for (const auto& br : n.branches)
        if (!br.first || tmpl::eval(*br.first, scope).truthy()) {
          body(br.second);
          break;
        }
      break;
    case ChatTemplate::Node::kFor: loop(n); break;
  }
  if (out.size() > max_bytes)
    throw ServeError(Status::kInput, "the chat template's prompt passes " + std::to_string(max_bytes) + " bytes");
}

// A macro's text: its body rendered with the template's variables and its parameters, and no
// others (the caller's loop variables and sets stay outside, as in Jinja).
Value Render::call(const ChatTemplate::Node& m, const std::vector<Value>& pos, const std::map<std::string, Value>& kw) {
  if (pos.size() > m.names.size()) throw ServeError(Status::kInput, "the chat template calls " + m.text + "() with too many arguments");
  if (++calls_deep > 32) throw ServeError(Status::kInput, "the chat template's macros call each other deeper than 32");
  std::vector<std::map<std::string, Value>> saved{scope.frames.front()};
  saved.swap(scope.frames);
  scope.frames.emplace_back();
  for (const auto& k : kw)
    if (std::find(m.names.begin(), m.names.end(), k.first) == m.names.end())
      throw ServeError(Status::kInput, "the chat template calls " + m.text + "() with " + k.first + ", which it does not take");
  for (size_t i = 0; i < m.names.size(); ++i) {
    auto k = kw.find(m.names[i]);
    scope.set(m.names[i], i < pos.size() ? pos[i] : k != kw.end() ? k->second : m.defaults[i] ? tmpl::eval(*m.defaults[i], scope) : Value());
  }
  std::string outside;
  outside.swap(out);
  body(m.branches[0].second);
  jump = ChatTemplate::Node::kText;
  std::string text;
  text.swap(out);
  out.swap(outside);
  scope.frames.swap(saved);  // a macro's sets are its own
  --calls_deep;
  return Value::str(text);
}

// A variable or a namespace's attribute; what outlives the expression is bounded in depth (a value
// built up one level a step would take the stack when it is printed or freed).
void Render::set(const ChatTemplate::Node& n) {
  Value v = tmpl::eval(*n.expr, scope);
  if (n.attr.empty()) {
    tmpl::check_nesting(v, nullptr, scope.budget);
    return scope.set(n.text, std::move(v));
  }
  const Value ns = scope.get(n.text);
  if (ns.kind != Value::kDict || !ns.b)
    throw ServeError(Status::kInput, "the chat template sets " + n.text + "." + n.attr + ", but " + n.text + " is not a namespace()");
  tmpl::check_nesting(v, ns.dict.get(), scope.budget);
  (*ns.dict)[n.attr] = std::move(v);
}

void Render::loop(const ChatTemplate::Node& n) {
  const Value seq = tmpl::eval(*n.expr, scope);
  const std::vector<Value> items = tmpl::elements(seq, "loops over");
  if (items.empty()) {
    if (n.branches.size() > 1) body(n.branches[1].second);
    return;
  }
  const int64_t len = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < len; ++k) {
    scope.budget.step();
    Value info = Value::new_dict();
    (*info.dict)["index"] = Value::integer(k + 1), (*info.dict)["index0"] = Value::integer(k);
    (*info.dict)["revindex"] = Value::integer(len - k), (*info.dict)["revindex0"] = Value::integer(len - k - 1);
    (*info.dict)["first"] = Value::boolean(k == 0), (*info.dict)["last"] = Value::boolean(k + 1 == len);
    (*info.dict)["length"] = Value::integer(len);
    if (k > 0) (*info.dict)["previtem"] = items[static_cast<size_t>(k - 1)];
    if (k + 1 < len) (*info.dict)["nextitem"] = items[static_cast<size_t>(k + 1)];
    scope.frames.emplace_back();
    scope.set("loop", info);
    const Value& item = items[static_cast<size_t>(k)];
    if (n.names.size() == 1) {
      scope.set(n.names[0], item);
    } else {
      if (item.kind != Value::kList || item.list->size() != n.names.size())
        throw ServeError(Status::kInput, "the chat template unpacks " + item.text() + " into " + std::to_string(n.names.size()) + " names");
      for (size_t v = 0; v < n.names.size(); ++v) scope.set(n.names[v], (*item.list)[v]);
    }
    body(n.branches[0].second);
    scope.frames.pop_back();
    const bool leave = jump == ChatTemplate::Node::kBreak;
    jump = ChatTemplate::Node::kText;
    if (leave) break;
  }
}

// The variable names `body` reads (a request's variables not among them are never converted).
void names_read(const tmpl::Expr& e, std::set<std::string>& out) {
  if (e.op == tmpl::Expr::kVar) out.insert(e.name);
  for (const auto& a : e.args) names_read(*a, out);
}

void names_read(const Body& body, std::set<std::string>& out) {
  for (const auto& n : body) {
    if (n->expr) names_read(*n->expr, out);
    for (const auto& d : n->defaults)
      if (d) names_read(*d, out);
    for (const auto& br : n->branches) {
      if (br.first) names_read(*br.first, out);
      names_read(br.second, out);
    }
  }
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source) {
  if (source.size() > kMaxTemplateBytes) bad("is larger than 1 MiB");
  // Jinja drops one newline at the end of the template (keep_trailing_newline off).
  const size_t keep = source.size() - (source.size() >= 2 && source.compare(source.size() - 2, 2, "\r\n") == 0 ? 2
                                       : !source.empty() && source.back() == '\n'                       ? 1
                                                                                                         : 0);
  Builder b(segments(source.substr(0, keep)));
  std::string end, rest;
  body_ = b.parse(&end, {}, &rest, 0);
  macros_ = std::move(b.macros);
  names_read(body_, names_);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt, const std::string& bos_token,
                                 const std::string& eos_token, size_t max_bytes) const {
  using Clock = std::chrono::steady_clock;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  return render(list, nlohmann::ordered_json::object(), add_generation_prompt, bos_token, eos_token, max_bytes, Clock::time_point::max());
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& vars, bool add_generation_prompt,
                                 const std::string& bos_token, const std::string& eos_token, size_t max_bytes,
                                 std::chrono::steady_clock::time_point deadline) const {
  Render r;
  r.max_bytes = max_bytes;
  r.scope.budget.deadline = deadline;
  r.scope.frames.emplace_back();
  // As transformers passes them: its own names, then the caller's (chat_template_kwargs) over them.
  r.scope.set("add_generation_prompt", Value::boolean(add_generation_prompt));
  r.scope.set("bos_token", Value::str(bos_token));
  r.scope.set("eos_token", Value::str(eos_token));
  for (auto it = vars.begin(); vars.is_object() && it != vars.end(); ++it)  // only what the template reads: tools it ignores cost nothing
    if (names_.count(it.key())) r.scope.set(it.key(), tmpl::from_json(it.value()));
  r.scope.set("messages", tmpl::from_json(messages));
  for (const char* f : {"raise_exception", "strftime_now"}) r.scope.set(f, Value::str(std::string("<function ") + f + ">"));  // `is defined`
  r.scope.macro = [&](const std::string& name, const std::vector<Value>& pos, const std::map<std::string, Value>& kw) {
    const auto m = macros_.find(name);
    if (m == macros_.end()) throw ServeError(Status::kInput, "the chat template calls " + name + "(), which it does not define");
    return r.call(*m->second, pos, kw);
  };
  r.body(body_);
  return r.out;
}

std::unique_ptr<ChatFormat> load_chat_format(const std::string& folder) {
  const std::string path = folder + "/tokenizer_config.json", jinja = folder + "/chat_template.jinja";
  const bool have_jinja = access(jinja.c_str(), F_OK) == 0;
  if (access(path.c_str(), F_OK) != 0 && !have_jinja) return nullptr;
  nlohmann::json cfg = nlohmann::json::object();
  try {
    if (access(path.c_str(), F_OK) == 0) cfg = rt::parse_json_text(read_small(path), path);
  } catch (const nlohmann::json::exception& e) {
    throw rt::Error(path + ": not valid JSON: " + e.what());
  }
  if (!cfg.is_object()) throw rt::Error(path + ": not a JSON object");
  // The template: chat_template.jinja beside it (as newer transformers save it; it wins),
  // else tokenizer_config.json's chat_template.
  std::string source, from = have_jinja ? jinja : path;
  if (have_jinja) {
    source = read_small(jinja);
  } else {
    if (!cfg.contains("chat_template")) return nullptr;
    const auto& t = cfg["chat_template"];
    if (t.is_string()) source = t.get<std::string>();
    for (const auto& named : t.is_array() ? t : nlohmann::json::array())
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") && named["template"].is_string())
        source = named["template"].get<std::string>();
  }
  if (source.empty()) throw rt::Error(from + ": chat_template must be a string or a list holding a template named default");
  auto token = [&](const char* key) {
    const auto it = cfg.find(key);
    if (it == cfg.end()) return std::string();
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
    return std::string();
  };
  try {
    return std::make_unique<ChatFormat>(ChatFormat{ChatTemplate(source), token("bos_token"), token("eos_token")});
  } catch (const rt::Error& e) {
    throw rt::Error(from + ": " + e.what());
  }
}

}  // namespace loom::serve::llm

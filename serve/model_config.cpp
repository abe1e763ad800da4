// model_config.cpp — a reader of protobuf's text format just deep enough to take Triton's
// top-level scalars and skip everything else (nested messages, lists, comments, strings).
#include "model_config.hpp"

#include <cctype>
#include <climits>
#include <cstring>
#include <fstream>

#include "loom/rt/error.hpp"

namespace loom::serve {
namespace {

constexpr size_t kMaxConfigBytes = size_t{1} << 20;

class Reader {
 public:
  Reader(const std::string& text, const std::string& file) : s_(text), file_(file) {}
  [[noreturn]] void fail(const std::string& why) const {
    throw rt::Error(file_ + ":" + std::to_string(line_) + ": " + why);
  }
  // Skips blanks and # comments; false at the end of the text.
  bool more() {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else if (std::isspace(static_cast<unsigned char>(c)) || c == ',' || c == ';') {
        line_ += c == '\n';
        ++i_;
      } else {
        return true;
      }
    }
    return false;
  }
  char peek() { return more() ? s_[i_] : '\0'; }
  std::string token() {  // an identifier, a number or a quoted string, as written
    if (!more()) fail("the text ends where a value was expected");
    const size_t start = i_;
    if (s_[i_] == '"' || s_[i_] == '\'') {
      const char q = s_[i_++];
      while (i_ < s_.size() && s_[i_] != q) i_ += s_[i_] == '\\' ? 2 : 1;
      if (i_ >= s_.size()) fail("a string is not closed");
      return s_.substr(start, ++i_ - start);
    }
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || (s_[i_] && std::strchr("_-+.", s_[i_])))) ++i_;
    if (i_ == start) fail(std::string("unexpected '") + s_[i_] + "'");
    return s_.substr(start, i_ - start);
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  // A field's value after its name: a scalar, a [list] or a {message} (skipped, depth-limited).
  std::string value(int depth = 0) {
    if (depth > 64) fail("nested too deeply");
    if (peek() == ':') ++i_;
    const char c = peek();
    if (c == '{' || c == '<') {
      const char close = c == '{' ? '}' : '>';
      ++i_;
      while (peek() != close) {
        if (!more()) fail("a message is not closed");
        token();
        value(depth + 1);
      }
      ++i_;
      return "";
    }
    if (c == '[') {
      ++i_;
      while (peek() != ']') {
        if (!more()) fail("a list is not closed");
        if (peek() == '{' || peek() == '<') value(depth + 1);
        else token();
      }
      ++i_;
      return "";
    }
    return token();
  }

 private:
  const std::string& s_;
  const std::string& file_;
  size_t i_ = 0;
  int line_ = 1;
};

int batch_size(const Reader& r, const std::string& v) {
  if (v.empty() || v.size() > 10 || v.find_first_not_of("0123456789") != std::string::npos)
    r.fail("max_batch_size must be a whole number 0 or more, not '" + v + "'");
  const long long n = std::stoll(v);
  if (n > INT_MAX) r.fail("max_batch_size " + v + " is too large");
  return static_cast<int>(n);
}

}  // namespace

ModelConfig parse_model_config(const std::string& text, const std::string& file) {
  ModelConfig c;
  Reader r(text, file);
  while (r.more()) {
    const std::string name = r.token();
    const std::string v = r.value();
    if (name == "max_batch_size") c.max_batch_size = batch_size(r, v);
  }
  return c;
}

ModelConfig read_model_config(const std::string& folder) {
  const std::string file = folder + "/config.pbtxt";
  std::ifstream in(file, std::ios::binary);
  if (!in) return ModelConfig();
  std::string text(kMaxConfigBytes + 1, '\0');
  in.read(&text[0], static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxConfigBytes) throw rt::Error(file + ": larger than 1 MiB");
  return parse_model_config(text, file);
}

}  // namespace loom::serve

// tokenizer_pattern.cpp — tokenizer.json's patterns on PCRE2 (tokenizer_steps.hpp's Pattern).
#include <memory>

#include "core/status.hpp"
#include "loom/rt/error.hpp"
#include "loom/rt/io/text.hpp"
#include "tokenizer_steps.hpp"

#ifdef LOOM_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace loom::serve::llm {

#ifdef LOOM_HAVE_PCRE2
struct Pattern::Impl {
  pcre2_code* code = nullptr;
  pcre2_match_context* ctx = nullptr;
  std::string literal;
  bool regex = false;
  ~Impl() {
    if (code) pcre2_code_free(code);
    if (ctx) pcre2_match_context_free(ctx);
  }
};

Pattern::Pattern(const std::string& text, bool regex, const std::string& where) : impl_(std::make_unique<Impl>()) {
  impl_->regex = regex;
  impl_->literal = text;
  if (!regex) {
    if (text.empty()) throw rt::Error(where + ": an empty String pattern");
    return;
  }
  int err = 0;
  PCRE2_SIZE at = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw rt::Error(where + ": PCRE2 rejects the pattern " + rt::visible_text(text) + " at offset " + std::to_string(at) + ": " +
                    reinterpret_cast<const char*>(msg));
  }
  impl_->ctx = pcre2_match_context_create(nullptr);
  pcre2_set_match_limit(impl_->ctx, 1000000);  // backtracking steps of one match
  pcre2_set_depth_limit(impl_->ctx, 10000);
  pcre2_set_heap_limit(impl_->ctx, 64 << 10);  // KiB
}

std::vector<std::pair<size_t, size_t>> Pattern::find_all(const std::string& s) const {
  std::vector<std::pair<size_t, size_t>> out;
  if (!impl_->regex) {
    for (size_t at = 0, hit; (hit = s.find(impl_->literal, at)) != std::string::npos; at = hit + impl_->literal.size())
      out.emplace_back(hit, hit + impl_->literal.size());
    return out;
  }
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(pcre2_match_data_create_from_pattern(impl_->code, nullptr), pcre2_match_data_free);
  uint32_t opts = 0;
  for (size_t at = 0; at <= s.size();) {
    const int rc = pcre2_match(impl_->code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), at, opts, md.get(), impl_->ctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw ServeError(Status::kInput, std::string("the tokenizer's split pattern failed on the text: ") + reinterpret_cast<const char*>(msg));
    }
    opts = PCRE2_NO_UTF_CHECK;  // checked once, on the first call
    const PCRE2_SIZE* v = pcre2_get_ovector_pointer(md.get());
    if (v[1] > v[0]) out.emplace_back(v[0], v[1]);
    if (v[1] > at) {
      at = v[1];
    } else {  // an empty match: past the next character
      if (at >= s.size()) break;
      size_t i = at;
      next_cp(s, i);
      at = i;
    }
  }
  return out;
}
#else
struct Pattern::Impl {
  std::string literal;
};
Pattern::Pattern(const std::string& text, bool regex, const std::string& where) : impl_(std::make_unique<Impl>()) {
  if (regex) throw rt::Error(where + ": a Regex pattern, and this build of loom-serve has no PCRE2 (configure found no libpcre2-dev)");
  if (text.empty()) throw rt::Error(where + ": an empty String pattern");
  impl_->literal = text;
}
std::vector<std::pair<size_t, size_t>> Pattern::find_all(const std::string& s) const {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t at = 0, hit; (hit = s.find(impl_->literal, at)) != std::string::npos; at = hit + impl_->literal.size())
    out.emplace_back(hit, hit + impl_->literal.size());
  return out;
}
#endif
Pattern::~Pattern() = default;

}  // namespace loom::serve::llm

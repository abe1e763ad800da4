// tokenizer_steps.hpp — the steps of a Hugging Face tokenizer.json around its model: normalizers
// (NFC, Prepend, Replace, Sequence), pre-tokenizers (Split with its pattern, ByteLevel, Metaspace,
// Digits, Sequence) and, per token, decoders (ByteLevel, Metaspace, Replace, ByteFallback, Fuse,
// Strip). Each is built from its JSON object; a type it does not implement, or a field it cannot
// honour, is refused at load naming the step (rt::Error "<where>: ...").
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace loom::serve::llm {

// A regular expression as the `tokenizers` library runs it (Oniguruma there; PCRE2 here with
// UTF and Unicode properties), with limits on matching so that a pattern that backtracks without
// end fails the request instead of holding a thread.
class Pattern {
 public:
  // regex: a PCRE pattern; literal: a plain string to find. Throws rt::Error naming `where`
  // when PCRE2 rejects the pattern.
  Pattern(const std::string& text, bool regex, const std::string& where);
  ~Pattern();
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;
  // Every non-overlapping match in s, as [begin, end) byte offsets. Throws ServeError kInput
  // when the text is not UTF-8 or the match limits are reached.
  std::vector<std::pair<size_t, size_t>> find_all(const std::string& s) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string run(const std::string& s) const = 0;
};

// A piece of the text between pre-tokenizers: its bytes, and whether it begins the text (for
// Metaspace's prepend_scheme "first").
struct Piece {
  std::string text;
  bool first = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void run(std::vector<Piece>& pieces) const = 0;
  // ByteLevel: the model's symbols are bytes written as GPT-2's printable stand-ins.
  virtual bool byte_level() const { return false; }
};

class TokenDecoder {
 public:
  virtual ~TokenDecoder() = default;
  // One token's text after the steps before this one (bytes for ByteFallback, "<0x41>" before it).
  virtual std::string run(const std::string& token) const = 0;
};

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where);
std::unique_ptr<TokenDecoder> make_decoder(const nlohmann::json& j, const std::string& where);

// GPT-2's split pattern (ByteLevel's use_regex, and vocab.json + merges.txt folders).
extern const char* const kGpt2Pattern;

// GPT-2's bytes_to_unicode(): printable bytes stand for themselves, the others for 256 + n.
const std::string& byte_char(unsigned char b);
// The byte a stand-in code point names, or -1.
int char_byte(uint32_t cp);
// The code point of s at i, advancing i past it; an invalid byte stands for itself.
uint32_t next_cp(const std::string& s, size_t& i);

}  // namespace loom::serve::llm

// tokenizer.hpp — text to token ids and back for a served language model. Loom's gpt: one token
// per byte (model.config's vocab_bytes). GPT-2: its byte-level BPE from vocab.json + merges.txt
// (Radford et al.'s encoder.py: bytes mapped to printable characters, the text split by GPT-2's
// pattern, each piece merged by rank). A GPT-2 folder without them takes and gives token ids
// only (no Tokenizer).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace loom::serve::llm {

// A code point as UTF-8.
std::string utf8_of(uint32_t cp);

// A tokenizer's or model folder's text file (vocab.json, merges.txt, tokenizer_config.json), at
// most 64 MiB. Throws rt::Error naming the file.
std::string read_small(const std::string& path);

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Throws ServeError kInput for text the vocabulary cannot spell.
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // A completion's prompt: the text with the special tokens the tokenizer's post-processor adds
  // (tokenizer.json's template: Llama's BOS). A chat prompt is encoded without them (its
  // template writes them).
  virtual std::vector<int32_t> encode_with_specials(const std::string& text) const { return encode(text); }
  // The bytes a token stands for (a piece of UTF-8, possibly part of a character).
  virtual std::string decode(int32_t token) const = 0;
  // A whole text's tokens, as the tokenizer's own decode (tokenizer.json's Strip of the space
  // its Metaspace prepended): for /detokenize. Streams decode token by token.
  virtual std::string decode_text(const std::vector<int32_t>& ids) const {
    std::string s;
    for (int32_t id : ids) s += decode(id);
    return s;
  }
  // A special token's text (decode gives none, as vLLM's skip_special_tokens): what a tool-call
  // parser reads ([TOOL_CALLS], <|python_tag|>). "" for other tokens.
  virtual std::string special_text(int32_t) const { return ""; }
  // The id of a token written whole (a special token's text), or -1.
  virtual int32_t id_of(const std::string&) const { return -1; }
  virtual const char* kind() const = 0;  // "bytes", "bpe": for the load line and metadata
  // The most bytes one token stands for: a text longer than the context times this cannot fit.
  virtual size_t max_token_bytes() const = 0;
};

// Encodes `text` with the special tokens (longest first) matched before anything else: each
// stretch between them through `plain`, each match as its id.
struct SpecialToken {
  std::string content;
  int32_t id;
};
std::vector<int32_t> encode_around_specials(const std::string& text, const std::vector<SpecialToken>& specials,
                                            const std::function<void(const std::string&, bool first, std::vector<int32_t>&)>& plain);

class ByteTokenizer : public Tokenizer {
 public:
  // `bytes`: the byte each token id stands for; throws rt::Error naming `path` when they are not
  // distinct bytes or do not number `vocab`.
  ByteTokenizer(std::vector<int> bytes, int vocab, const std::string& path);
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(int32_t token) const override;
  const char* kind() const override { return "bytes"; }
  size_t max_token_bytes() const override { return 1; }

 private:
  std::vector<int> bytes_;
  int token_of_[256];
};

class BpeTokenizer : public Tokenizer {
 public:
  // Reads and checks both files against each other and the model's vocabulary: every merge's
  // parts and result are tokens, every byte is one, every id is below `vocab`. Throws rt::Error
  // naming the file and the line.
  BpeTokenizer(const std::string& vocab_json, const std::string& merges_txt, int vocab);
  ~BpeTokenizer() override;
  // The special tokens Hugging Face's tokenizer matches in text before BPE: tokenizer.json's
  // added_tokens, tokenizer_config.json's added_tokens_decoder and its bos/eos/unk/pad tokens
  // that vocab.json holds; with neither file, GPT-2's <|endoftext|>. Throws rt::Error naming a
  // file that cannot be read or an id outside the vocabulary.
  void read_special_tokens(const std::string& folder);
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(int32_t token) const override;
  const char* kind() const override { return "bpe"; }
  size_t max_token_bytes() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::serve::llm

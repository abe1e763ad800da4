// tokenizer.hpp — text to token ids and back for a served language model. Loom's gpt: one token
// per byte (model.config's vocab_bytes). A GPT-2 folder without a tokenizer takes and gives
// token ids only (no Tokenizer); GPT-2's byte-level BPE (vocab.json + merges.txt) is not built
// yet and such a folder says so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::serve::llm {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Throws ServeError kBadRequest for text the vocabulary cannot spell.
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // The bytes a token stands for (a piece of UTF-8, possibly part of a character).
  virtual std::string decode(int32_t token) const = 0;
};

class ByteTokenizer : public Tokenizer {
 public:
  // `bytes`: the byte each token id stands for; throws rt::Error naming `path` when they are not
  // distinct bytes or do not number `vocab`.
  ByteTokenizer(std::vector<int> bytes, int vocab, const std::string& path);
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(int32_t token) const override;

 private:
  std::vector<int> bytes_;
  int token_of_[256];
};

}  // namespace loom::serve::llm

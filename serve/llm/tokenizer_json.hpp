// tokenizer_json.hpp — a Hugging Face tokenizer.json (the `tokenizers` library's format) with a
// BPE model: its added tokens matched in the text first, then the normalizer, the pre-tokenizer
// and BPE over each piece (merges by rank; byte_fallback, ignore_merges, fuse_unk), the
// post-processor's template (the BOS a Llama adds) and the decoders, token by token.
#pragma once

#include <memory>
#include <string>

#include "tokenizer.hpp"

namespace loom::serve::llm {

class HfTokenizer : public Tokenizer {
 public:
  // Reads and checks `path` against a vocabulary of `vocab` ids. Throws rt::Error naming the file
  // and the part: a component it does not implement, merges naming tokens not in the vocabulary,
  // a pattern PCRE2 rejects.
  HfTokenizer(const std::string& path, int vocab);
  ~HfTokenizer() override;
  std::vector<int32_t> encode(const std::string& text) const override;
  std::vector<int32_t> encode_with_specials(const std::string& text) const override;
  std::string decode(int32_t token) const override;
  std::string decode_text(const std::vector<int32_t>& ids) const override;
  const char* kind() const override { return "tokenizer.json"; }
  size_t max_token_bytes() const override;
  int32_t id_of(const std::string& token) const override;
  std::string special_text(int32_t token) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::serve::llm

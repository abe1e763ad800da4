// tokenizer.cpp — the byte-level tokenizer of Loom's gpt.
#include "tokenizer.hpp"

#include <algorithm>

#include "loom/rt/error.hpp"
#include "status.hpp"

namespace loom::serve::llm {

ByteTokenizer::ByteTokenizer(std::vector<int> bytes, int vocab, const std::string& path) : bytes_(std::move(bytes)) {
  if (static_cast<int>(bytes_.size()) != vocab)
    throw rt::Error(path + ": model.config's vocab_bytes holds " + std::to_string(bytes_.size()) + " bytes for a vocabulary of " +
                    std::to_string(vocab));
  std::fill(std::begin(token_of_), std::end(token_of_), -1);
  for (size_t i = 0; i < bytes_.size(); ++i) {
    const int b = bytes_[i];
    if (b < 0 || b > 255 || token_of_[b] >= 0) throw rt::Error(path + ": model.config's vocab_bytes are not distinct bytes");
    token_of_[b] = static_cast<int>(i);
  }
}

std::vector<int32_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (unsigned char ch : text) {
    if (token_of_[ch] < 0)
      throw ServeError(Status::kBadRequest, "the prompt holds byte " + std::to_string(ch) + ", not in the model's vocabulary");
    ids.push_back(token_of_[ch]);
  }
  return ids;
}

std::string ByteTokenizer::decode(int32_t token) const {
  if (token < 0 || static_cast<size_t>(token) >= bytes_.size()) return "";
  return std::string(1, static_cast<char>(bytes_[static_cast<size_t>(token)]));
}

}  // namespace loom::serve::llm

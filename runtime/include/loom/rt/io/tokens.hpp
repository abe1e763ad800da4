// tokens.hpp — llm.c's token files (`dev/data/*.bin`): a header of 256 little-endian int32
// (magic, version, the token count), then that many tokens: GPT-2's format (magic 20240520,
// version 1, uint16 tokens) or Llama 3's (magic 20240801, version 7, uint32 tokens).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom::rt {

constexpr int32_t kTokenFileMagic = 20240520;        // GPT-2: version 1, uint16 tokens
constexpr int32_t kTokenFileMagicLlama3 = 20240801;  // Llama 3: version 7, uint32 tokens
constexpr int32_t kEvalFileMagic = 20240522;         // llm.c's HellaSwag/MMLU eval files: not tokens

// Every matched file's tokens, one after another, read in place: each file stays open and is
// read with pread as windows are needed (ranks on one node share the page cache's one copy). A
// file truncated while in use is an Error naming it at the next read, not a SIGBUS.
class TokenFiles {
 public:
  std::vector<std::string> paths;  // what the pattern matched, in glob(3)'s sorted order

  int64_t size() const { return total_; }
  uint32_t operator[](int64_t i) const;  // 0 <= i < size()
  // Tokens [first, first + n) into out (a window may span files); Error naming the file when it
  // can no longer be read whole.
  void read(int64_t first, int64_t n, uint32_t* out) const;
  int token_bytes() const { return token_bytes_; }  // 2, or 4 when any file holds uint32 tokens

  struct Mapping;  // one open file (tokens.cpp)

 private:
  friend TokenFiles load_token_files(const std::string& pattern, int vocab);
  std::vector<std::shared_ptr<const Mapping>> files_;
  std::vector<int64_t> starts_;  // the first token of each file
  int64_t total_ = 0;
  int token_bytes_ = 2;
};

// `pattern` names one file or a glob ("fineweb_train_*.bin"). Throws Error naming the file and
// the fault: no match, a short file, a bad magic or version, a count that is not the file's
// length, a token >= vocab. The files of one pattern may mix the two formats.
TokenFiles load_token_files(const std::string& pattern, int vocab);

}  // namespace loom::rt

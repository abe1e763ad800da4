// tokens.hpp — llm.c's token files (`dev/data/*.bin`): a header of 256 little-endian int32
// (magic 20240520, version 1, the token count), then that many uint16 tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::rt {

constexpr int32_t kTokenFileMagic = 20240520;

struct TokenFiles {
  std::vector<std::string> paths;  // what the pattern matched, in glob(3)'s sorted order
  std::vector<uint16_t> tokens;    // every file's tokens, one after another
};

// `pattern` names one file or a glob ("fineweb_train_*.bin"). Throws Error naming the file and
// the fault: no match, a short file, a bad magic or version, a count that is not the file's
// length, a token >= vocab.
TokenFiles load_token_files(const std::string& pattern, int vocab);

}  // namespace loom::rt

// tokens.cpp — reading llm.c's token files, every header and token checked.
#include "loom/rt/io/tokens.hpp"

#include <glob.h>

#include <cstring>
#include <fstream>

#include "loom/rt/error.hpp"

namespace loom::rt {

namespace {

std::vector<std::string> expand(const std::string& pattern) {
  glob_t g{};
  const int rc = glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> paths;
  for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && paths.empty()))
    throw Error("--data tokens:" + pattern + ": no file matches");
  if (rc != 0) throw Error("--data tokens:" + pattern + ": cannot list the files (" + std::strerror(errno) + ")");
  return paths;
}

void append_file(const std::string& path, int vocab, std::vector<uint16_t>* out) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error(path + ": cannot read the token file");
  const auto bytes = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  int32_t header[256];
  if (bytes < static_cast<int64_t>(sizeof header) || !in.read(reinterpret_cast<char*>(header), sizeof header))
    throw Error(path + ": " + std::to_string(bytes) + " bytes is shorter than the 1024-byte header of a token file");
  if (header[0] != kTokenFileMagic)
    throw Error(path + ": not an llm.c token file (magic " + std::to_string(header[0]) + ", expected " +
                std::to_string(kTokenFileMagic) + ")");
  if (header[1] != 1) throw Error(path + ": token file version " + std::to_string(header[1]) + " (only version 1 is read)");
  const int64_t count = header[2];
  const int64_t held = (bytes - static_cast<int64_t>(sizeof header)) / 2;
  if (count <= 0 || held != count || (bytes - static_cast<int64_t>(sizeof header)) % 2 != 0)
    throw Error(path + ": the header says " + std::to_string(count) + " tokens, the file holds " + std::to_string(held) +
                (held < count ? " (truncated)" : ""));
  const size_t at = out->size();
  out->resize(at + static_cast<size_t>(count));
  if (!in.read(reinterpret_cast<char*>(out->data() + at), count * 2)) throw Error(path + ": read failed");
  for (size_t i = at; i < out->size(); ++i)
    if ((*out)[i] >= vocab)
      throw Error(path + ": token " + std::to_string((*out)[i]) + " at position " + std::to_string(i - at) +
                  " is outside the vocabulary (--vocab " + std::to_string(vocab) + ")");
}

}  // namespace

TokenFiles load_token_files(const std::string& pattern, int vocab) {
  TokenFiles t;
  t.paths = expand(pattern);
  for (const auto& p : t.paths) append_file(p, vocab, &t.tokens);
  return t;
}

}  // namespace loom::rt

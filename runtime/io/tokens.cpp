// tokens.cpp — llm.c's token files mapped in place, every header and token checked.
#include "loom/rt/io/tokens.hpp"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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

}  // namespace

struct TokenFiles::Mapping {
  const void* base = nullptr;
  size_t bytes = 0;
  const char* tokens = nullptr;
  int width = 2;  // bytes per token: 2 (GPT-2's format) or 4 (Llama 3's)
  int64_t count = 0;
  uint32_t at(int64_t i) const {
    if (width == 2) return reinterpret_cast<const uint16_t*>(tokens)[i];
    return reinterpret_cast<const uint32_t*>(tokens)[i];
  }
  ~Mapping() {
    if (base) ::munmap(const_cast<void*>(base), bytes);
  }
};

namespace {

// Maps one file and checks its header, its length and every token.
std::shared_ptr<const TokenFiles::Mapping> map_file(const std::string& path, int vocab) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot read the token file (" + std::strerror(errno) + ")");
  struct stat st {};
  const int64_t bytes = ::fstat(fd, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
  int32_t header[256];
  if (bytes < static_cast<int64_t>(sizeof header) || ::pread(fd, header, sizeof header, 0) != static_cast<ssize_t>(sizeof header)) {
    ::close(fd);
    throw Error(path + ": " + std::to_string(bytes) + " bytes is shorter than the 1024-byte header of a token file");
  }
  auto fail = [&](const std::string& why) {
    ::close(fd);
    throw Error(path + ": " + why);
  };
  const int32_t magic = header[0], version = header[1];
  if (magic == kEvalFileMagic) fail("an llm.c eval file (HellaSwag or MMLU examples, magic 20240522), not training tokens");
  if (magic != kTokenFileMagic && magic != kTokenFileMagicLlama3)
    fail("not an llm.c token file (magic " + std::to_string(magic) + ", expected " + std::to_string(kTokenFileMagic) +
         " or Llama 3's " + std::to_string(kTokenFileMagicLlama3) + ")");
  const bool llama3 = magic == kTokenFileMagicLlama3;
  const int want = llama3 ? 7 : 1;
  if (version != want)
    fail("token file version " + std::to_string(version) + " (magic " + std::to_string(magic) + " goes with version " +
         std::to_string(want) + ")");
  const int width = llama3 ? 4 : 2;
  const int64_t count = header[2];
  const int64_t body = bytes - static_cast<int64_t>(sizeof header), held = body / width;
  if (count <= 0 || held != count || body % width != 0)
    fail("the header says " + std::to_string(count) + " tokens, the file holds " + std::to_string(held) +
         (held < count ? " (truncated)" : ""));
  auto m = std::make_shared<TokenFiles::Mapping>();
  void* base = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) throw Error(path + ": cannot map the token file (" + std::strerror(errno) + ")");
  m->base = base;
  m->bytes = static_cast<size_t>(bytes);
  m->tokens = static_cast<const char*>(base) + sizeof header;
  m->width = width;
  m->count = count;
  ::madvise(base, m->bytes, MADV_SEQUENTIAL);  // the check below reads it once, in order
  for (int64_t i = 0; i < count; ++i)
    if (m->at(i) >= static_cast<uint32_t>(vocab))
      throw Error(path + ": token " + std::to_string(m->at(i)) + " at position " + std::to_string(i) +
                  " is outside the vocabulary (--vocab " + std::to_string(vocab) + ")");
  ::madvise(base, m->bytes, MADV_RANDOM);  // training reads windows in a shuffled order
  return m;
}

}  // namespace

uint32_t TokenFiles::operator[](int64_t i) const {
  const size_t f = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin()) - 1;
  return files_[f]->at(i - starts_[f]);
}

TokenFiles load_token_files(const std::string& pattern, int vocab) {
  TokenFiles t;
  t.paths = expand(pattern);
  for (const auto& p : t.paths) {
    t.files_.push_back(map_file(p, vocab));
    t.starts_.push_back(t.total_);
    t.total_ += t.files_.back()->count;
    t.token_bytes_ = std::max(t.token_bytes_, t.files_.back()->width);
  }
  return t;
}

}  // namespace loom::rt

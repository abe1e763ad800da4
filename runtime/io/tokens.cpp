// tokens.cpp — llm.c's token files read in place (pread), every header and token checked.
#include "loom/rt/io/tokens.hpp"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

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

// One open token file, read with pread: a file truncated or rewritten while training is an
// Error naming it at the next read (a mapping of it raised SIGBUS and killed the process, with no
// checkpoint). The page cache still holds one copy per node, shared by its ranks.
struct TokenFiles::Mapping {
  std::string path;
  int fd = -1;
  int width = 2;  // bytes per token: 2 (GPT-2's format) or 4 (Llama 3's)
  int64_t count = 0;
  // Tokens [first, first + n) of this file into out.
  void read(int64_t first, int64_t n, uint32_t* out) const {
    thread_local std::vector<char> buf;
    buf.resize(static_cast<size_t>(n * width));
    const off_t at = static_cast<off_t>(1024 + first * width);
    size_t got = 0;
    while (got < buf.size()) {
      const ssize_t r = ::pread(fd, buf.data() + got, buf.size() - got, at + static_cast<off_t>(got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        throw DataChanged(path + ": the token file changed while in use: " +
                    (r < 0 ? std::string(std::strerror(errno))
                           : "it ends before byte " + std::to_string(at + static_cast<off_t>(buf.size())) + " (truncated?)"));
      got += static_cast<size_t>(r);
    }
    for (int64_t i = 0; i < n; ++i) {
      if (width == 2) {
        uint16_t v;
        std::memcpy(&v, buf.data() + i * 2, 2);
        out[i] = v;
      } else {
        std::memcpy(&out[i], buf.data() + i * 4, 4);
      }
    }
  }
  ~Mapping() {
    if (fd >= 0) ::close(fd);
  }
};

namespace {

// Opens one file and checks its header, its length and every token.
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
  m->path = path;
  m->fd = fd;
  m->width = width;
  m->count = count;
  std::vector<uint32_t> chunk(1 << 18);
  for (int64_t at = 0; at < count; at += static_cast<int64_t>(chunk.size())) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(chunk.size()), count - at);
    m->read(at, n, chunk.data());
    for (int64_t i = 0; i < n; ++i)
      if (chunk[static_cast<size_t>(i)] >= static_cast<uint32_t>(vocab))
        throw Error(path + ": token " + std::to_string(chunk[static_cast<size_t>(i)]) + " at position " +
                    std::to_string(at + i) + " is outside the vocabulary (--vocab " + std::to_string(vocab) + ")");
  }
  return m;
}

}  // namespace

void TokenFiles::read(int64_t first, int64_t n, uint32_t* out) const {
  while (n > 0) {
    const size_t f = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), first) - starts_.begin()) - 1;
    const int64_t in_file = first - starts_[f], take = std::min(n, files_[f]->count - in_file);
    files_[f]->read(in_file, take, out);
    first += take, out += take, n -= take;
  }
}

uint32_t TokenFiles::operator[](int64_t i) const {
  uint32_t v = 0;
  read(i, 1, &v);
  return v;
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

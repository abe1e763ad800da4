// tokens_test.cpp — llm.c token files read in place: a glob's files as one sequence (the token
// after a file's last is the next file's first), GPT-2's uint16 files beside Llama 3's uint32
// ones, and a token outside the vocabulary refused with its file and position.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "loom/rt/error.hpp"
#include "loom/rt/io/tokens.hpp"

namespace {

// GPT-2's format (uint16 tokens, T = uint16_t) or Llama 3's (uint32, T = uint32_t).
template <class T>
void write_tokens(const std::string& path, const std::vector<T>& toks) {
  const bool llama3 = sizeof(T) == 4;
  int32_t header[256] = {0};
  header[0] = llama3 ? loom::rt::kTokenFileMagicLlama3 : loom::rt::kTokenFileMagic;
  header[1] = llama3 ? 7 : 1;
  header[2] = static_cast<int32_t>(toks.size());
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header), sizeof header);
  f.write(reinterpret_cast<const char*>(toks.data()), static_cast<std::streamsize>(toks.size() * sizeof(T)));
}

}  // namespace

TEST(TokenFiles, ShardsReadInPlaceAsOneSequence) {
  char tmpl[] = "/tmp/loom-tokens-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::vector<uint16_t> a(1000), c(333);
  std::vector<uint32_t> b(7);  // Llama 3's format between two of GPT-2's
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint16_t>(i % 50);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint32_t>(60 + i);
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<uint16_t>(99 - i % 30);
  write_tokens(dir + "/t_000.bin", a);
  write_tokens(dir + "/t_001.bin", b);
  write_tokens(dir + "/t_002.bin", c);
  const loom::rt::TokenFiles t = loom::rt::load_token_files(dir + "/t_*.bin", 100);
  ASSERT_EQ(t.paths.size(), 3u);
  ASSERT_EQ(t.size(), 1340);
  EXPECT_EQ(t.token_bytes(), 4);
  std::vector<uint32_t> all(a.begin(), a.end());
  all.insert(all.end(), b.begin(), b.end());
  all.insert(all.end(), c.begin(), c.end());
  for (int64_t i = 0; i < t.size(); ++i) ASSERT_EQ(t[i], all[static_cast<size_t>(i)]) << "token " << i;
  write_tokens(dir + "/big.bin", std::vector<uint32_t>{5, 128255, 7});  // beyond uint16: Llama 3's vocabulary
  const loom::rt::TokenFiles big = loom::rt::load_token_files(dir + "/big.bin", 128256);
  EXPECT_EQ(big[1], 128255u);
  try {
    loom::rt::load_token_files(dir + "/t_*.bin", 99);  // t_002.bin's first token is 99
    ADD_FAILURE() << "a token outside the vocabulary was accepted";
  } catch (const loom::rt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("t_002.bin: token 99 at position 0 is outside the vocabulary"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

// A window may span files; a file truncated while training is an Error naming it at the next
// read (the files were mapped, and the next read of a cut page was SIGBUS: exit 135, no
// checkpoint; issue 33, item 13).
TEST(TokenFiles, WindowsSpanFilesAndATruncatedFileIsAnErrorNotASignal) {
  char tmpl[] = "/tmp/loom-tokens-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::vector<uint16_t> a(5000), b(5000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint16_t>(i % 97), b[i] = static_cast<uint16_t>((i + 3) % 97);
  write_tokens(dir + "/w_000.bin", a);
  write_tokens(dir + "/w_001.bin", b);
  const loom::rt::TokenFiles t = loom::rt::load_token_files(dir + "/w_*.bin", 97);
  std::vector<uint32_t> w(10);
  t.read(4995, 10, w.data());  // the last 5 of a, the first 5 of b
  for (int i = 0; i < 5; ++i) EXPECT_EQ(w[static_cast<size_t>(i)], a[static_cast<size_t>(4995 + i)]);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(w[static_cast<size_t>(5 + i)], b[static_cast<size_t>(i)]);
  ASSERT_EQ(::truncate((dir + "/w_001.bin").c_str(), 1024 + 2 * 100), 0);
  w.resize(100);
  t.read(5000, 100, w.data());  // the part still there reads as before
  try {
    t.read(9000, 10, w.data());
    ADD_FAILURE() << "a read past a truncated file succeeded";
  } catch (const loom::rt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("w_001.bin: the token file changed while in use"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// fuzz_safetensors.cpp — libFuzzer target for Loom's safetensors reader and the GPT-2 loader on
// top of it: the input's bytes are the file (its 8-byte header length, JSON header and data are
// Loom's to check, unlike HDF5's format), and with the input's first byte odd, a fixed small
// config.json beside it so load_gpt2 checks every tensor against it. Every file must load or be
// refused with an Error; none may crash or allocate beyond what it holds.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "loom/rt/error.hpp"
#include "loom/rt/io/safetensors.hpp"
#include "loom/rt/io/gpt2.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    const std::string d = "/dev/shm/loom-fuzz-st-" + std::to_string(getpid());
    mkdir(d.c_str(), 0700);
    FILE* c = std::fopen((d + "/config.json").c_str(), "w");
    std::fputs(R"({"n_layer":1,"n_head":2,"n_embd":4,"n_positions":8,"vocab_size":5})", c);
    std::fclose(c);
    return d;
  }();
  if (size < 1) return 0;
  const std::string path = dir + "/model.safetensors";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data + 1, 1, size - 1, f);
  std::fclose(f);
  try {
    if (data[0] & 1) {
      loom::rt::load_gpt2(dir);
    } else {
      loom::rt::Safetensors st(path);
      for (const auto& e : st.entries()) {
        try {
          st.tensor(e.first);
        } catch (const loom::rt::Error&) {
        }
      }
    }
  } catch (const loom::rt::Error&) {
  }
  return 0;
}

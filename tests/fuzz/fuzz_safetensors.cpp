// fuzz_safetensors.cpp — libFuzzer target for the files of a language model's folder as Hugging
// Face writes them, with the loaders on top. The input's first byte picks what the rest is:
//   0: model.safetensors, read tensor by tensor (its 8-byte header length, JSON header and data
//      are Loom's to check, unlike HDF5's format);
//   1: model.safetensors beside a fixed small config.json, loaded as GPT-2 (every tensor checked
//      against the config);
//   2: the tokenizer's files, cut at NUL bytes into vocab.json, merges.txt, tokenizer.json and
//      tokenizer_config.json, read as loom-serve reads them (tokenizer.json alone too, as the
//      tokenizers library's format), then a text with special tokens encoded and decoded;
//   3: config.json beside a fixed small GPT-2 model.safetensors, loaded as a Hugging Face folder
//      (its architectures decide how).
// Every folder must load or be refused with an Error naming its file; none may crash, recurse off
// the stack or allocate beyond what it holds.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "llm/tokenizer.hpp"
#include "llm/tokenizer_json.hpp"
#include "loom/rt/error.hpp"
#include "loom/rt/io/gpt2.hpp"
#include "loom/rt/io/hf_decoder.hpp"
#include "loom/rt/io/safetensors.hpp"

namespace {

void put(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return;
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

const char* kConfig = R"({"n_layer":1,"n_head":2,"n_embd":4,"n_positions":8,"vocab_size":5})";

// The GPT-2 of kConfig (1 layer, 2 heads, width 4, 8 positions, 5 tokens): its safetensors file.
std::string tiny_gpt2() {
  std::string header = "{", data;
  auto add = [&](const std::string& name, std::vector<int> shape) {
    int n = 1;
    std::string s;
    for (int d : shape) n *= d, s += (s.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + std::string("\"") + name + "\":{\"dtype\":\"F32\",\"shape\":[" + s +
              "],\"data_offsets\":[" + std::to_string(data.size()) + "," + std::to_string(data.size() + 4 * n) + "]}";
    data.append(static_cast<size_t>(4 * n), '\0');
  };
  add("wte.weight", {5, 4}), add("wpe.weight", {8, 4}), add("ln_f.weight", {4}), add("ln_f.bias", {4});
  for (const auto& t : std::vector<std::pair<std::string, std::vector<int>>>{
           {"ln_1.weight", {4}}, {"ln_1.bias", {4}}, {"attn.c_attn.weight", {4, 12}}, {"attn.c_attn.bias", {12}},
           {"attn.c_proj.weight", {4, 4}}, {"attn.c_proj.bias", {4}}, {"ln_2.weight", {4}}, {"ln_2.bias", {4}},
           {"mlp.c_fc.weight", {4, 16}}, {"mlp.c_fc.bias", {16}}, {"mlp.c_proj.weight", {16, 4}}, {"mlp.c_proj.bias", {4}}})
    add("h.0." + t.first, t.second);
  header += "}";
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

void tokenizer(const std::string& dir, const std::string& rest) {
  std::vector<std::string> parts(4);
  size_t at = 0;
  for (size_t k = 0; k < 4 && at <= rest.size(); ++k) {
    const size_t end = k == 3 ? rest.size() : std::min(rest.find('\0', at), rest.size());
    parts[k] = rest.substr(at, end - at);
    at = end + 1;
  }
  const char* names[] = {"vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json"};
  for (size_t k = 0; k < 4; ++k) put(dir + "/" + names[k], parts[k]);
  try {
    loom::serve::llm::HfTokenizer hf(dir + "/tokenizer.json", 300);
    for (int32_t id : hf.encode_with_specials("Hello <|endoftext|> w\u00f6rld \u0928\u092e\u0938\u094d\u0924\u0947 12345  \n\n" + parts[1].substr(0, 64)))
      hf.decode(id);
  } catch (const loom::rt::Error&) {
  } catch (const loom::Error&) {
  }
  loom::serve::llm::BpeTokenizer tok(dir + "/vocab.json", dir + "/merges.txt", 300);
  tok.read_special_tokens(dir);
  tok.encode("Hello <|endoftext|> world<|im_start|>user\n<|im_end|>" + parts[2].substr(0, 64));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {  // model.safetensors and config.json, as each input leaves them
    const std::string d = "/dev/shm/loom-fuzz-st-" + std::to_string(getpid());
    mkdir(d.c_str(), 0700);
    mkdir((d + "/tok").c_str(), 0700);
    return d;
  }();
  if (size < 1) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] & 3) {
      case 0: {
        put(dir + "/model.safetensors", rest);
        loom::rt::Safetensors st(dir + "/model.safetensors");
        for (const auto& e : st.entries()) {
          try {
            st.tensor(e.first);
          } catch (const loom::rt::Error&) {
          }
        }
        break;
      }
      case 1:
        put(dir + "/model.safetensors", rest), put(dir + "/config.json", kConfig);
        loom::rt::load_gpt2(dir);
        break;
      case 2: tokenizer(dir + "/tok", rest); break;
      default:
        put(dir + "/model.safetensors", tiny_gpt2()), put(dir + "/config.json", rest);
        loom::rt::load_hf_decoder(dir, nullptr);
    }
  } catch (const loom::rt::Error&) {
  } catch (const loom::Error&) {
  }
  return 0;
}

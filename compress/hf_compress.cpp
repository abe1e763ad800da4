// hf_compress.cpp — a Hugging Face folder quantized to compressed-tensors int8, and scored.
#include "hf_compress.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>

#include "cli.hpp"
#include "commands.hpp"
#include "loom/rt/io/hf_decoder.hpp"
#include "loom/rt/io/hf_quant.hpp"
#include "loom/rt/io/hf_weights.hpp"
#include "loom/rt/io/safetensors.hpp"
#include "loom/rt/tensor/int8.hpp"

namespace loom::compress {

namespace fs = std::filesystem;

namespace {

constexpr int kWindow = 512;  // tokens a window scores at most

// The weights of the block's linear layers, what quantize turns to int8.
bool quantized_linear(const std::string& name) {
  static const std::regex re(R"(model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)\.weight)");
  return std::regex_match(name, re);
}

std::vector<uint8_t> float_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Every tensor of the folder: the blocks' linear weights as I8 with their weight_scale, the
// others as stored (their dtype kept). Each is read when the writer reaches it.
std::vector<rt::SafetensorsOut> int8_tensors(rt::HfWeights& r) {
  std::vector<rt::SafetensorsOut> out;
  for (const std::string& name : r.names()) {
    const rt::SafetensorsEntry& e = r.entry(name);
    const std::vector<int64_t> shape = e.shape;
    if (!quantized_linear(name) || shape.size() != 2) {
      out.push_back({name, e.dtype, shape, [&r, name, shape] { return r.raw(name, shape); }});
      continue;
    }
    const int rows = static_cast<int>(shape[0]), cols = static_cast<int>(shape[1]);
    auto scale = std::make_shared<std::vector<float>>();  // the weight's, written right after it
    out.push_back({name, "I8", shape, [&r, name, shape, scale, rows, cols] {
                     const rt::Tensor w = r.get(name, shape);
                     *scale = rt::int8::symmetric_scales(w.f32(), rows, cols);
                     std::vector<uint8_t> q(static_cast<size_t>(rows) * static_cast<size_t>(cols));
                     rt::int8::quantize_per_channel(w.f32(), rows, cols, scale->data(), reinterpret_cast<int8_t*>(q.data()));
                     return q;
                   }});
    out.push_back({name + "_scale", "F32", {rows, 1}, [scale] { return float_bytes(*scale); }});
  }
  return out;
}

// The folder's other files (tokenizer, chat template, generation config, ...), copied.
void copy_files(const std::string& in, const std::string& out) {
  for (const auto& f : fs::directory_iterator(in)) {
    const std::string n = f.path().filename().string();
    const bool weights = n == "config.json" || n == "model.safetensors.index.json" || f.path().extension() == ".safetensors";
    if (weights || n.empty() || n[0] == '.' || !fs::is_regular_file(f.path())) continue;
    fs::copy_file(f.path(), fs::path(out) / n);
  }
}

void write_int8_folder(const std::string& in, const std::string& part) {
  const rt::ConfigJson j(in + "/config.json");
  if (j.has("quantization_config")) throw rt::Error(j.path() + ": has a quantization_config already (a quantized folder)");
  rt::HfWeights r(in, [](const std::string& n) { return n; });
  fs::create_directory(part);
  nlohmann::json cfg = j.json();
  cfg["quantization_config"] = rt::int8_quantization_config();
  std::ofstream(part + "/config.json") << cfg.dump(2) << "\n";
  rt::write_safetensors(part + "/model.safetensors", int8_tensors(r), {{"format", "pt"}});
  copy_files(in, part);
}

int64_t folder_params(const std::string& folder, int64_t* bytes) {
  rt::HfWeights r(folder, [](const std::string& n) { return n; });
  int64_t params = 0;
  for (const std::string& n : r.names()) {
    if (n.size() > 6 && (n.compare(n.size() - 6, 6, "_scale") == 0 || n.find("_zero_point") != std::string::npos)) continue;
    int64_t k = 1;
    for (int64_t d : r.entry(n).shape) k *= d;
    params += k;
  }
  *bytes = static_cast<int64_t>(r.bytes());
  return params;
}

}  // namespace

bool is_hf_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(path + "/config.json", ec);
}

GptReport evaluate_hf(const std::string& folder, const std::string& data, int64_t max_tokens, std::vector<int32_t>* argmax) {
  const GptData d = gpt_data(data, "--data");
  if (d.tokens.empty())
    throw Usage{"a Hugging Face folder is scored on token files (tokens:PATTERN, llm.c's format, written with the folder's tokenizer), not text"};
  GptReport r;
  rt::Decoder dec(rt::load_hf_decoder(folder, &r.kind));
  const rt::DecoderConfig& c = dec.config();
  r.precision = rt::decoder_precision(dec.weights());
  r.params = folder_params(folder, &r.file_bytes);
  const int T = std::min(c.context, kWindow);
  r.shape = "layers " + std::to_string(c.layers) + ", heads " + std::to_string(c.heads) + " (" + std::to_string(c.kvh()) +
            " key/value), embd " + std::to_string(c.embd) + ", window " + std::to_string(T) + ", vocab " + std::to_string(c.vocab);
  score_windows(dec, read_token_ids(d.tokens, c.vocab, max_tokens), T, d.tokens, argmax).report(&r);
  return r;
}

int quantize_hf(const std::string& in, const std::string& out, const boost::program_options::variables_map& vm) {
  if (vm["weights-only"].as<bool>() || !vm["observer"].defaulted() || !vm["calib-samples"].defaulted() || !vm["weight-scales"].defaulted())
    throw Usage{"a Hugging Face folder is quantized as int8 weights per channel with each input row quantized as it comes: "
                "--weights-only, --observer, --calib-samples and --weight-scales are for the MLP"};
  const bool scored = !vm["calibration"].defaulted();
  const std::string data = vm["calibration"].as<std::string>();
  if (scored && gpt_data(data, "--calibration").tokens.empty()) throw Usage{"--calibration for a Hugging Face folder is tokens:PATTERN"};
  std::error_code ec;
  if (fs::exists(out, ec)) throw rt::Error(out + ": exists; quantize writes a new folder (nothing written)");
  std::string arch;
  rt::load_hf_decoder(in, &arch);  // the whole folder checked before anything is written
  if (arch == "GPT2LMHeadModel") throw rt::Error(in + ": quantize takes the Llama family's folders, not GPT2LMHeadModel's (nothing written)");
  const std::string part = out + ".part";
  if (fs::exists(part, ec)) throw rt::Error(part + ": exists (left by a quantize that stopped?); remove it first");
  try {
    write_int8_folder(in, part);
    rt::load_hf_decoder(part, nullptr);  // what loom-serve will read
    fs::rename(part, out);
  } catch (...) {
    fs::remove_all(part, ec);
    throw;
  }
  if (scored) {
    std::vector<int32_t> a, b;
    const GptReport before = evaluate_hf(in, data, 0, &a);
    GptReport after = evaluate_hf(out, data, 0, &b);
    int64_t same = 0;
    for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
    after.agreement = a.empty() ? 0 : static_cast<double>(same) / static_cast<double>(a.size());
    print_side_by_side(before, after, "int8");
  }
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace loom::compress

// gpt2.cpp — GPT-2 as people download it (loom/rt/io/gpt2.hpp): config.json read and checked,
// model.safetensors' tensors mapped onto the decoder's weights by GPT-2's names.
#include "loom/rt/io/gpt2.hpp"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "loom/rt/io/json.hpp"
#include "loom/rt/error.hpp"
#include "loom/rt/io/safetensors.hpp"
#include "loom/rt/io/text.hpp"
#include "loom/rt/tensor/finite.hpp"

namespace loom::rt {

namespace {

int config_int(const nlohmann::json& j, const char* key, const char* alt, int lo, int hi, const std::string& path) {
  const nlohmann::json* v = j.contains(key) ? &j[key] : (alt && j.contains(alt) ? &j[alt] : nullptr);
  if (!v) throw Error(path + ": no " + key);
  if (!v->is_number_integer() || v->get<int64_t>() < lo || v->get<int64_t>() > hi)
    throw Error(path + ": " + key + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", not " + visible_text(v->dump()));
  return static_cast<int>(v->get<int64_t>());
}

DecoderConfig read_gpt2_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read");
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > (1 << 20)) throw Error(path + ": larger than 1 MiB");
  nlohmann::json j;
  try {
    j = parse_json_text(ss.str(), path);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(path + ": must be a JSON object");
  DecoderConfig c;
  c.layers = config_int(j, "n_layer", nullptr, 1, 1024, path);
  c.heads = config_int(j, "n_head", nullptr, 1, 1024, path);
  c.embd = config_int(j, "n_embd", nullptr, 1, 1 << 16, path);
  c.context = config_int(j, "n_positions", "n_ctx", 1, 1 << 20, path);
  c.vocab = config_int(j, "vocab_size", nullptr, 1, 1 << 22, path);
  if (c.embd % c.heads) throw Error(path + ": n_embd " + std::to_string(c.embd) + " is not a multiple of n_head " + std::to_string(c.heads));
  if (j.contains("layer_norm_epsilon")) {
    const auto& e = j["layer_norm_epsilon"];
    if (!e.is_number() || !(e.get<double>() > 0) || e.get<double>() > 1) throw Error(path + ": layer_norm_epsilon must be in (0, 1]");
    c.ln_eps = e.get<float>();
  }
  if (j.contains("activation_function") && !j["activation_function"].is_string())
    throw Error(path + ": activation_function must be a string, not " + visible_text(j["activation_function"].dump()));
  const std::string act = j.value("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") c.gelu_tanh = true;
  else if (act == "gelu") c.gelu_tanh = false;
  else throw Error(path + ": activation_function '" + visible_text(act) + "': gelu_new, gelu_pytorch_tanh or gelu");
  return c;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// [in, out] -> [out, in]
Tensor transposed(const Tensor& t) {
  const int64_t r = t.dim(0), c = t.dim(1);
  Tensor o = Tensor::empty({c, r});
  const float* a = t.f32();
  float* b = o.f32();
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) b[j * r + i] = a[i * c + j];
  return o;
}

class Gpt2Reader {
 public:
  explicit Gpt2Reader(const std::string& file) : st_(file), file_(file) {
    for (const auto& e : st_.entries()) {
      std::string n = e.first;
      if (n.rfind("transformer.", 0) == 0) n = n.substr(12);
      const bool buffer = n.size() > 10 && (n.compare(n.size() - 10, 10, ".attn.bias") == 0 ||
                                            (n.size() > 17 && n.compare(n.size() - 17, 17, ".attn.masked_bias") == 0));
      if (buffer) continue;
      if (!names_.emplace(n, e.first).second) throw Error(file + ": tensor '" + n + "' appears twice (with and without 'transformer.')");
    }
  }
  bool has(const std::string& n) const { return names_.count(n) != 0; }
  // The tensor, checked against the shape config.json implies; Conv1D weights transposed.
  Tensor get(const std::string& n, std::vector<int64_t> want, bool conv1d = false) {
    auto it = names_.find(n);
    if (it == names_.end()) throw Error(file_ + ": no tensor '" + n + "' (GPT-2's names, with or without 'transformer.')");
    used_.insert(n);
    const auto& shape = st_.entries().at(it->second).shape;
    if (shape != want)
      throw Error(file_ + ": tensor '" + n + "' has shape " + shape_text(shape) + " where config.json gives " + shape_text(want));
    Tensor t = st_.tensor(it->second);
    if (!cpu::all_finite(t.f32(), t.numel())) throw Error(file_ + ": tensor '" + n + "' holds a NaN or infinite weight");
    return conv1d ? transposed(t) : t;
  }
  void check_all_used() const {
    for (const auto& n : names_)
      if (!used_.count(n.first)) throw Error(file_ + ": tensor '" + n.first + "' is not a GPT-2 parameter of this config");
  }

 private:
  Safetensors st_;
  std::string file_;
  std::map<std::string, std::string> names_;
  std::set<std::string> used_;
};

}  // namespace

DecoderWeights load_gpt2(const std::string& folder) {
  DecoderWeights w;
  w.c = read_gpt2_config(folder + "/config.json");
  const int64_t C = w.c.embd, V = w.c.vocab, T = w.c.context;
  Gpt2Reader r(folder + "/model.safetensors");
  w.wte = r.get("wte.weight", {V, C});
  w.wpe = r.get("wpe.weight", {T, C});
  for (int l = 0; l < w.c.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    DecoderLayer d;
    d.ln1_g = r.get(h + "ln_1.weight", {C});
    d.ln1_b = r.get(h + "ln_1.bias", {C});
    d.w_qkv = r.get(h + "attn.c_attn.weight", {C, 3 * C}, true);
    d.b_qkv = r.get(h + "attn.c_attn.bias", {3 * C});
    d.w_o = r.get(h + "attn.c_proj.weight", {C, C}, true);
    d.b_o = r.get(h + "attn.c_proj.bias", {C});
    d.ln2_g = r.get(h + "ln_2.weight", {C});
    d.ln2_b = r.get(h + "ln_2.bias", {C});
    d.w_fc = r.get(h + "mlp.c_fc.weight", {C, 4 * C}, true);
    d.b_fc = r.get(h + "mlp.c_fc.bias", {4 * C});
    d.w_p = r.get(h + "mlp.c_proj.weight", {4 * C, C}, true);
    d.b_p = r.get(h + "mlp.c_proj.bias", {C});
    w.layers.push_back(std::move(d));
  }
  w.lnf_g = r.get("ln_f.weight", {C});
  w.lnf_b = r.get("ln_f.bias", {C});
  // lm_head is tied to wte in GPT-2; a file that carries it (GPT2LMHeadModel's state dict) is read.
  w.lm_head = r.has("lm_head.weight") ? r.get("lm_head.weight", {V, C}) : w.wte;
  r.check_all_used();
  return w;
}

}  // namespace loom::rt

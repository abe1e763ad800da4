// gpt2.cpp — GPT-2 as people download it (loom/rt/io/gpt2.hpp): config.json read and checked,
// model.safetensors' tensors mapped onto the decoder's weights by GPT-2's names.
#include "loom/rt/io/gpt2.hpp"

#include <cstring>

#include "loom/rt/error.hpp"
#include "loom/rt/io/hf_weights.hpp"
#include "loom/rt/io/text.hpp"

namespace loom::rt {

namespace {

DecoderConfig read_gpt2_config(const std::string& path) {
  const ConfigJson j(path);
  DecoderConfig c;
  c.layers = j.integer("n_layer", 1, 1024);
  c.heads = j.integer("n_head", 1, 1024);
  c.embd = j.integer("n_embd", 1, 1 << 16);
  c.context = j.integer("n_positions", 1, 1 << 20, INT32_MIN, "n_ctx");
  c.vocab = j.integer("vocab_size", 1, 1 << 22);
  if (c.embd % c.heads) throw Error(path + ": n_embd " + std::to_string(c.embd) + " is not a multiple of n_head " + std::to_string(c.heads));
  if (j.has("layer_norm_epsilon")) {
    const auto& e = j.json()["layer_norm_epsilon"];
    if (!e.is_number() || !(e.get<double>() > 0) || e.get<double>() > 1) throw Error(path + ": layer_norm_epsilon must be in (0, 1]");
    c.ln_eps = e.get<float>();
  }
  const std::string act = j.string("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") c.gelu_tanh = true;
  else if (act == "gelu") c.gelu_tanh = false;
  else throw Error(path + ": activation_function '" + visible_text(act) + "': gelu_new, gelu_pytorch_tanh or gelu");
  return c;
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

// GPT-2's names with or without "transformer.", its attention buffers ignored.
std::string gpt2_name(const std::string& stored) {
  std::string n = stored.rfind("transformer.", 0) == 0 ? stored.substr(12) : stored;
  auto ends = [&n](const char* t) { return n.size() > std::strlen(t) && n.compare(n.size() - std::strlen(t), std::strlen(t), t) == 0; };
  return ends(".attn.bias") || ends(".attn.masked_bias") ? "" : n;
}

class Gpt2Reader {
 public:
  explicit Gpt2Reader(const std::string& folder) : w_(folder, gpt2_name) {}
  bool has(const std::string& n) const { return w_.has(n); }
  // The tensor, checked against the shape config.json implies; Conv1D weights transposed.
  Tensor get(const std::string& n, std::vector<int64_t> want, bool conv1d = false) {
    if (!w_.has(n)) throw Error(w_.file() + ": no tensor '" + n + "' (GPT-2's names, with or without 'transformer.')");
    Tensor t = w_.get(n, want);
    return conv1d ? transposed(t) : t;
  }
  void check_all_used() const { w_.check_all_used(); }

 private:
  HfWeights w_;
};

}  // namespace

DecoderWeights load_gpt2(const std::string& folder) {
  DecoderWeights w;
  w.c = read_gpt2_config(folder + "/config.json");
  const int64_t C = w.c.embd, V = w.c.vocab, T = w.c.context;
  Gpt2Reader r(folder);
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

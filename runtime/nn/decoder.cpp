// decoder.cpp — the inference decoder over a paged KV cache (decoder.hpp): weights from Loom's gpt
// or a GPT-2 checkpoint, and the forward pass that mixes prefill and decode rows.
#include "loom/rt/nn/decoder.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gpt_kernels.hpp"
#include "loom/rt/error.hpp"
#include "loom/rt/io/safetensors.hpp"
#include "loom/rt/tensor/vec.hpp"

namespace loom::rt {

using namespace gptk;

size_t DecoderWeights::bytes() const {
  size_t n = wte.bytes() + wpe.bytes() + lnf_g.bytes() + lnf_b.bytes() + (lm_head.f32() == wte.f32() ? 0 : lm_head.bytes());
  for (const auto& l : layers)
    for (const Tensor* t : {&l.ln1_g, &l.ln1_b, &l.w_qkv, &l.b_qkv, &l.w_o, &l.b_o, &l.ln2_g, &l.ln2_b, &l.w_fc, &l.b_fc, &l.w_p, &l.b_p})
      n += t->bytes();
  return n;
}

DecoderWeights decoder_from_gpt(Gpt& gpt) {
  std::map<std::string, Tensor> p;
  for (auto& prm : gpt.params()) p[prm.name] = prm.value;
  const GptConfig& g = gpt.config();
  DecoderWeights w;
  w.c = {g.vocab, g.context, g.layers, g.heads, g.embd, kLnEps, false};
  w.wte = p.at("wte.weight");
  w.wpe = p.at("wpe.weight");
  for (int l = 0; l < g.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    w.layers.push_back({p.at(h + "ln_1.weight"), p.at(h + "ln_1.bias"), p.at(h + "attn.c_attn.weight"), p.at(h + "attn.c_attn.bias"),
                        p.at(h + "attn.c_proj.weight"), p.at(h + "attn.c_proj.bias"), p.at(h + "ln_2.weight"), p.at(h + "ln_2.bias"),
                        p.at(h + "mlp.c_fc.weight"), p.at(h + "mlp.c_fc.bias"), p.at(h + "mlp.c_proj.weight"), p.at(h + "mlp.c_proj.bias")});
  }
  w.lnf_g = p.at("ln_f.weight");
  w.lnf_b = p.at("ln_f.bias");
  w.lm_head = p.at("lm_head.weight");
  return w;
}

namespace {

int config_int(const nlohmann::json& j, const char* key, const char* alt, int lo, int hi, const std::string& path) {
  const nlohmann::json* v = j.contains(key) ? &j[key] : (alt && j.contains(alt) ? &j[alt] : nullptr);
  if (!v) throw Error(path + ": no " + key);
  if (!v->is_number_integer() || v->get<int64_t>() < lo || v->get<int64_t>() > hi)
    throw Error(path + ": " + key + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", not " + v->dump());
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
    j = nlohmann::json::parse(ss.str());
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
  const std::string act = j.value("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") c.gelu_tanh = true;
  else if (act == "gelu") c.gelu_tanh = false;
  else throw Error(path + ": activation_function '" + act + "': gelu_new, gelu_pytorch_tanh or gelu");
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
    for (int64_t i = 0, k = t.numel(); i < k; ++i)
      if (!std::isfinite(t.f32()[i])) throw Error(file_ + ": tensor '" + n + "' holds a NaN or infinite weight");
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

KvCache::KvCache(const DecoderConfig& c, int blocks, int block_tokens)
    : blocks_(blocks), bt_(block_tokens), c_(c.embd) {
  if (blocks <= 0 || block_tokens <= 0) throw Error("KV cache: blocks and block_tokens must be positive");
  const size_t n = static_cast<size_t>(c.layers) * static_cast<size_t>(blocks) * static_cast<size_t>(block_tokens) * static_cast<size_t>(c.embd);
  k_.reset(new float[n]);
  v_.reset(new float[n]);
}

namespace {

// GPT-2's gelu_new: 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))), v = x + bias; tanh(u) = 1 - 2 / (1 + e^{2u}).
LOOM_VEC void bias_gelu_tanh_rows(const float* x, const float* bias, float* y, int64_t cols, int64_t lo, int64_t hi) {
  for (int64_t r = lo; r < hi; ++r)
    for (int64_t k = 0; k < cols; ++k) {
      const float v = x[r * cols + k] + bias[k];
      const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
      const float t = 1.0f - 2.0f / (1.0f + vec::exp(2.0f * u));
      y[r * cols + k] = 0.5f * v * (1.0f + t);
    }
}

// One row, every head: softmax(q_h k_{t,h} / sqrt(hs)) over t <= p, times v_{t,h}, reading each
// position's key and value rows through the table once for all heads (contiguous C floats), so
// that the loops stream and vectorise. w holds H x (p + 1) scores.
LOOM_VEC void attend_row(const float* q, float* y, KvCache& kv, int layer, const std::vector<int32_t>& table, int p, int heads,
                         int hs, float scale, float* w) {
  const int bt = kv.block_tokens(), n = p + 1;
  for (int t = 0; t < n; ++t) {
    const float* k = kv.k(layer, table[static_cast<size_t>(t / bt)], t % bt);
    for (int h = 0; h < heads; ++h) w[h * n + t] = vec::dot(q + h * hs, k + h * hs, hs) * scale;
  }
  for (int h = 0; h < heads; ++h) {
    float* wh = w + h * n;
    float top = -std::numeric_limits<float>::infinity();
    for (int t = 0; t < n; ++t) top = std::max(top, wh[t]);
    float sum = 0.0f;
    for (int t = 0; t < n; ++t) sum += (wh[t] = vec::exp(wh[t] - top));
    const float inv = 1.0f / sum;
    for (int t = 0; t < n; ++t) wh[t] *= inv;
  }
  const int c = heads * hs;
  for (int d = 0; d < c; ++d) y[d] = 0.0f;
  for (int t = 0; t < n; ++t) {
    const float* v = kv.v(layer, table[static_cast<size_t>(t / bt)], t % bt);
    for (int h = 0; h < heads; ++h) {
      const float a = w[h * n + t];
      float* yh = y + h * hs;
      const float* vh = v + h * hs;
      for (int d = 0; d < hs; ++d) yh[d] += a * vh[d];
    }
  }
}

}  // namespace

void Decoder::attention(KvCache& kv, const DecodeBatch& b, int layer) {
  const int C = w_.c.embd, H = w_.c.heads, hs = C / H, bt = kv.block_tokens();
  const int64_t n = static_cast<int64_t>(b.tokens.size());
  float* qkv = qkv_.f32();
  for (int64_t i = 0; i < n; ++i) {  // every row's key and value into its slot first: a prefill's rows see each other
    const auto& table = *b.tables[static_cast<size_t>(b.seq[static_cast<size_t>(i)])];
    const int p = b.positions[static_cast<size_t>(i)];
    std::copy_n(qkv + i * 3 * C + C, C, kv.k(layer, table[static_cast<size_t>(p / bt)], p % bt));
    std::copy_n(qkv + i * 3 * C + 2 * C, C, kv.v(layer, table[static_cast<size_t>(p / bt)], p % bt));
  }
  ensure(att_, {n, C});
  float* y = att_.f32();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int ctx = w_.c.context;
  for_range(n, 2, [&](int64_t lo, int64_t hi) {
    std::vector<float> w(static_cast<size_t>(ctx) * static_cast<size_t>(H));
    for (int64_t i = lo; i < hi; ++i)
      attend_row(qkv + i * 3 * C, y + i * C, kv, layer, *b.tables[static_cast<size_t>(b.seq[static_cast<size_t>(i)])],
                 b.positions[static_cast<size_t>(i)], H, hs, scale, w.data());
  });
}

void Decoder::forward(KvCache& kv, const DecodeBatch& b, Tensor& logits) {
  const int C = w_.c.embd;
  const int64_t n = static_cast<int64_t>(b.tokens.size());
  ensure(x_, {n, C});
  for (int64_t i = 0; i < n; ++i) {
    const int32_t tok = b.tokens[static_cast<size_t>(i)], pos = b.positions[static_cast<size_t>(i)];
    if (tok < 0 || tok >= w_.c.vocab || pos < 0 || pos >= w_.c.context)
      throw Error("decoder: token " + std::to_string(tok) + " at position " + std::to_string(pos) + " is outside the model");
    const float *e = w_.wte.f32() + static_cast<int64_t>(tok) * C, *pe = w_.wpe.f32() + static_cast<int64_t>(pos) * C;
    float* x = x_.f32() + i * C;
    for (int k = 0; k < C; ++k) x[k] = e[k] + pe[k];
  }
  for (int l = 0; l < w_.c.layers; ++l) {
    const DecoderLayer& L = w_.layers[static_cast<size_t>(l)];
    layernorm_fwd(x_, L.ln1_g, L.ln1_b, ln_, mean_, rstd_, w_.c.ln_eps);
    linear_fwd(ln_, L.w_qkv, &L.b_qkv, qkv_);
    attention(kv, b, l);
    linear_fwd(att_, L.w_o, &L.b_o, proj_);
    add(x_, proj_, x_);
    layernorm_fwd(x_, L.ln2_g, L.ln2_b, ln_, mean_, rstd_, w_.c.ln_eps);
    linear_fwd(ln_, L.w_fc, nullptr, fc_);
    if (w_.c.gelu_tanh) {
      ensure(fc_act_, fc_.shape());
      const int64_t cols = fc_.dim(1);
      const float *xp = fc_.f32(), *bp = L.b_fc.f32();
      float* yp = fc_act_.f32();
      for_range(n, 16, [&](int64_t lo, int64_t hi) { bias_gelu_tanh_rows(xp, bp, yp, cols, lo, hi); });
    } else {
      bias_gelu_fwd(fc_, L.b_fc, fc_act_);
    }
    linear_fwd(fc_act_, L.w_p, &L.b_p, proj_);
    add(x_, proj_, x_);
  }
  const int64_t r = static_cast<int64_t>(b.logit_rows.size());
  ensure(last_, {r, C});
  for (int64_t i = 0; i < r; ++i) std::copy_n(x_.f32() + static_cast<int64_t>(b.logit_rows[static_cast<size_t>(i)]) * C, C, last_.f32() + i * C);
  layernorm_fwd(last_, w_.lnf_g, w_.lnf_b, ln_, mean_, rstd_, w_.c.ln_eps);
  linear_fwd(ln_, w_.lm_head, nullptr, logits);
}

}  // namespace loom::rt

// decoder.cpp — the inference decoder over a paged KV cache (decoder.hpp): weights from Loom's gpt,
// and the forward pass that mixes prefill and decode rows (GPT-2's weights: io/gpt2.cpp).
#include "loom/rt/nn/decoder.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "gpt_kernels.hpp"
#include "loom/rt/error.hpp"
#include "loom/rt/tensor/vec.hpp"

namespace loom::rt {

using namespace gptk;

DecoderWeights decoder_from_gpt(Gpt& gpt) {
  std::map<std::string, Tensor> p;
  for (auto& prm : gpt.params()) p[prm.name] = prm.value;
  const GptConfig& g = gpt.config();
  DecoderWeights w;
  w.c = {g.vocab, g.context, g.layers, g.heads, g.embd, kLnEps, false, g.head_size};
  w.wte = p.at("wte.weight");
  w.wpe = p.at("wpe.weight");
  for (int l = 0; l < g.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    w.layers.push_back({p.at(h + "ln_1.weight"), p.at(h + "ln_1.bias"), p.at(h + "attn.c_attn.weight"), p.at(h + "attn.c_attn.bias"),
                        p.at(h + "attn.c_proj.weight"), p.at(h + "attn.c_proj.bias"), p.at(h + "ln_2.weight"), p.at(h + "ln_2.bias"),
                        p.at(h + "mlp.c_fc.weight"), p.at(h + "mlp.c_fc.bias"), p.at(h + "mlp.c_proj.weight"), p.at(h + "mlp.c_proj.bias"), {}, {}, {}, {}});
  }
  w.lnf_g = p.at("ln_f.weight");
  w.lnf_b = p.at("ln_f.bias");
  w.lm_head = p.at("lm_head.weight");
  return w;
}

KvCache::KvCache(const DecoderConfig& c, int blocks, int block_tokens)
    : blocks_(blocks), bt_(block_tokens), c_(c.attn()) {
  if (blocks <= 0 || block_tokens <= 0) throw Error("KV cache: blocks and block_tokens must be positive");
  const size_t n = static_cast<size_t>(c.layers) * static_cast<size_t>(blocks) * static_cast<size_t>(block_tokens) * static_cast<size_t>(c.attn());
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
  const int C = w_.c.attn(), H = w_.c.heads, hs = w_.c.hs(), bt = kv.block_tokens();
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

void Decoder::linear(const Tensor& x, const Tensor& w, const Int8Linear& q, const Tensor* bias, Tensor& y) {
  if (!q) return linear_fwd(x, w, bias, y);
  ensure(y, {x.dim(0), q->out()});
  q->run(x.f32(), static_cast<int>(x.dim(0)), bias ? bias->f32() : nullptr, y.f32());
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
    linear(ln_, L.w_qkv, L.q_qkv, &L.b_qkv, qkv_);
    attention(kv, b, l);
    linear(att_, L.w_o, L.q_o, &L.b_o, proj_);
    add(x_, proj_, x_);
    layernorm_fwd(x_, L.ln2_g, L.ln2_b, ln_, mean_, rstd_, w_.c.ln_eps);
    linear(ln_, L.w_fc, L.q_fc, nullptr, fc_);
    if (w_.c.gelu_tanh) {
      ensure(fc_act_, fc_.shape());
      const int64_t cols = fc_.dim(1);
      const float *xp = fc_.f32(), *bp = L.b_fc.f32();
      float* yp = fc_act_.f32();
      for_range(n, 16, [&](int64_t lo, int64_t hi) { bias_gelu_tanh_rows(xp, bp, yp, cols, lo, hi); });
    } else {
      bias_gelu_fwd(fc_, L.b_fc, fc_act_);
    }
    linear(fc_act_, L.w_p, L.q_p, &L.b_p, proj_);
    add(x_, proj_, x_);
  }
  const int64_t r = static_cast<int64_t>(b.logit_rows.size());
  ensure(last_, {r, C});
  for (int64_t i = 0; i < r; ++i) std::copy_n(x_.f32() + static_cast<int64_t>(b.logit_rows[static_cast<size_t>(i)]) * C, C, last_.f32() + i * C);
  layernorm_fwd(last_, w_.lnf_g, w_.lnf_b, ln_, mean_, rstd_, w_.c.ln_eps);
  linear(ln_, w_.lm_head, w_.q_lm_head, nullptr, logits);
}

}  // namespace loom::rt

// decoder.cpp — the inference decoder over a paged KV cache (decoder.hpp): weights from Loom's gpt,
// and the forward pass that mixes prefill and decode rows (GPT-2's and the Llama family's weights:
// io/gpt2.cpp, io/hf_decoder.cpp).
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
  w.c.vocab = g.vocab, w.c.context = g.context, w.c.layers = g.layers, w.c.heads = g.heads, w.c.embd = g.embd;
  w.c.ln_eps = kLnEps, w.c.head_size = g.head_size;
  w.wte = p.at("wte.weight");
  w.wpe = p.at("wpe.weight");
  for (int l = 0; l < g.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    DecoderLayer d;
    d.ln1_g = p.at(h + "ln_1.weight"), d.ln1_b = p.at(h + "ln_1.bias");
    d.w_qkv = p.at(h + "attn.c_attn.weight"), d.b_qkv = p.at(h + "attn.c_attn.bias");
    d.w_o = p.at(h + "attn.c_proj.weight"), d.b_o = p.at(h + "attn.c_proj.bias");
    d.ln2_g = p.at(h + "ln_2.weight"), d.ln2_b = p.at(h + "ln_2.bias");
    d.w_fc = p.at(h + "mlp.c_fc.weight"), d.b_fc = p.at(h + "mlp.c_fc.bias");
    d.w_p = p.at(h + "mlp.c_proj.weight"), d.b_p = p.at(h + "mlp.c_proj.bias");
    w.layers.push_back(std::move(d));
  }
  w.lnf_g = p.at("ln_f.weight");
  w.lnf_b = p.at("ln_f.bias");
  w.lm_head = p.at("lm_head.weight");
  return w;
}

KvCache::KvCache(const DecoderConfig& c, int blocks, int block_tokens)
    : blocks_(blocks), bt_(block_tokens), c_(c.kv()) {
  if (blocks <= 0 || block_tokens <= 0) throw Error("KV cache: blocks and block_tokens must be positive");
  const size_t n = static_cast<size_t>(c.layers) * static_cast<size_t>(blocks) * static_cast<size_t>(block_tokens) * static_cast<size_t>(c.kv());
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

// One row, every head: softmax(q_h k_{t,g} / sqrt(hs)) over t0 <= t <= p, times v_{t,g}, g the
// key/value head of q head h (h / (heads / kv heads)), reading each position's key and value
// rows through the table once for all heads (contiguous floats), so that the loops stream and
// vectorise. w holds H x (p + 1 - t0) scores.
struct RowAttention {
  int heads, group, hs, t0;
  float scale;
};
LOOM_VEC void attend_row(const float* q, float* y, KvCache& kv, int layer, const std::vector<int32_t>& table, int p, const RowAttention& a,
                         float* w) {
  const int bt = kv.block_tokens(), n = p + 1 - a.t0, hs = a.hs, heads = a.heads;
  for (int t = 0; t < n; ++t) {
    const int at = a.t0 + t;
    const float* k = kv.k(layer, table[static_cast<size_t>(at / bt)], at % bt);
    for (int h = 0; h < heads; ++h) w[h * n + t] = vec::dot(q + h * hs, k + (h / a.group) * hs, hs) * a.scale;
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
    const int at = a.t0 + t;
    const float* v = kv.v(layer, table[static_cast<size_t>(at / bt)], at % bt);
    for (int h = 0; h < heads; ++h) {
      const float s = w[h * n + t];
      float* yh = y + h * hs;
      const float* vh = v + (h / a.group) * hs;
      for (int d = 0; d < hs; ++d) yh[d] += s * vh[d];
    }
  }
}

// RMSNorm: y = x / sqrt(mean(x^2) + eps) * g, one row of n values.
LOOM_VEC void rms_row(const float* x, const float* g, float* y, int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t k = 0; k < n; ++k) ss += x[k] * x[k];
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t k = 0; k < n; ++k) y[k] = x[k] * r * g[k];
}

// x [rows, 2F] holding gate then up per row (plus their bias) -> y [rows, F] = silu(gate) * up.
LOOM_VEC void swiglu_rows(const float* x, const float* bias, float* y, int64_t f, int64_t lo, int64_t hi) {
  for (int64_t r = lo; r < hi; ++r) {
    const float *g = x + r * 2 * f, *u = g + f;
    float* o = y + r * f;
    for (int64_t k = 0; k < f; ++k) {
      const float a = g[k] + (bias ? bias[k] : 0.0f), b = u[k] + (bias ? bias[f + k] : 0.0f);
      o[k] = a / (1.0f + vec::exp(-a)) * b;
    }
  }
}

// Turns each of `heads` heads (hs apart) of one row by its position: rotate_half's pairs (i, i + d/2).
void rope_row(float* x, int heads, int hs, const RopeConfig& r, const float* inv_freq, int pos) {
  const int half = r.dim / 2;
  float cs[512], sn[512];  // dim <= 1024: checked at load
  for (int i = 0; i < half; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];
    cs[i] = std::cos(angle) * r.attention_factor;
    sn[i] = std::sin(angle) * r.attention_factor;
  }
  for (int h = 0; h < heads; ++h) {
    float* v = x + h * hs;
    for (int i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cs[i] - b * sn[i];
      v[i + half] = b * cs[i] + a * sn[i];
    }
  }
}

// Hugging Face's dynamic NTK scaling: at a sequence length past the original context, the base
// becomes theta (factor len / original - (factor - 1))^(dim / (dim - 2)).
std::vector<float> dynamic_inv_freq(const RopeConfig& r, int len) {
  const double base = r.theta * std::pow(r.dynamic_factor * len / r.original - (r.dynamic_factor - 1), double(r.dim) / (r.dim - 2));
  std::vector<float> f(static_cast<size_t>(r.dim / 2));
  for (int i = 0; i < r.dim / 2; ++i) f[static_cast<size_t>(i)] = static_cast<float>(1.0 / std::pow(base, double(2 * i) / r.dim));
  return f;
}

}  // namespace

void Decoder::attention(KvCache& kv, const DecodeBatch& b, int layer) {
  const int A = w_.c.attn(), K = w_.c.kv(), H = w_.c.heads, hs = w_.c.hs(), bt = kv.block_tokens(), W = w_.c.sliding_window;
  const int row = A + 2 * K;
  const int64_t n = static_cast<int64_t>(b.tokens.size());
  float* qkv = qkv_.f32();
  for (int64_t i = 0; i < n; ++i) {  // every row's key and value into its slot first: a prefill's rows see each other
    const auto& table = *b.tables[static_cast<size_t>(b.seq[static_cast<size_t>(i)])];
    const int p = b.positions[static_cast<size_t>(i)];
    std::copy_n(qkv + i * row + A, K, kv.k(layer, table[static_cast<size_t>(p / bt)], p % bt));
    std::copy_n(qkv + i * row + A + K, K, kv.v(layer, table[static_cast<size_t>(p / bt)], p % bt));
  }
  ensure(att_, {n, A});
  float* y = att_.f32();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int ctx = W ? std::min(W, w_.c.context) : w_.c.context;
  for_range(n, 2, [&](int64_t lo, int64_t hi) {
    std::vector<float> w(static_cast<size_t>(ctx) * static_cast<size_t>(H));
    for (int64_t i = lo; i < hi; ++i) {
      const int p = b.positions[static_cast<size_t>(i)];
      const RowAttention ra{H, H / w_.c.kvh(), hs, W ? std::max(0, p - W + 1) : 0, scale};
      attend_row(qkv + i * row, y + i * A, kv, layer, *b.tables[static_cast<size_t>(b.seq[static_cast<size_t>(i)])], p, ra, w.data());
    }
  });
}

void Decoder::norm(const Tensor& x, const Tensor& g, const Tensor& bias, Tensor& y) {
  if (!w_.c.rms_norm) return layernorm_fwd(x, g, bias, y, mean_, rstd_, w_.c.ln_eps);
  ensure(y, x.shape());
  const int64_t cols = x.dim(1);
  const float *xp = x.f32(), *gp = g.f32();
  float* yp = y.f32();
  const float eps = w_.c.ln_eps;
  for_range(x.dim(0), 16, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) rms_row(xp + r * cols, gp, yp + r * cols, cols, eps);
  });
}

// Qwen3's per-head RMSNorm of q and k, then RoPE on both, before the keys enter the cache.
void Decoder::position_in(const DecodeBatch& b, int layer) {
  const DecoderConfig& c = w_.c;
  const DecoderLayer& L = w_.layers[static_cast<size_t>(layer)];
  const int A = c.attn(), K = c.kv(), hs = c.hs(), row = A + 2 * K;
  const int64_t n = static_cast<int64_t>(b.tokens.size());
  std::vector<int> len(b.tables.size(), 0);  // dynamic scaling: each sequence's length in this batch
  for (int64_t i = 0; i < n; ++i)
    len[static_cast<size_t>(b.seq[static_cast<size_t>(i)])] = std::max(len[static_cast<size_t>(b.seq[static_cast<size_t>(i)])], b.positions[static_cast<size_t>(i)] + 1);
  float* qkv = qkv_.f32();
  for_range(n, 8, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float* q = qkv + i * row;
      if (c.qk_norm) {
        for (int h = 0; h < c.heads; ++h) rms_row(q + h * hs, L.q_norm.f32(), q + h * hs, hs, c.ln_eps);
        for (int h = 0; h < c.kvh(); ++h) rms_row(q + A + h * hs, L.k_norm.f32(), q + A + h * hs, hs, c.ln_eps);
      }
      if (!c.rope.dim) continue;
      const int seq_len = len[static_cast<size_t>(b.seq[static_cast<size_t>(i)])];
      std::vector<float> grown;
      if (c.rope.dynamic_factor > 0 && seq_len > c.rope.original) grown = dynamic_inv_freq(c.rope, seq_len);
      const float* f = grown.empty() ? c.rope.inv_freq.data() : grown.data();
      // q's heads and k's follow each other in the row: one turn of both, cos and sin computed once
      rope_row(q, c.heads + c.kvh(), hs, c.rope, f, b.positions[static_cast<size_t>(i)]);
    }
  });
}

void Decoder::mlp(const DecoderLayer& L, int64_t n) {
  const Tensor* fc_bias = L.b_fc.defined() ? &L.b_fc : nullptr;
  linear(ln_, L.w_fc, L.q_fc, L.h_fc, nullptr, fc_);
  const int64_t cols = fc_.dim(1);
  const float *xp = fc_.f32(), *bp = fc_bias ? fc_bias->f32() : nullptr;
  if (w_.c.swiglu) {
    ensure(fc_act_, {n, cols / 2});
    float* yp = fc_act_.f32();
    for_range(n, 16, [&](int64_t lo, int64_t hi) { swiglu_rows(xp, bp, yp, cols / 2, lo, hi); });
  } else if (w_.c.gelu_tanh) {
    ensure(fc_act_, fc_.shape());
    float* yp = fc_act_.f32();
    for_range(n, 16, [&](int64_t lo, int64_t hi) { bias_gelu_tanh_rows(xp, bp, yp, cols, lo, hi); });
  } else {
    bias_gelu_fwd(fc_, L.b_fc, fc_act_);
  }
  linear(fc_act_, L.w_p, L.q_p, L.h_p, L.b_p.defined() ? &L.b_p : nullptr, proj_);
}

void Decoder::linear(const Tensor& x, const Tensor& w, const Int8Linear& q, const Linear16& h, const Tensor* bias, Tensor& y) {
  if (h) {
    ensure(y, {x.dim(0), h->out()});
    return h->run(x.f32(), static_cast<int>(x.dim(0)), bias ? bias->f32() : nullptr, y.f32());
  }
  if (!q) return linear_fwd(x, w, bias, y);
  ensure(y, {x.dim(0), q->out()});
  q->run(x.f32(), static_cast<int>(x.dim(0)), bias ? bias->f32() : nullptr, y.f32());
}

void Decoder::forward(KvCache& kv, const DecodeBatch& b, Tensor& logits) {
  const int C = w_.c.embd;
  const int64_t n = static_cast<int64_t>(b.tokens.size());
  const bool learned = w_.c.rope.dim == 0;
  ensure(x_, {n, C});
  for (int64_t i = 0; i < n; ++i) {
    const int32_t tok = b.tokens[static_cast<size_t>(i)], pos = b.positions[static_cast<size_t>(i)];
    if (tok < 0 || tok >= w_.c.vocab || pos < 0 || pos >= w_.c.context)
      throw Error("decoder: token " + std::to_string(tok) + " at position " + std::to_string(pos) + " is outside the model");
    float* x = x_.f32() + i * C;
    if (w_.h_wte) {
      w_.h_wte->row(tok, x);
      continue;  // 16-bit embeddings come with RoPE: no position rows to add
    }
    const float* e = w_.wte.f32() + static_cast<int64_t>(tok) * C;
    if (!learned) {
      std::copy_n(e, C, x);
      continue;
    }
    const float* pe = w_.wpe.f32() + static_cast<int64_t>(pos) * C;
    for (int k = 0; k < C; ++k) x[k] = e[k] + pe[k];
  }
  for (int l = 0; l < w_.c.layers; ++l) {
    const DecoderLayer& L = w_.layers[static_cast<size_t>(l)];
    norm(x_, L.ln1_g, L.ln1_b, ln_);
    linear(ln_, L.w_qkv, L.q_qkv, L.h_qkv, L.b_qkv.defined() ? &L.b_qkv : nullptr, qkv_);
    if (w_.c.qk_norm || !learned) position_in(b, l);
    attention(kv, b, l);
    linear(att_, L.w_o, L.q_o, L.h_o, L.b_o.defined() ? &L.b_o : nullptr, proj_);
    add(x_, proj_, x_);
    norm(x_, L.ln2_g, L.ln2_b, ln_);
    mlp(L, n);
    add(x_, proj_, x_);
  }
  const int64_t r = static_cast<int64_t>(b.logit_rows.size());
  ensure(last_, {r, C});
  for (int64_t i = 0; i < r; ++i) std::copy_n(x_.f32() + static_cast<int64_t>(b.logit_rows[static_cast<size_t>(i)]) * C, C, last_.f32() + i * C);
  norm(last_, w_.lnf_g, w_.lnf_b, ln_);
  linear(ln_, w_.lm_head, w_.q_lm_head, w_.h_lm_head, nullptr, logits);
}

}  // namespace loom::rt

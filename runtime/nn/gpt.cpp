// gpt.cpp — forward and backward of the character-level GPT. Shapes (N = B*T rows):
//   x = wte[tok] + wpe[t]                                     [N, C]
//   per block: a = LN1(x); qkv = a Wqkv^T + b                 [N, 3C]
//              att = softmax(q k^T / sqrt(hs), causal)         [B, H, T, T]
//              x += (att v) Wo^T + b
//              x += GELU(LN2(x) Wfc^T + b) Wp^T + b            (hidden 4C)
//   logits = LN_f(x) Wlm^T                                     [N, V]
#include "loom/rt/nn/gpt.hpp"

#include <cmath>
#include <cstring>
#include <sstream>

#include "loom/rt/tensor/kernels.hpp"

namespace loom::rt {

namespace {

constexpr float kLnEps = 1e-5f;

Tensor& ensure(Tensor& t, std::vector<int64_t> shape) {
  if (!t.defined() || t.shape() != shape) t = Tensor::empty(std::move(shape));
  return t;
}

// y[N,out] = x[N,in] W[out,in]^T (+ b)
void linear_fwd(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
  const int n = static_cast<int>(x.dim(0)), in = static_cast<int>(x.dim(1)), out = static_cast<int>(w.dim(0));
  ensure(y, {n, out});
  cpu::gemm(false, true, n, out, in, 1.0f, x.f32(), in, w.f32(), in, 0.0f, y.f32(), out);
  if (b) cpu::bias_act(y.f32(), b->f32(), n, out, cpu::Act::kNone);
}

// dW = dy^T x, db = sum dy, dx = dy W (overwrites; dx optional)
void linear_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dw, Tensor* db, Tensor* dx) {
  const int n = static_cast<int>(x.dim(0)), in = static_cast<int>(x.dim(1)), out = static_cast<int>(w.dim(0));
  cpu::gemm(true, false, out, in, n, 1.0f, dy.f32(), out, x.f32(), in, 0.0f, dw.f32(), in);
  if (db) {
    db->fill(0.0f);
    cpu::bias_grad(dy.f32(), db->f32(), n, out);
  }
  if (dx) {
    ensure(*dx, {n, in});
    cpu::gemm(false, false, n, in, out, 1.0f, dy.f32(), out, w.f32(), in, 0.0f, dx->f32(), in);
  }
}

void layernorm_fwd(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean, Tensor& rstd) {
  const int64_t n = x.dim(0), c = x.dim(1);
  ensure(y, {n, c});
  ensure(mean, {n});
  ensure(rstd, {n});
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x.f32() + r * c;
    double m = 0, v = 0;
    for (int64_t k = 0; k < c; ++k) m += xr[k];
    m /= c;
    for (int64_t k = 0; k < c; ++k) v += (xr[k] - m) * (xr[k] - m);
    v /= c;
    float s = static_cast<float>(1.0 / std::sqrt(v + kLnEps));
    mean.f32()[r] = static_cast<float>(m);
    rstd.f32()[r] = s;
    float* yr = y.f32() + r * c;
    for (int64_t k = 0; k < c; ++k) yr[k] = (xr[k] - static_cast<float>(m)) * s * gamma.f32()[k] + beta.f32()[k];
  }
}

// dx += LN backward (dx accumulates: residual streams add), dgamma/dbeta overwritten.
void layernorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& gamma,
                   Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  const int64_t n = x.dim(0), c = x.dim(1);
  dgamma.fill(0.0f);
  dbeta.fill(0.0f);
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x.f32() + r * c;
    const float* dyr = dy.f32() + r * c;
    float* dxr = dx.f32() + r * c;
    const float m = mean.f32()[r], s = rstd.f32()[r];
    double mean_dxhat = 0, mean_dxhat_xhat = 0;
    for (int64_t k = 0; k < c; ++k) {
      float xhat = (xr[k] - m) * s, dxhat = dyr[k] * gamma.f32()[k];
      dgamma.f32()[k] += dyr[k] * xhat;
      dbeta.f32()[k] += dyr[k];
      mean_dxhat += dxhat;
      mean_dxhat_xhat += dxhat * xhat;
    }
    mean_dxhat /= c;
    mean_dxhat_xhat /= c;
    for (int64_t k = 0; k < c; ++k) {
      float xhat = (xr[k] - m) * s, dxhat = dyr[k] * gamma.f32()[k];
      dxr[k] += s * (dxhat - static_cast<float>(mean_dxhat) - xhat * static_cast<float>(mean_dxhat_xhat));
    }
  }
}

void attention_fwd(const Tensor& qkv, int b, int t, int h, int c, Tensor& att, Tensor& y) {
  const int hs = c / h;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  ensure(att, {b, h, t, t});
  ensure(y, {int64_t{b} * t, c});
  for (int bi = 0; bi < b; ++bi)
    for (int hi = 0; hi < h; ++hi) {
      float* a = att.f32() + ((int64_t{bi} * h + hi) * t) * t;
      for (int i = 0; i < t; ++i) {
        const float* q = qkv.f32() + (int64_t{bi} * t + i) * 3 * c + hi * hs;
        float* ai = a + int64_t{i} * t;
        float mx = -1e30f;
        for (int j = 0; j <= i; ++j) {
          const float* k = qkv.f32() + (int64_t{bi} * t + j) * 3 * c + c + hi * hs;
          float s = 0;
          for (int d = 0; d < hs; ++d) s += q[d] * k[d];
          ai[j] = s * scale;
          mx = std::max(mx, ai[j]);
        }
        float sum = 0;
        for (int j = 0; j <= i; ++j) sum += (ai[j] = std::exp(ai[j] - mx));
        for (int j = 0; j <= i; ++j) ai[j] /= sum;
        for (int j = i + 1; j < t; ++j) ai[j] = 0.0f;
        float* yo = y.f32() + (int64_t{bi} * t + i) * c + hi * hs;
        for (int d = 0; d < hs; ++d) yo[d] = 0.0f;
        for (int j = 0; j <= i; ++j) {
          const float* v = qkv.f32() + (int64_t{bi} * t + j) * 3 * c + 2 * c + hi * hs;
          for (int d = 0; d < hs; ++d) yo[d] += ai[j] * v[d];
        }
      }
    }
}

void attention_bwd(const Tensor& dy, const Tensor& qkv, const Tensor& att, int b, int t, int h, int c, Tensor& dqkv) {
  const int hs = c / h;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  ensure(dqkv, {int64_t{b} * t, 3 * c});
  std::memset(dqkv.f32(), 0, sizeof(float) * static_cast<size_t>(dqkv.numel()));
  std::vector<float> datt(static_cast<size_t>(t));
  for (int bi = 0; bi < b; ++bi)
    for (int hi = 0; hi < h; ++hi) {
      const float* a = att.f32() + ((int64_t{bi} * h + hi) * t) * t;
      for (int i = 0; i < t; ++i) {
        const float* ai = a + int64_t{i} * t;
        const float* dyo = dy.f32() + (int64_t{bi} * t + i) * c + hi * hs;
        const float* q = qkv.f32() + (int64_t{bi} * t + i) * 3 * c + hi * hs;
        float* dq = dqkv.f32() + (int64_t{bi} * t + i) * 3 * c + hi * hs;
        float dot = 0;
        for (int j = 0; j <= i; ++j) {  // through y = att v
          const float* v = qkv.f32() + (int64_t{bi} * t + j) * 3 * c + 2 * c + hi * hs;
          float* dv = dqkv.f32() + (int64_t{bi} * t + j) * 3 * c + 2 * c + hi * hs;
          float s = 0;
          for (int d = 0; d < hs; ++d) {
            s += dyo[d] * v[d];
            dv[d] += ai[j] * dyo[d];
          }
          datt[static_cast<size_t>(j)] = s;
          dot += s * ai[j];
        }
        for (int j = 0; j <= i; ++j) {  // through the softmax and the scaled q k^T
          float ds = ai[j] * (datt[static_cast<size_t>(j)] - dot) * scale;
          const float* k = qkv.f32() + (int64_t{bi} * t + j) * 3 * c + c + hi * hs;
          float* dk = dqkv.f32() + (int64_t{bi} * t + j) * 3 * c + c + hi * hs;
          for (int d = 0; d < hs; ++d) {
            dq[d] += ds * k[d];
            dk[d] += ds * q[d];
          }
        }
      }
    }
}

void gelu_fwd(const Tensor& x, Tensor& y) {
  ensure(y, x.shape());
  const float* in = x.f32();
  float* out = y.f32();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) out[i] = 0.5f * in[i] * (1.0f + std::erf(in[i] * 0.70710678118654752f));
}

void gelu_bwd(const Tensor& x, Tensor& dy) {  // in place: dy becomes dx
  const float* in = x.f32();
  float* d = dy.f32();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    float v = in[i];
    float cdf = 0.5f * (1.0f + std::erf(v * 0.70710678118654752f));
    float pdf = 0.3989422804014327f * std::exp(-0.5f * v * v);
    d[i] *= cdf + v * pdf;
  }
}

// Dropout: mask holds 0 or 1/(1-p); applied in place. p == 0 leaves mask undefined.
void dropout_fwd(Tensor& x, Tensor& mask, float p, bool train, std::mt19937_64& rng) {
  if (!train || p <= 0.0f) {
    mask = Tensor();
    return;
  }
  ensure(mask, x.shape());
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const float keep = 1.0f / (1.0f - p);
  float* m = mask.f32();
  float* v = x.f32();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    m[i] = u(rng) < p ? 0.0f : keep;
    v[i] *= m[i];
  }
}

void dropout_bwd(Tensor& dy, const Tensor& mask) {
  if (!mask.defined()) return;
  float* d = dy.f32();
  const float* m = mask.f32();
  const int64_t n = dy.numel();
  for (int64_t i = 0; i < n; ++i) d[i] *= m[i];
}

}  // namespace

std::string GptConfig::json() const {
  std::ostringstream os;
  os << "{\"type\":\"gpt\",\"vocab\":" << vocab << ",\"context\":" << context << ",\"layers\":" << layers
     << ",\"heads\":" << heads << ",\"embd\":" << embd << ",\"dropout\":" << dropout << "}";
  return os.str();
}

Gpt::Gpt(GptConfig c, uint64_t seed) : c_(c), rng_(seed ^ 0xD1B54A32D192ED03ull) {
  if (c_.vocab <= 0 || c_.context <= 0 || c_.layers <= 0 || c_.heads <= 0 || c_.embd <= 0)
    throw Error("gpt: vocab, context, layers, heads and embd must be positive");
  if (c_.embd % c_.heads != 0)
    throw Error("gpt: embd " + std::to_string(c_.embd) + " is not a multiple of heads " + std::to_string(c_.heads));
  if (!(c_.dropout >= 0.0f && c_.dropout < 1.0f)) throw Error("gpt: dropout must be in [0, 1)");
  std::mt19937_64 init(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const int C = c_.embd;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, int kind) {  // 0 normal, 1 ones, 2 zeros
    Param p{name, Tensor::empty(shape), Tensor::zeros(shape)};
    for (int64_t i = 0; i < p.value.numel(); ++i) p.value.f32()[i] = kind == 0 ? normal(init) : kind == 1 ? 1.0f : 0.0f;
    params_.push_back(std::move(p));
  };
  add("wte.weight", {c_.vocab, C}, 0);
  add("wpe.weight", {c_.context, C}, 0);
  for (int l = 0; l < c_.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C}, 1);
    add(h + "ln_1.bias", {C}, 2);
    add(h + "attn.c_attn.weight", {3 * C, C}, 0);
    add(h + "attn.c_attn.bias", {3 * C}, 2);
    add(h + "attn.c_proj.weight", {C, C}, 0);
    add(h + "attn.c_proj.bias", {C}, 2);
    add(h + "ln_2.weight", {C}, 1);
    add(h + "ln_2.bias", {C}, 2);
    add(h + "mlp.c_fc.weight", {4 * C, C}, 0);
    add(h + "mlp.c_fc.bias", {4 * C}, 2);
    add(h + "mlp.c_proj.weight", {C, 4 * C}, 0);
    add(h + "mlp.c_proj.bias", {C}, 2);
  }
  add("ln_f.weight", {C}, 1);
  add("ln_f.bias", {C}, 2);
  add("lm_head.weight", {c_.vocab, C}, 0);
}

double Gpt::train_flops(int batch) const {
  const double n = double(batch) * c_.context, C = c_.embd;
  double per_layer = 2 * n * (3 * C * C + C * C + 8 * C * C) + 4 * n * c_.context * C;  // linears + attention
  return 3 * (c_.layers * per_layer + 2 * n * C * c_.vocab);
}

Tensor Gpt::block_forward(int l, LayerActs& a, bool train, std::mt19937_64& rng) {
  const int T = c_.context, C = c_.embd;
  const int64_t N = a.x_in.dim(0);
  const Tensor& x = a.x_in;
  layernorm_fwd(x, p(layer_param(l, 0)), p(layer_param(l, 1)), a.ln1, a.ln1_mean, a.ln1_rstd);
  linear_fwd(a.ln1, p(layer_param(l, 2)), &p(layer_param(l, 3)), a.qkv);
  attention_fwd(a.qkv, static_cast<int>(N / T), T, c_.heads, C, a.att, a.y);
  Tensor o;
  linear_fwd(a.y, p(layer_param(l, 4)), &p(layer_param(l, 5)), o);
  dropout_fwd(o, a.drop1, c_.dropout, train, rng);
  a.x_mid = Tensor::empty({N, C});
  for (int64_t i = 0; i < N * C; ++i) a.x_mid.f32()[i] = x.f32()[i] + o.f32()[i];
  layernorm_fwd(a.x_mid, p(layer_param(l, 6)), p(layer_param(l, 7)), a.ln2, a.ln2_mean, a.ln2_rstd);
  linear_fwd(a.ln2, p(layer_param(l, 8)), &p(layer_param(l, 9)), a.fc);
  gelu_fwd(a.fc, a.gelu);
  Tensor o2;
  linear_fwd(a.gelu, p(layer_param(l, 10)), &p(layer_param(l, 11)), o2);
  dropout_fwd(o2, a.drop2, c_.dropout, train, rng);
  Tensor out = Tensor::empty({N, C});
  for (int64_t i = 0; i < N * C; ++i) out.f32()[i] = a.x_mid.f32()[i] + o2.f32()[i];
  return out;
}

double Gpt::forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, int batch, bool train) {
  const int T = c_.context, C = c_.embd, V = c_.vocab;
  const int64_t N = int64_t{batch} * T;
  if (static_cast<int64_t>(tokens.size()) != N || static_cast<int64_t>(targets.size()) != N)
    throw Error("gpt: expected " + std::to_string(N) + " tokens and targets");
  batch_ = batch;
  tokens_ = tokens;
  targets_ = targets;
  acts_.resize(static_cast<size_t>(c_.layers));
  Tensor x = Tensor::empty({N, C});
  for (int64_t r = 0; r < N; ++r) {
    int32_t tok = tokens[static_cast<size_t>(r)];
    if (tok < 0 || tok >= V) throw Error("gpt: token " + std::to_string(tok) + " outside the vocabulary");
    const float* e = p(0).f32() + int64_t{tok} * C;
    const float* pe = p(1).f32() + (r % T) * C;
    for (int k = 0; k < C; ++k) x.f32()[r * C + k] = e[k] + pe[k];
  }
  for (int l = 0; l < c_.layers; ++l) {
    LayerActs& a = acts_[static_cast<size_t>(l)];
    if (recompute_) a = LayerActs{};  // what an earlier step kept goes
    a.x_in = x;
    a.rng = rng_;
    a.train = train;
    x = block_forward(l, a, train, rng_);
    if (recompute_) {  // keep the input (and the generator state); backward computes the rest again
      LayerActs kept;
      kept.x_in = a.x_in;
      kept.rng = a.rng;
      kept.train = train;
      a = std::move(kept);
    }
  }
  x_final_ = x;
  const size_t f = 2 + static_cast<size_t>(c_.layers) * 12;
  layernorm_fwd(x, p(f), p(f + 1), lnf_, lnf_mean_, lnf_rstd_);
  linear_fwd(lnf_, p(f + 2), nullptr, logits_);
  ensure(dlogits_, {N, V});
  return cpu::softmax_xent(logits_.f32(), targets.data(), dlogits_.f32(), static_cast<int>(N), V);
}

void Gpt::backward() {
  const int T = c_.context, C = c_.embd;
  const int64_t N = int64_t{batch_} * T;
  const size_t f = 2 + static_cast<size_t>(c_.layers) * 12;
  Tensor dlnf;
  linear_bwd(dlogits_, lnf_, p(f + 2), g(f + 2), nullptr, &dlnf);
  Tensor dx = Tensor::zeros({N, C});
  layernorm_bwd(dlnf, x_final_, lnf_mean_, lnf_rstd_, p(f), dx, g(f), g(f + 1));
  for (int l = c_.layers - 1; l >= 0; --l) {
    LayerActs& a = acts_[static_cast<size_t>(l)];
    if (recompute_) {  // the block's forward again, with the dropout masks it drew the first time
      std::mt19937_64 rng = a.rng;
      block_forward(l, a, a.train, rng);
    }
    // MLP branch: x_out = x_mid + drop(proj(gelu(fc(ln2(x_mid)))))
    Tensor d2 = dx.clone();
    dropout_bwd(d2, a.drop2);
    Tensor dgelu;
    linear_bwd(d2, a.gelu, p(layer_param(l, 10)), g(layer_param(l, 10)), &g(layer_param(l, 11)), &dgelu);
    gelu_bwd(a.fc, dgelu);
    Tensor dln2;
    linear_bwd(dgelu, a.ln2, p(layer_param(l, 8)), g(layer_param(l, 8)), &g(layer_param(l, 9)), &dln2);
    layernorm_bwd(dln2, a.x_mid, a.ln2_mean, a.ln2_rstd, p(layer_param(l, 6)), dx, g(layer_param(l, 6)),
                  g(layer_param(l, 7)));
    // Attention branch: x_mid = x_in + drop(proj(attn(qkv(ln1(x_in)))))
    Tensor d1 = dx.clone();
    dropout_bwd(d1, a.drop1);
    Tensor dy, dqkv, dln1;
    linear_bwd(d1, a.y, p(layer_param(l, 4)), g(layer_param(l, 4)), &g(layer_param(l, 5)), &dy);
    attention_bwd(dy, a.qkv, a.att, batch_, T, c_.heads, C, dqkv);
    linear_bwd(dqkv, a.ln1, p(layer_param(l, 2)), g(layer_param(l, 2)), &g(layer_param(l, 3)), &dln1);
    layernorm_bwd(dln1, a.x_in, a.ln1_mean, a.ln1_rstd, p(layer_param(l, 0)), dx, g(layer_param(l, 0)),
                  g(layer_param(l, 1)));
    if (recompute_) a = LayerActs{};  // this block's activations are done with
  }
  g(0).fill(0.0f);
  g(1).fill(0.0f);
  for (int64_t r = 0; r < N; ++r) {
    float* dwte = g(0).f32() + int64_t{tokens_[static_cast<size_t>(r)]} * C;
    float* dwpe = g(1).f32() + (r % T) * C;
    const float* d = dx.f32() + r * C;
    for (int k = 0; k < C; ++k) {
      dwte[k] += d[k];
      dwpe[k] += d[k];
    }
  }
}

std::string Gpt::rng_state() const {
  std::ostringstream os;
  os << rng_;
  return os.str();
}

void Gpt::set_rng_state(const std::string& text) {
  std::istringstream is(text);
  std::mt19937_64 r;
  is >> r;
  if (is.fail()) throw Error("the dropout random-number state is not valid");
  rng_ = r;
}

}  // namespace loom::rt

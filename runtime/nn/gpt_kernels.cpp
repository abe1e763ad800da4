// gpt_kernels.cpp — the gpt's CPU layers (gpt_kernels.hpp). The AVX2 clones (LOOM_VEC) are the
// range kernels; the OpenMP loops around them only split the range.
#include "gpt_kernels.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "gpt_cuda.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/ops.hpp"
#include "loom/rt/tensor/vec.hpp"
#ifdef LOOM_HAVE_CUDA
#include "loom/rt/tensor/kernels_cuda.hpp"
// A layer whose tensors live on the GPU runs there (gpt_cuda.hpp, cuBLAS) and returns.
#define GPU_PATH(t, ...)                   \
  if ((t).device() == Device::kCuda) {     \
    __VA_ARGS__;                           \
    return;                                \
  }
#else
#define GPU_PATH(t, ...) \
  if ((t).device() == Device::kCuda) throw Error("this build of Loom has no CUDA support");
#endif

namespace loom::rt::gptk {

namespace {

constexpr int64_t kRowBlock = 64;  // LayerNorm's dgamma/dbeta: partial sums per block of rows

LOOM_VEC void ln_rows(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd, int64_t c,
                      float eps, int64_t lo, int64_t hi) {
  for (int64_t r = lo; r < hi; ++r) {
    const float* xr = x + r * c;
    const float m = vec::sum(xr, c) / static_cast<float>(c);
    const float v = vec::sum_sq_dev(xr, m, c) / static_cast<float>(c);
    const float s = 1.0f / std::sqrt(v + eps);
    mean[r] = m;
    rstd[r] = s;
    float* yr = y + r * c;
    for (int64_t k = 0; k < c; ++k) yr[k] = (xr[k] - m) * s * gamma[k] + beta[k];
  }
}

// Rows [lo, hi) of one block: dx += ..., and the block's partial dgamma, dbeta. The row's two
// means run in vec::kLanes lanes, as vec::sum does.
LOOM_VEC void ln_bwd_rows(const float* dy, const float* x, const float* mean, const float* rstd, const float* gamma,
                          float* dx, float* pg, float* pb, int64_t c, int64_t lo, int64_t hi) {
  constexpr int kL = vec::kLanes;
  for (int64_t k = 0; k < c; ++k) pg[k] = pb[k] = 0.0f;
  for (int64_t r = lo; r < hi; ++r) {
    const float* xr = x + r * c;
    const float* dyr = dy + r * c;
    float* dxr = dx + r * c;
    const float m = mean[r], s = rstd[r];
    float a1[kL] = {}, a2[kL] = {};
    int64_t k = 0;
    for (; k + kL <= c; k += kL)
      for (int l = 0; l < kL; ++l) {
        const float xhat = (xr[k + l] - m) * s, dxhat = dyr[k + l] * gamma[k + l];
        pg[k + l] += dyr[k + l] * xhat;
        pb[k + l] += dyr[k + l];
        a1[l] += dxhat;
        a2[l] += dxhat * xhat;
      }
    float sum_dxhat = vec::fold(a1), sum_dxhat_xhat = vec::fold(a2);
    for (; k < c; ++k) {
      const float xhat = (xr[k] - m) * s, dxhat = dyr[k] * gamma[k];
      pg[k] += dyr[k] * xhat;
      pb[k] += dyr[k];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
    }
    const float mean_dxhat = sum_dxhat / static_cast<float>(c), mean_dxhat_xhat = sum_dxhat_xhat / static_cast<float>(c);
    for (k = 0; k < c; ++k) {
      const float xhat = (xr[k] - m) * s, dxhat = dyr[k] * gamma[k];
      dxr[k] += s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
    }
  }
}

// Causal softmax of the rows of a [t, t] score matrix in place; above the diagonal zeros.
LOOM_VEC void causal_softmax(float* a, int t) {
  for (int i = 0; i < t; ++i) {
    float* ai = a + int64_t{i} * t;
    const float mx = vec::max(ai, i + 1, ai[0]);
    const float inv = 1.0f / vec::exp_sum(ai, ai, mx, i + 1);
    for (int j = 0; j <= i; ++j) ai[j] *= inv;
    for (int j = i + 1; j < t; ++j) ai[j] = 0.0f;
  }
}

// dS = P * (dP - rowsum(P * dP)) * scale, in place over dP.
LOOM_VEC void softmax_bwd(const float* p, float* dp, int t, float scale) {
  for (int i = 0; i < t; ++i) {
    const float* pi = p + int64_t{i} * t;
    float* di = dp + int64_t{i} * t;
    const float dot = vec::dot(pi, di, i + 1);
    for (int j = 0; j <= i; ++j) di[j] = pi[j] * (di[j] - dot) * scale;
    for (int j = i + 1; j < t; ++j) di[j] = 0.0f;
  }
}

// Rows [lo, hi) of x [.., cols]: v = x + bias, y = GELU(v), x = GELU'(v).
LOOM_VEC void bias_gelu_rows(float* x, const float* bias, float* y, int64_t cols, int64_t lo, int64_t hi) {
  for (int64_t r = lo; r < hi; ++r) {
    float *xr = x + r * cols, *yr = y + r * cols;
    for (int64_t k = 0; k < cols; ++k) {
      const vec::Gelu g = vec::gelu(xr[k] + bias[k]);
      yr[k] = g.y;
      xr[k] = g.dy;
    }
  }
}

LOOM_VEC void mul_range(float* x, const float* m, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) x[i] *= m[i];
}

LOOM_VEC void add_range(const float* a, const float* b, float* out, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) out[i] = a[i] + b[i];
}

#ifdef LOOM_HAVE_CUDA
// Attention on the GPU: per sequence, one batched GEMM over the heads for each product (head h
// of sequence b starts hs columns after head h-1; its t x t scores after the previous head's).
void attention_fwd_gpu(const float* in, float* ap, float* yp, int b, int t, int h, int c) {
  const int hs = c / h;
  const int64_t tt = int64_t{t} * t;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int64_t bi = 0; bi < b; ++bi) {  // S = Q K^T / sqrt(hs)
    const float* q = in + bi * t * 3 * c;
    cuda::gemm_batched(false, true, t, t, hs, scale, q, 3 * c, hs, q + c, 3 * c, hs, 0.0f, ap + bi * h * tt, t, tt, h);
  }
  gpt_cuda::causal_softmax(ap, int64_t{b} * h * t, t);
  for (int64_t bi = 0; bi < b; ++bi)  // Y = P V
    cuda::gemm_batched(false, false, t, hs, t, 1.0f, ap + bi * h * tt, t, tt, in + bi * t * 3 * c + 2 * c, 3 * c, hs,
                       0.0f, yp + bi * t * c, c, hs, h);
}

void attention_bwd_gpu(const float* dyp, const float* in, const float* ap, float* out, int b, int t, int h, int c) {
  const int hs = c / h;
  const int64_t tt = int64_t{t} * t;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  Tensor ds = Tensor::empty({b, h, t, t}, DType::kF32, Device::kCuda);
  float* dsp = ds.f32();
  for (int64_t bi = 0; bi < b; ++bi) {
    const float *q = in + bi * t * 3 * c, *p = ap + bi * h * tt, *dyo = dyp + bi * t * c;
    float* dq = out + bi * t * 3 * c;
    cuda::gemm_batched(false, true, t, t, hs, 1.0f, dyo, c, hs, q + 2 * c, 3 * c, hs, 0.0f, dsp + bi * h * tt, t, tt, h);
    cuda::gemm_batched(true, false, t, hs, t, 1.0f, p, t, tt, dyo, c, hs, 0.0f, dq + 2 * c, 3 * c, hs, h);  // dV
  }
  gpt_cuda::softmax_bwd(ap, dsp, int64_t{b} * h * t, t, scale);
  for (int64_t bi = 0; bi < b; ++bi) {
    const float* q = in + bi * t * 3 * c;
    const float* d = dsp + bi * h * tt;
    float* dq = out + bi * t * 3 * c;
    cuda::gemm_batched(false, false, t, hs, t, 1.0f, d, t, tt, q + c, 3 * c, hs, 0.0f, dq, 3 * c, hs, h);     // dQ = dS K
    cuda::gemm_batched(true, false, t, hs, t, 1.0f, d, t, tt, q, 3 * c, hs, 0.0f, dq + c, 3 * c, hs, h);     // dK = dS^T Q
  }
}
#endif

}  // namespace

Tensor& ensure(Tensor& t, std::vector<int64_t> shape, Device device) {
  if (!t.defined() || t.shape() != shape || t.device() != device) t = Tensor::empty(std::move(shape), DType::kF32, device);
  return t;
}

void linear_fwd(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
  const int n = static_cast<int>(x.dim(0)), in = static_cast<int>(x.dim(1)), out = static_cast<int>(w.dim(0));
  const Device d = x.device();
  ensure(y, {n, out}, d);
  ops::gemm(d, false, true, n, out, in, 1.0f, x.f32(), in, w.f32(), in, 0.0f, y.f32(), out);
  if (b) ops::bias_act(d, y.f32(), b->f32(), n, out, cpu::Act::kNone);
}

void linear_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dw, Tensor* db, Tensor* dx) {
  const int n = static_cast<int>(x.dim(0)), in = static_cast<int>(x.dim(1)), out = static_cast<int>(w.dim(0));
  const Device d = x.device();
  ops::gemm(d, true, false, out, in, n, 1.0f, dy.f32(), out, x.f32(), in, 0.0f, dw.f32(), in);
  if (db) {
    db->fill(0.0f);
    ops::bias_grad(d, dy.f32(), db->f32(), n, out);
  }
  if (dx) {
    ensure(*dx, {n, in}, d);
    ops::gemm(d, false, false, n, in, out, 1.0f, dy.f32(), out, w.f32(), in, 0.0f, dx->f32(), in);
  }
}

void layernorm_fwd(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean, Tensor& rstd,
                   float eps) {
  const int64_t n = x.dim(0), c = x.dim(1);
  if (x.device() == Device::kCuda && eps != kLnEps) throw Error("layernorm: the CUDA kernel's epsilon is 1e-5");
  ensure(y, {n, c}, x.device());
  ensure(mean, {n}, x.device());
  ensure(rstd, {n}, x.device());
  GPU_PATH(x, gpt_cuda::layernorm_fwd(x.f32(), gamma.f32(), beta.f32(), y.f32(), mean.f32(), rstd.f32(), n,
                                      static_cast<int>(c)))
  const float *xp = x.f32(), *g = gamma.f32(), *b = beta.f32();
  float *yp = y.f32(), *mp = mean.f32(), *sp = rstd.f32();
  for_range(n, 64, [&](int64_t lo, int64_t hi) { ln_rows(xp, g, b, yp, mp, sp, c, eps, lo, hi); });
}

void layernorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& gamma,
                   Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  const int64_t n = x.dim(0), c = x.dim(1), blocks = (n + kRowBlock - 1) / kRowBlock;
  GPU_PATH(x, gpt_cuda::layernorm_bwd(dy.f32(), x.f32(), mean.f32(), rstd.f32(), gamma.f32(), dx.f32(), dgamma.f32(),
                                      dbeta.f32(), n, static_cast<int>(c)))
  std::vector<float> partial(static_cast<size_t>(blocks * 2 * c));
  const float *dyp = dy.f32(), *xp = x.f32(), *mp = mean.f32(), *sp = rstd.f32(), *g = gamma.f32();
  float* dxp = dx.f32();
  for_range(blocks, 2, [&](int64_t lo, int64_t hi) {
    for (int64_t blk = lo; blk < hi; ++blk)
      ln_bwd_rows(dyp, xp, mp, sp, g, dxp, &partial[static_cast<size_t>(blk * 2 * c)],
                  &partial[static_cast<size_t>(blk * 2 * c + c)], c, blk * kRowBlock, std::min(n, (blk + 1) * kRowBlock));
  });
  float *dg = dgamma.f32(), *dbp = dbeta.f32();
  for (int64_t k = 0; k < c; ++k) dg[k] = dbp[k] = 0.0f;
  for (int64_t blk = 0; blk < blocks; ++blk)  // in block order, whatever the threads
    for (int64_t k = 0; k < c; ++k) {
      dg[k] += partial[static_cast<size_t>(blk * 2 * c + k)];
      dbp[k] += partial[static_cast<size_t>(blk * 2 * c + c + k)];
    }
}

void attention_fwd(const Tensor& qkv, int b, int t, int h, int c, bool flash, Tensor& att, Tensor& y) {
  const int hs = c / h;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  ensure(y, {int64_t{b} * t, c}, qkv.device());
  if (flash) {
    ensure(att, {b, h, t}, qkv.device());
    GPU_PATH(qkv, gpt_cuda::flash_attention_fwd(qkv.f32(), y.f32(), att.f32(), b, t, h, c))
    return flash_attention_fwd_cpu(qkv.f32(), y.f32(), att.f32(), b, t, h, c);
  }
  ensure(att, {b, h, t, t}, qkv.device());
  GPU_PATH(qkv, attention_fwd_gpu(qkv.f32(), att.f32(), y.f32(), b, t, h, c))
  const float* in = qkv.f32();
  float *ap = att.f32(), *yp = y.f32();
  for_range(int64_t{b} * h, 2, [&](int64_t lo, int64_t hi) {
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t bi = bh / h, hi_ = bh % h;
      const float* q = in + bi * t * 3 * c + hi_ * hs;
      float* a = ap + bh * t * t;
      cpu::gemm(false, true, t, t, hs, scale, q, 3 * c, q + c, 3 * c, 0.0f, a, t);  // S = Q K^T / sqrt(hs)
      causal_softmax(a, t);
      cpu::gemm(false, false, t, hs, t, 1.0f, a, t, q + 2 * c, 3 * c, 0.0f, yp + bi * t * c + hi_ * hs, c);  // Y = P V
    }
  });
}

void attention_bwd(const Tensor& dy, const Tensor& qkv, const Tensor& att, const Tensor& y, int b, int t, int h, int c,
                   bool flash, Tensor& dqkv) {
  const int hs = c / h;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  ensure(dqkv, {int64_t{b} * t, 3 * c}, qkv.device());
  if (flash) {
    GPU_PATH(qkv, Tensor rowsum = Tensor::empty({b, h, t}, DType::kF32, Device::kCuda);
             gpt_cuda::flash_attention_bwd(dy.f32(), qkv.f32(), y.f32(), att.f32(), rowsum.f32(), dqkv.f32(), b, t, h, c))
    return flash_attention_bwd_cpu(dy.f32(), qkv.f32(), y.f32(), att.f32(), dqkv.f32(), b, t, h, c);
  }
  GPU_PATH(qkv, attention_bwd_gpu(dy.f32(), qkv.f32(), att.f32(), dqkv.f32(), b, t, h, c))
  const float *dyp = dy.f32(), *in = qkv.f32(), *ap = att.f32();
  float* out = dqkv.f32();
  for_range(int64_t{b} * h, 2, [&](int64_t lo, int64_t hi) {
    std::vector<float> ds(static_cast<size_t>(t) * t);
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t bi = bh / h, hi_ = bh % h;
      const float* q = in + bi * t * 3 * c + hi_ * hs;
      const float* p = ap + bh * t * t;
      const float* dyo = dyp + bi * t * c + hi_ * hs;
      float* dq = out + bi * t * 3 * c + hi_ * hs;
      cpu::gemm(false, true, t, t, hs, 1.0f, dyo, c, q + 2 * c, 3 * c, 0.0f, ds.data(), t);     // dP = dY V^T
      cpu::gemm(true, false, t, hs, t, 1.0f, p, t, dyo, c, 0.0f, dq + 2 * c, 3 * c);           // dV = P^T dY
      softmax_bwd(p, ds.data(), t, scale);                                                       // dS
      cpu::gemm(false, false, t, hs, t, 1.0f, ds.data(), t, q + c, 3 * c, 0.0f, dq, 3 * c);    // dQ = dS K
      cpu::gemm(true, false, t, hs, t, 1.0f, ds.data(), t, q, 3 * c, 0.0f, dq + c, 3 * c);     // dK = dS^T Q
    }
  });
}

void bias_gelu_fwd(Tensor& x, const Tensor& bias, Tensor& y) {
  ensure(y, x.shape(), x.device());
  const int64_t cols = x.dim(-1), rows = cols ? x.numel() / cols : 0;
  GPU_PATH(x, gpt_cuda::bias_gelu_fwd(x.f32(), bias.f32(), y.f32(), rows, static_cast<int>(cols)))
  float *xp = x.f32(), *yp = y.f32();
  const float* b = bias.f32();
  for_range(rows, (1 << 14) / std::max<int64_t>(cols, 1),
            [&](int64_t lo, int64_t hi) { bias_gelu_rows(xp, b, yp, cols, lo, hi); });
}

void mul(Tensor& x, const Tensor& m) {
  GPU_PATH(x, gpt_cuda::mul(x.f32(), m.f32(), x.numel()))
  float* xp = x.f32();
  const float* mp = m.f32();
  for_range(x.numel(), 1 << 15, [&](int64_t lo, int64_t hi) { mul_range(xp, mp, lo, hi); });
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  GPU_PATH(a, gpt_cuda::add(a.f32(), b.f32(), out.f32(), a.numel()))
  const float *ap = a.f32(), *bp = b.f32();
  float* o = out.f32();
  for_range(a.numel(), 1 << 15, [&](int64_t lo, int64_t hi) { add_range(ap, bp, o, lo, hi); });
}

void dropout_fwd(Tensor& x, Tensor& mask, float p, bool train, std::mt19937_64& rng) {
  if (!train || p <= 0.0f) {
    mask = Tensor();
    return;
  }
  // The mask is drawn on the host from the model's one generator, whatever the device: the same
  // seed drops the same units on the CPU and on the GPU.
  Tensor host;
  Tensor& drawn = x.device() == Device::kCpu ? mask : host;
  ensure(drawn, x.shape());
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const float keep = 1.0f / (1.0f - p);
  float* m = drawn.f32();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) m[i] = u(rng) < p ? 0.0f : keep;
  if (x.device() != Device::kCpu) mask = host.to(x.device());
  dropout_bwd(x, mask);
}

void dropout_bwd(Tensor& dy, const Tensor& mask) {
  if (mask.defined()) mul(dy, mask);
}

}  // namespace loom::rt::gptk

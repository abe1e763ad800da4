// ops_fused.cpp — the kernels of fused patterns (fuse.cpp) and the vectorised row loops the
// operators share: the erf GELU in one pass, softmax rows and LayerNormalization rows, each
// compiled for AVX2 and FMA beside the baseline (vec.hpp) and spread over the threads when a
// call holds 16k values or more (vec::for_range, where OpenMP loops are on). A bias (+ GELU) after a GEMM is the
// runtime's cpu::bias_act.
#include "ops_fused.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "ops.hpp"
#include "loom/rt/tensor/vec.hpp"

namespace loom::rt::graph {

namespace {

LOOM_VEC void gelu_span(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * vec::normal_cdf(x[i]);
}

// tanh from one exponential, odd: 1 - 2 / (e^2a + 1) for a = |x|, and its Taylor polynomial
// where that loses digits (|x| < 0.0625), chosen without a branch.
__attribute__((always_inline)) inline float tanh_one(float x) {
  const float a = std::fabs(x), e = vec::exp(2 * a), big = 1 - 2 / (e + 1);
  const float x2 = a * a, small = a * (1 + x2 * (-1.0f / 3 + x2 * (2.0f / 15 - x2 * 17.0f / 315)));
  return std::copysign(a < 0.0625f ? small : big, x);
}

LOOM_VEC void tanh_rows(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = tanh_one(x[i]);
}
// GELU's tanh approximation: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
LOOM_VEC void gelu_tanh_span(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1 + tanh_one(0.7978845608f * (x[i] + 0.044715f * x[i] * x[i] * x[i])));
}
LOOM_VEC void sigmoid_rows(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 1 / (1 + vec::exp(-x[i]));
}
LOOM_VEC void exp_rows(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = vec::exp(x[i]);
}
LOOM_VEC void erf_rows(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    y[i] = std::copysign(1 - 2 * vec::half_erfc(a, vec::exp(-a * a)), x[i]);
  }
}

// In blocks of rows, one step at a time over the block: each row's step is a short chain (max,
// exponentials, sum, one division), and rows of a few values (attention over 16 positions) spent
// their time waiting on one row's chain; steps over a block of independent rows overlap.
LOOM_VEC void softmax_span(const float* x, float* y, int64_t rows, int64_t cols, bool log) {
  constexpr int64_t kBlock = 64;
  float m[kBlock], s[kBlock];
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    const int64_t nr = std::min(kBlock, rows - r0);
    const float* xb = x + r0 * cols;
    float* yb = y + r0 * cols;
    for (int64_t r = 0; r < nr; ++r) m[r] = vec::max(xb + r * cols, cols, -INFINITY);
    for (int64_t r = 0; r < nr; ++r) s[r] = vec::exp_sum(xb + r * cols, yb + r * cols, m[r], cols);
    if (log) {
      for (int64_t r = 0; r < nr; ++r) s[r] = std::log(s[r]) + m[r];
      for (int64_t r = 0; r < nr; ++r)
        for (int64_t c = 0; c < cols; ++c) yb[r * cols + c] = xb[r * cols + c] - s[r];
    } else {
      for (int64_t r = 0; r < nr; ++r) s[r] = 1.0f / s[r];
      for (int64_t r = 0; r < nr; ++r)
        for (int64_t c = 0; c < cols; ++c) yb[r * cols + c] *= s[r];
    }
  }
}

// In blocks of rows, one step at a time, as softmax_span.
LOOM_VEC void layer_norm_span(const float* x, const float* g, const float* b, float* y, int64_t rows, int64_t cols, float eps,
                              float* means, float* invs) {
  constexpr int64_t kBlock = 64;
  float mean[kBlock], inv[kBlock];
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    const int64_t nr = std::min(kBlock, rows - r0);
    const float* xb = x + r0 * cols;
    float* yb = y + r0 * cols;
    for (int64_t r = 0; r < nr; ++r) mean[r] = vec::sum(xb + r * cols, cols) / static_cast<float>(cols);
    for (int64_t r = 0; r < nr; ++r) inv[r] = vec::sum_sq_dev(xb + r * cols, mean[r], cols);
    for (int64_t r = 0; r < nr; ++r) inv[r] = 1.0f / std::sqrt(inv[r] / static_cast<float>(cols) + eps);
    for (int64_t r = 0; r < nr; ++r) {
      const float* xr = xb + r * cols;
      float* yr = yb + r * cols;
      const float mr = mean[r], ir = inv[r];
      if (b) {
        for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mr) * ir * g[c] + b[c];
      } else {
        for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mr) * ir * g[c];
      }
    }
    if (means) std::copy_n(mean, nr, means + r0);
    if (invs) std::copy_n(inv, nr, invs + r0);
  }
}

}  // namespace

void gelu_rows(const float* x, float* y, int64_t n) {
  vec::for_items(n, 1, [&](int64_t lo, int64_t hi) { gelu_span(x + lo, y + lo, hi - lo); });
}

bool unary_rows(const char* op, const float* x, float* y, int64_t n) {
  const std::string o = op;
  void (*span)(const float*, float*, int64_t) = o == "Tanh" ? tanh_rows
                                                : o == "Sigmoid" ? sigmoid_rows
                                                : o == "Exp" ? exp_rows
                                                : o == "Erf" ? erf_rows
                                                : nullptr;
  if (!span) return false;
  vec::for_items(n, 1, [&](int64_t lo, int64_t hi) { span(x + lo, y + lo, hi - lo); });
  return true;
}

void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, bool log) {
  vec::for_items(rows, cols, [&](int64_t lo, int64_t hi) { softmax_span(x + lo * cols, y + lo * cols, hi - lo, cols, log); });
}

void softmax_rows_here(const float* x, float* y, int64_t rows, int64_t cols) { softmax_span(x, y, rows, cols, false); }

void layer_norm_rows(const float* x, const float* g, const float* b, float* y, int64_t rows, int64_t cols, float eps,
                     float* means, float* invs) {
  vec::for_items(rows, cols, [&](int64_t lo, int64_t hi) {
    layer_norm_span(x + lo * cols, g, b, y + lo * cols, hi - lo, cols, eps, means ? means + lo : nullptr,
                    invs ? invs + lo : nullptr);
  });
}

// Loom.Gelu: Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5, as one pass; and opset 20's
// Gelu, exact or (approximate "tanh") its tanh form.
void op_gelu(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  if (x.dtype() != DType::kF32) op_error(n, "GELU runs on float32");
  const std::string approximate = attr_s(n, "approximate", "none");
  if (approximate != "none" && approximate != "tanh") op_error(n, "approximate '" + approximate + "' is not supported");
  Tensor y = Tensor::empty(x.shape());
  if (approximate == "tanh") {
    const float* px = x.f32();
    float* py = y.f32();
    vec::for_items(x.numel(), 1, [&](int64_t lo, int64_t hi) { gelu_tanh_span(px + lo, py + lo, hi - lo); });
  } else {
    gelu_rows(x.f32(), y.f32(), x.numel());
  }
  out[0] = y;
}

}  // namespace loom::rt::graph

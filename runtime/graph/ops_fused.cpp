// ops_fused.cpp — the kernels of fused patterns (fuse.cpp) and the vectorised row loops the
// operators share: the erf GELU in one pass, softmax rows and LayerNormalization rows, each
// compiled for AVX2 and FMA beside the baseline (vec.hpp). A bias (+ GELU) after a GEMM is the
// runtime's cpu::bias_act.
#include "ops_fused.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "ops.hpp"
#include "loom/rt/tensor/vec.hpp"

namespace loom::rt::graph {

LOOM_VEC void gelu_rows(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * vec::normal_cdf(x[i]);
}

namespace {

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

}  // namespace

bool unary_rows(const char* op, const float* x, float* y, int64_t n) {
  const std::string o = op;
  if (o == "Tanh") tanh_rows(x, y, n);
  else if (o == "Sigmoid") sigmoid_rows(x, y, n);
  else if (o == "Exp") exp_rows(x, y, n);
  else if (o == "Erf") erf_rows(x, y, n);
  else return false;
  return true;
}

LOOM_VEC void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, bool log) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    const float m = vec::max(xr, cols, -INFINITY);
    const float s = vec::exp_sum(xr, yr, m, cols);
    if (log) {
      const float ls = std::log(s) + m;
      for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] - ls;
    } else {
      const float inv = 1.0f / s;
      for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
  }
}

LOOM_VEC void layer_norm_rows(const float* x, const float* g, const float* b, float* y, int64_t rows, int64_t cols, float eps,
                              float* means, float* invs) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    const float mean = vec::sum(xr, cols) / static_cast<float>(cols);
    const float var = vec::sum_sq_dev(xr, mean, cols);
    const float inv = 1.0f / std::sqrt(var / static_cast<float>(cols) + eps);
    if (b) {
      for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * inv * g[c] + b[c];
    } else {
      for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * inv * g[c];
    }
    if (means) means[r] = mean;
    if (invs) invs[r] = inv;
  }
}

// Loom.Gelu: Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5, as one pass.
void op_gelu(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  if (x.dtype() != DType::kF32) op_error(n, "GELU runs on float32");
  Tensor y = Tensor::empty(x.shape());
  gelu_rows(x.f32(), y.f32(), x.numel());
  out[0] = y;
}

}  // namespace loom::rt::graph

// ops_fused.cpp — the kernels of fused patterns (fuse.cpp) and the vectorised row loops the
// operators share: the erf GELU in one pass, bias (+ GELU) after a GEMM, softmax rows and
// LayerNormalization rows, each compiled for AVX2 beside the baseline (vec.hpp).
#include "ops_fused.hpp"

#include <algorithm>
#include <cmath>

#include "ops.hpp"
#include "loom/rt/tensor/vec.hpp"

namespace loom::rt::graph {

LOOM_VEC void gelu_rows(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + vec::erf(x[i] * 0.70710678118654752f));
}

LOOM_VEC void bias_rows(float* y, const float* bias, int64_t rows, int64_t cols, bool gelu) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * cols;
    if (gelu) {
      for (int64_t c = 0; c < cols; ++c) {
        const float v = row[c] + bias[c];
        row[c] = 0.5f * v * (1.0f + vec::erf(v * 0.70710678118654752f));
      }
    } else {
      for (int64_t c = 0; c < cols; ++c) row[c] += bias[c];
    }
  }
}

LOOM_VEC void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, bool log) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m8[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8)
      for (int k = 0; k < 8; ++k) m8[k] = std::max(m8[k], xr[c + k]);
    float m = *std::max_element(m8, m8 + 8);
    for (; c < cols; ++c) m = std::max(m, xr[c]);
    float s8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (c = 0; c + 8 <= cols; c += 8)
      for (int k = 0; k < 8; ++k) {
        const float e = vec::exp(xr[c + k] - m);
        yr[c + k] = e;
        s8[k] += e;
      }
    float s = 0;
    for (float v : s8) s += v;
    for (; c < cols; ++c) {
      yr[c] = vec::exp(xr[c] - m);
      s += yr[c];
    }
    if (log) {
      const float ls = std::log(s) + m;
      for (c = 0; c < cols; ++c) yr[c] = xr[c] - ls;
    } else {
      const float inv = 1.0f / s;
      for (c = 0; c < cols; ++c) yr[c] *= inv;
    }
  }
}

LOOM_VEC void layer_norm_rows(const float* x, const float* g, const float* b, float* y, int64_t rows, int64_t cols, float eps,
                              float* means, float* invs) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float s8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8)
      for (int k = 0; k < 8; ++k) s8[k] += xr[c + k];
    float sum = 0;
    for (float v : s8) sum += v;
    for (; c < cols; ++c) sum += xr[c];
    const float mean = sum / static_cast<float>(cols);
    float v8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (c = 0; c + 8 <= cols; c += 8)
      for (int k = 0; k < 8; ++k) v8[k] += (xr[c + k] - mean) * (xr[c + k] - mean);
    float var = 0;
    for (float v : v8) var += v;
    for (; c < cols; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    const float inv = 1.0f / std::sqrt(var / static_cast<float>(cols) + eps);
    if (b) {
      for (c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * inv * g[c] + b[c];
    } else {
      for (c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * inv * g[c];
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

// ops_norm.cpp — the normalizations beside LayerNormalization (ops_math.cpp) and BatchNormalization
// (ops_conv.cpp): InstanceNormalization, MeanVarianceNormalization and LRN, on float32.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops.hpp"

namespace loom::rt::graph {
namespace {

const Tensor& float_input(const Node& n, const std::vector<const Tensor*>& in, size_t i) {
  const Tensor& t = need(n, in, i);
  if (t.dtype() != DType::kF32) op_error(n, std::string(n.op) + " of " + dtype_name(t.dtype()) + " is not supported (it runs on float32)");
  return t;
}

// Each element's group: its position over the dimensions not in `axes` (those reduced).
std::vector<int64_t> groups_of(const Shape& s, const std::vector<bool>& reduced, int64_t* count) {
  const int r = static_cast<int>(s.size());
  std::vector<int64_t> g(static_cast<size_t>(numel_of(s)));
  std::vector<int64_t> at(static_cast<size_t>(r), 0);
  *count = 1;
  for (int d = 0; d < r; ++d)
    if (!reduced[static_cast<size_t>(d)]) *count *= s[static_cast<size_t>(d)];
  for (size_t i = 0; i < g.size(); ++i) {
    int64_t id = 0;
    for (int d = 0; d < r; ++d)
      if (!reduced[static_cast<size_t>(d)]) id = id * s[static_cast<size_t>(d)] + at[static_cast<size_t>(d)];
    g[i] = id;
    for (int d = r; d-- > 0;) {
      if (++at[static_cast<size_t>(d)] < s[static_cast<size_t>(d)]) break;
      at[static_cast<size_t>(d)] = 0;
    }
  }
  return g;
}

}  // namespace

void op_instance_norm(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &x = float_input(n, in, 0), &scale = float_input(n, in, 1), &bias = float_input(n, in, 2);
  if (x.ndim() < 3) op_error(n, "it takes [N, C, spatial...]");
  const int64_t N = x.dim(0), C = x.dim(1), inner = C ? x.numel() / std::max<int64_t>(1, N * C) : 0;
  if (scale.numel() != C || bias.numel() != C) op_error(n, "scale and B must have one value per channel");
  const double eps = attr_f(n, "epsilon", 1e-5f);
  Tensor y = Tensor::empty(x.shape());
  for (int64_t p = 0; p < N * C; ++p) {
    const float* px = x.f32() + p * inner;
    double sum = 0, sq = 0;
    for (int64_t q = 0; q < inner; ++q) sum += px[q];
    const double mean = inner ? sum / static_cast<double>(inner) : 0;
    for (int64_t q = 0; q < inner; ++q) sq += (px[q] - mean) * (px[q] - mean);
    const double inv = 1 / std::sqrt((inner ? sq / static_cast<double>(inner) : 0) + eps);
    const double g = scale.f32()[p % C], b = bias.f32()[p % C];
    for (int64_t q = 0; q < inner; ++q) y.f32()[p * inner + q] = static_cast<float>((px[q] - mean) * inv * g + b);
  }
  out[0] = y;
}

// MeanVarianceNormalization: (x - mean) / (std + 1e-9) over `axes` (default N, H, W).
void op_mvn(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = float_input(n, in, 0);
  const int r = x.ndim();
  std::vector<bool> reduced(static_cast<size_t>(r), false);
  for (int64_t a : attr_ints(n, "axes", {0, 2, 3})) reduced[static_cast<size_t>(norm_axis(n, a, r))] = true;
  int64_t count = 0;
  const std::vector<int64_t> g = groups_of(x.shape(), reduced, &count);
  std::vector<double> sum(static_cast<size_t>(count)), sq(sum.size()), cnt(sum.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double v = x.f32()[i];
    sum[static_cast<size_t>(g[i])] += v, sq[static_cast<size_t>(g[i])] += v * v, cnt[static_cast<size_t>(g[i])] += 1;
  }
  Tensor y = Tensor::empty(x.shape());
  for (size_t i = 0; i < g.size(); ++i) {
    const auto k = static_cast<size_t>(g[i]);
    const double mean = sum[k] / cnt[k], var = std::max(0.0, sq[k] / cnt[k] - mean * mean);
    y.f32()[i] = static_cast<float>((x.f32()[i] - mean) / (std::sqrt(var) + 1e-9));
  }
  out[0] = y;
}

// LRN across channels: x / (bias + alpha / size * sum of x^2 over the size channels around)^beta.
void op_lrn(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = float_input(n, in, 0);
  if (x.ndim() < 3) op_error(n, "it takes [N, C, spatial...]");
  const int64_t size = attr_i(n, "size", 0);
  if (size < 1) op_error(n, "size must be positive");
  const double alpha = attr_f(n, "alpha", 1e-4f), beta = attr_f(n, "beta", 0.75f), bias = attr_f(n, "bias", 1.0f);
  const int64_t N = x.dim(0), C = x.dim(1), inner = C ? x.numel() / std::max<int64_t>(1, N * C) : 0;
  const int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  Tensor y = Tensor::empty(x.shape());
  for (int64_t s = 0; s < N; ++s)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t q = 0; q < inner; ++q) {
        double acc = 0;
        for (int64_t k = std::max<int64_t>(0, c - lo); k <= std::min(C - 1, c + hi); ++k) {
          const double v = x.f32()[(s * C + k) * inner + q];
          acc += v * v;
        }
        const int64_t i = (s * C + c) * inner + q;
        y.f32()[i] = static_cast<float>(x.f32()[i] / std::pow(bias + alpha / static_cast<double>(size) * acc, beta));
      }
  out[0] = y;
}

}  // namespace loom::rt::graph

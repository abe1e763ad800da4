// ops_conv_transpose.cpp — ConvTranspose over 1 to 3 spatial dimensions (groups, strides, pads,
// dilations, output_padding, output_shape, auto_pad), float32: per image and group one GEMM
// (the weights transposed times the input) into columns, then the columns added into the output
// at each kernel tap's place (col2im).
#include <algorithm>

#include "loom/rt/tensor/kernels.hpp"
#include "ops.hpp"

namespace loom::rt::graph {
namespace {

struct Geometry {
  int s = 0;                                   // spatial dimensions
  std::vector<int64_t> in, k, out, stride, dil, pad;  // pad: each dimension's start
  int64_t in_n = 1, k_n = 1, out_n = 1;        // their products
};

Geometry geometry_of(const Node& n, const Tensor& x, const Tensor& w) {
  auto mul = [&](int64_t a, int64_t b) {
    int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) op_error(n, "its sizes overflow int64");
    return r;
  };
  auto add = [&](int64_t a, int64_t b) {
    int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) op_error(n, "its sizes overflow int64");
    return r;
  };
  Geometry g;
  g.s = x.ndim() - 2;
  if (g.s < 1 || g.s > 3 || w.ndim() != x.ndim()) op_error(n, "it takes [N, C, 1 to 3 spatial dimensions] and a weight of that rank");
  for (int d = 0; d < g.s; ++d) g.in.push_back(x.dim(d + 2)), g.k.push_back(w.dim(d + 2));
  const auto ks = attr_ints(n, "kernel_shape", g.k);
  if (ks != g.k) op_error(n, "kernel_shape does not match the weight");
  const std::vector<int64_t> ones(static_cast<size_t>(g.s), 1), zeros(static_cast<size_t>(g.s), 0);
  g.stride = attr_ints(n, "strides", ones), g.dil = attr_ints(n, "dilations", ones);
  const auto opad = attr_ints(n, "output_padding", zeros), oshape = attr_ints(n, "output_shape");
  auto pads = attr_ints(n, "pads", std::vector<int64_t>(static_cast<size_t>(2 * g.s), 0));
  if (g.stride.size() != ones.size() || g.dil.size() != ones.size() || opad.size() != ones.size() || pads.size() != 2 * ones.size() ||
      (!oshape.empty() && oshape.size() != ones.size()))
    op_error(n, "strides, dilations, output_padding, pads or output_shape do not match the spatial rank");
  const std::string ap = attr_s(n, "auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "SAME_UPPER" && ap != "SAME_LOWER" && ap != "VALID") op_error(n, "auto_pad " + ap + " is not supported");
  for (size_t d = 0; d < ones.size(); ++d) {
    if (g.stride[d] < 1 || g.dil[d] < 1 || opad[d] < 0 || pads[d] < 0 || pads[d + ones.size()] < 0)
      op_error(n, "strides and dilations must be positive, pads and output_padding not negative");
    const int64_t full = add(add(mul(g.stride[d], g.in[d] - 1), opad[d]), add(mul(g.k[d] - 1, g.dil[d]), 1));
    int64_t size = -1;
    if (!oshape.empty() || ap == "SAME_UPPER" || ap == "SAME_LOWER") {  // pads from the output's size
      size = oshape.empty() ? mul(g.in[d], g.stride[d]) : oshape[d];
      if (size < 0) op_error(n, "a negative output_shape");
      const int64_t total = std::max<int64_t>(0, full - size);  // a larger output ends in zeros
      pads[d] = ap == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[d + ones.size()] = total - pads[d];
    } else if (ap == "VALID") {
      pads[d] = pads[d + ones.size()] = 0;
    }
    g.pad.push_back(pads[d]);
    g.out.push_back(size >= 0 ? size : add(full, -add(pads[d], pads[d + ones.size()])));
    if (g.out[d] < 0) op_error(n, "the pads are larger than the output");
  }
  g.in_n = numel_of(g.in), g.k_n = numel_of(g.k), g.out_n = numel_of(g.out);
  return g;
}

// Adds columns [m * k_n + tap][input position] into y [m][output position].
void col2im(const Geometry& g, const float* col, int64_t maps, float* y) {
  std::vector<int64_t> tap(static_cast<size_t>(g.s)), p(static_cast<size_t>(g.s));
  for (int64_t m = 0; m < maps; ++m)
    for (int64_t t = 0; t < g.k_n; ++t) {
      for (int64_t d = g.s - 1, r = t; d >= 0; --d) tap[static_cast<size_t>(d)] = r % g.k[static_cast<size_t>(d)], r /= g.k[static_cast<size_t>(d)];
      const float* c = col + (m * g.k_n + t) * g.in_n;
      for (int64_t i = 0; i < g.in_n; ++i) {
        int64_t at = 0;
        bool inside = true;
        for (int64_t d = g.s - 1, r = i; d >= 0; --d) p[static_cast<size_t>(d)] = r % g.in[static_cast<size_t>(d)], r /= g.in[static_cast<size_t>(d)];
        for (size_t d = 0; d < static_cast<size_t>(g.s) && inside; ++d) {
          const int64_t o = p[d] * g.stride[d] - g.pad[d] + tap[d] * g.dil[d];
          inside = o >= 0 && o < g.out[d];
          at = at * g.out[d] + o;
        }
        if (inside) y[m * g.out_n + at] += c[i];
      }
    }
}

}  // namespace

void op_conv_transpose(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &x = need(n, in, 0), &w = need(n, in, 1);
  const Tensor* bias = in.size() > 2 ? in[2] : nullptr;
  if (x.dtype() != DType::kF32 || w.dtype() != DType::kF32 || (bias && bias->dtype() != DType::kF32))
    op_error(n, "ConvTranspose runs on float32");
  const Geometry g = geometry_of(n, x, w);
  const int64_t N = x.dim(0), C = x.dim(1), groups = attr_i(n, "group", 1);
  if (groups < 1 || C % groups || w.dim(0) != C) op_error(n, "weight " + w.shape_str() + " does not fit input " + x.shape_str());
  const int64_t cg = C / groups, mg = w.dim(1), M = mg * groups;
  if (bias && bias->numel() != M) op_error(n, "bias has " + std::to_string(bias->numel()) + " values for " + std::to_string(M) + " maps");
  Shape ys = {N, M};
  ys.insert(ys.end(), g.out.begin(), g.out.end());
  Tensor y = Tensor::zeros(ys);
  const int64_t rows = mg * g.k_n;
  // With no input its dimensions may be of any size: the output is then the bias alone.
  const Tensor col = x.numel() && y.numel() ? Tensor::empty({rows, g.in_n}) : Tensor();  // within the run's memory budget
  for (int64_t b = 0; col.defined() && b < N; ++b)
    for (int64_t gi = 0; gi < groups; ++gi) {
      // col [mg * k_n, in_n] = W_g^T (W_g: [cg, mg * k_n]) x X_g [cg, in_n]
      cpu::gemm(true, false, static_cast<int>(rows), static_cast<int>(g.in_n), static_cast<int>(cg), 1.0f,
                w.f32() + gi * cg * rows, static_cast<int>(rows), x.f32() + (b * C + gi * cg) * g.in_n, static_cast<int>(g.in_n),
                0.0f, col.f32(), static_cast<int>(g.in_n));
      col2im(g, col.f32(), mg, y.f32() + (b * M + gi * mg) * g.out_n);
    }
  if (bias)
    for (int64_t p = 0; p < N * M; ++p)
      for (int64_t i = 0; i < g.out_n; ++i) y.f32()[p * g.out_n + i] += bias->f32()[p % M];
  out[0] = y;
}

}  // namespace loom::rt::graph

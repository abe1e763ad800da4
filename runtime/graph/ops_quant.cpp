// ops_quant.cpp — the QDQ operators of quantized ONNX models (QuantizeLinear, DequantizeLinear:
// per tensor or per axis, uint8 / int8 with ONNX's round-half-to-even and saturation) and Clip.
#include <algorithm>
#include <cmath>

#include "ops.hpp"

namespace loom::rt::graph {
namespace {

// The scale and zero point that apply to each element: one, or one per index of `axis`.
struct PerAxis {
  std::vector<float> scale;
  std::vector<int32_t> zero;
  int64_t inner = 1, dim = 1;  // element i uses index (i / inner) % dim
};

PerAxis per_axis(const Node& n, const Tensor& x, const Tensor& scale, const Tensor* zero) {
  PerAxis p;
  if (scale.dtype() != DType::kF32) op_error(n, "the scale must be float32");
  p.scale.assign(scale.f32(), scale.f32() + scale.numel());
  if (scale.numel() > 1) {
    if (scale.ndim() != 1) op_error(n, "a per-axis scale must be 1-D");
    const int axis = norm_axis(n, attr_i(n, "axis", 1), x.ndim());
    p.dim = x.dim(axis);
    if (scale.numel() != p.dim) op_error(n, "the scale has " + std::to_string(scale.numel()) + " values for an axis of " + std::to_string(p.dim));
    for (int d = axis + 1; d < x.ndim(); ++d) p.inner *= x.dim(d);
  }
  for (float s : p.scale)
    if (!(s > 0) || !std::isfinite(s)) op_error(n, "a scale must be positive and finite");
  p.zero.assign(p.scale.size(), 0);
  if (zero) {
    if (zero->numel() != scale.numel()) op_error(n, "the zero point and the scale differ in size");
    for (int64_t i = 0; i < zero->numel(); ++i)
      p.zero[static_cast<size_t>(i)] = zero->dtype() == DType::kI8 ? zero->data<int8_t>()[i] : zero->data<uint8_t>()[i];
  }
  return p;
}

}  // namespace

void op_quantize_linear(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &x = need(n, in, 0), &scale = need(n, in, 1);
  const Tensor* zero = in.size() > 2 ? in[2] : nullptr;
  if (x.dtype() != DType::kF32) op_error(n, "QuantizeLinear takes float32");
  const DType to = zero && zero->dtype() == DType::kI8 ? DType::kI8 : DType::kU8;
  if (zero && zero->dtype() != DType::kI8 && zero->dtype() != DType::kU8) op_error(n, "the zero point must be uint8 or int8");
  const PerAxis p = per_axis(n, x, scale, zero);
  const int lo = to == DType::kU8 ? 0 : -128, hi = to == DType::kU8 ? 255 : 127;
  Tensor y = Tensor::empty(x.shape(), to);
  for (int64_t i = 0, total = x.numel(); i < total; ++i) {
    const size_t c = static_cast<size_t>((i / p.inner) % p.dim);
    const float q = std::nearbyint(x.f32()[i] / p.scale[c]) + static_cast<float>(p.zero[c]);
    const int v = static_cast<int>(std::clamp(q, static_cast<float>(lo), static_cast<float>(hi)));
    if (to == DType::kU8) y.data<uint8_t>()[i] = static_cast<uint8_t>(v);
    else y.data<int8_t>()[i] = static_cast<int8_t>(v);
  }
  out[0] = y;
}

void op_dequantize_linear(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &x = need(n, in, 0), &scale = need(n, in, 1);
  const Tensor* zero = in.size() > 2 ? in[2] : nullptr;
  if (x.dtype() != DType::kU8 && x.dtype() != DType::kI8 && x.dtype() != DType::kI32)
    op_error(n, std::string("DequantizeLinear takes uint8, int8 or int32, not ") + dtype_name(x.dtype()));
  const PerAxis p = per_axis(n, x, scale, x.dtype() == DType::kI32 ? nullptr : zero);
  Tensor y = Tensor::empty(x.shape());
  for (int64_t i = 0, total = x.numel(); i < total; ++i) {
    const size_t c = static_cast<size_t>((i / p.inner) % p.dim);
    const int32_t v = x.dtype() == DType::kU8 ? x.data<uint8_t>()[i] : x.dtype() == DType::kI8 ? x.data<int8_t>()[i] : x.data<int32_t>()[i];
    y.f32()[i] = static_cast<float>(v - p.zero[c]) * p.scale[c];
  }
  out[0] = y;
}

void op_clip(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  if (x.dtype() != DType::kF32) op_error(n, std::string(dtype_name(x.dtype())) + " is not supported (Clip runs on float32)");
  const float lo = in.size() > 1 && in[1] ? in[1]->f32()[0] : -INFINITY;
  const float hi = in.size() > 2 && in[2] ? in[2]->f32()[0] : INFINITY;
  Tensor y = Tensor::empty(x.shape());
  for (int64_t i = 0, total = x.numel(); i < total; ++i) y.f32()[i] = std::min(std::max(x.f32()[i], lo), hi);
  out[0] = y;
}

}  // namespace loom::rt::graph

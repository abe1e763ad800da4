// ops_quant.cpp — the operators of quantized ONNX models: QDQ (QuantizeLinear, DequantizeLinear:
// per tensor or per axis, uint8 / int8 with ONNX's round-half-to-even and saturation), what
// onnxruntime's quantize_dynamic writes (DynamicQuantizeLinear, MatMulInteger, ConvInteger),
// QLinearMatMul, and Clip (ops_qlinear.cpp has the QOperator format's others). Integer products are summed exactly (int_matmul).
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

int32_t int_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kU8 ? t.data<uint8_t>()[i] : t.data<int8_t>()[i];
}

void need_int8(const Node& n, const Tensor& t, const char* what) {
  if (t.dtype() != DType::kU8 && t.dtype() != DType::kI8) op_error(n, std::string(what) + " must be uint8 or int8, not " + dtype_name(t.dtype()));
}

// t - zero as float32 (exact: |t - zero| <= 255). zero: absent, one value, or one per index of
// t's dimension `axis` (a's rows: -2; b's columns: -1).
Tensor centred(const Node& n, const Tensor& t, const Tensor* zero, int axis, const char* what) {
  need_int8(n, t, what);
  int64_t dim = 1, inner = 1;
  if (zero && zero->numel() > 1) {
    const int a = t.ndim() + axis;
    if (zero->ndim() != 1 || a < 0 || zero->dim(0) != t.dim(a))
      op_error(n, std::string(what) + "'s zero point has " + std::to_string(zero->numel()) + " values for its shape " + t.shape_str());
    dim = t.dim(a);
    for (int d = a + 1; d < t.ndim(); ++d) inner *= t.dim(d);
  }
  if (zero) need_int8(n, *zero, "a zero point");
  Tensor f = Tensor::empty(t.shape());
  for (int64_t i = 0, total = t.numel(); i < total; ++i)
    f.f32()[i] = static_cast<float>(int_at(t, i) - (zero ? int_at(*zero, (i / inner) % dim) : 0));
  return f;
}

// The copy of t's elements [k0, k0 + kc) along `axis`.
Tensor slice_axis(const Tensor& t, int axis, int64_t k0, int64_t kc) {
  Shape s = t.shape();
  const int64_t K = s[static_cast<size_t>(axis)];
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[static_cast<size_t>(d)];
  for (int d = axis + 1; d < t.ndim(); ++d) inner *= s[static_cast<size_t>(d)];
  s[static_cast<size_t>(axis)] = kc;
  Tensor y = Tensor::empty(s);
  for (int64_t o = 0; o < outer; ++o) std::copy_n(t.f32() + (o * K + k0) * inner, kc * inner, y.f32() + o * kc * inner);
  return y;
}

// (a - a_zero) x (b - b_zero) in int32, exactly: the operands as floats and the contracted
// dimension in chunks of 256, so that no float sum exceeds 255 * 255 * 256 < 2^24 (every partial
// sum an exact integer), each chunk's float GEMM added into int32.
Tensor int_matmul(const Node& n, const Tensor& a, const Tensor* a_zero, const Tensor& b, const Tensor* b_zero) {
  if (a.ndim() < 2 || b.ndim() < 2) op_error(n, "1-D operands are not supported");
  const Tensor fa = centred(n, a, a_zero, -2, "A"), fb = centred(n, b, b_zero, -1, "B");
  const int64_t K = a.dim(-1);
  constexpr int64_t kChunk = 256;
  Node mm;
  mm.op = "MatMul", mm.name = n.name;
  Tensor acc;
  for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += kChunk) {
    const int64_t kc = std::min(kChunk, K - k0);
    const Tensor ca = K <= kChunk ? fa : slice_axis(fa, a.ndim() - 1, k0, kc), cb = K <= kChunk ? fb : slice_axis(fb, b.ndim() - 2, k0, kc);
    std::vector<Tensor> y(1);
    op_matmul(mm, {&ca, &cb}, y);
    if (k0 == 0) acc = Tensor::zeros(y[0].shape(), DType::kI32);
    for (int64_t i = 0, total = acc.numel(); i < total; ++i) acc.data<int32_t>()[i] += static_cast<int32_t>(y[0].f32()[i]);
    if (K <= kChunk) break;
  }
  return acc;
}

}  // namespace

// ConvInteger(x, w, x_zero_point, w_zero_point): the int32 sums of (x - xz)(w - wz), exactly, as
// int_matmul sums: the input channels in chunks of at most 258 products per output value (each
// at most 255 * 255), every float partial sum an exact integer below 2^24.
void op_conv_integer(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &x = need(n, in, 0), &w = need(n, in, 1);
  if (x.ndim() != 4 || w.ndim() != 4) op_error(n, "only 2-D convolution is supported");
  const Tensor* xz = optional_input(in, 2);
  if (xz && xz->numel() != 1) op_error(n, "x_zero_point must be one value");
  const Tensor fx = centred(n, x, xz, -1, "x"), fw = centred(n, w, optional_input(in, 3), -4, "w");
  const int64_t C = x.dim(1), taps = w.dim(2) * w.dim(3);
  int64_t chunk = taps ? 258 / taps : C;  // input channels per chunk (a grouped one is summed whole)
  if (attr_i(n, "group", 1) != 1) chunk = w.dim(1) * taps <= 258 ? C : 0;
  if (chunk < 1) op_error(n, "its sums of more than 258 products per output are not summed exactly");
  Node conv = n;
  conv.op = "Conv";
  Tensor acc;
  for (int64_t c0 = 0; c0 < C || c0 == 0; c0 += chunk) {
    const int64_t cc = std::min(chunk, C - c0);
    const Tensor cx = C <= chunk ? fx : slice_axis(fx, 1, c0, cc), cw = C <= chunk ? fw : slice_axis(fw, 1, c0, cc);
    std::vector<Tensor> y(1);
    op_conv(conv, {&cx, &cw}, y);
    if (c0 == 0) acc = Tensor::zeros(y[0].shape(), DType::kI32);
    for (int64_t i = 0, total = acc.numel(); i < total; ++i) acc.data<int32_t>()[i] += static_cast<int32_t>(std::lrint(y[0].f32()[i]));
    if (C <= chunk) break;
  }
  out[0] = acc;
}

void op_matmul_integer(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  out[0] = int_matmul(n, need(n, in, 0), optional_input(in, 2), need(n, in, 1), optional_input(in, 3));
}

// y = saturate(round(acc * (a_scale * b_scale / y_scale)) + y_zero): a_scale one value or one
// per row, b_scale one or one per column, as ONNX's reference computes it (the factor in
// float32, the product in double).
void op_qlinear_matmul(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &a = need(n, in, 0), &as = need(n, in, 1), &az = need(n, in, 2), &b = need(n, in, 3), &bs = need(n, in, 4),
               &bz = need(n, in, 5), &ys = need(n, in, 6);
  const Tensor* yz = optional_input(in, 7);
  for (const Tensor* s : {&as, &bs, &ys})
    if (s->dtype() != DType::kF32) op_error(n, "the scales must be float32");
  if (ys.numel() != 1 || (yz && yz->numel() != 1)) op_error(n, "y_scale and y_zero_point must be one value each");
  const Tensor acc = int_matmul(n, a, &az, b, &bz);
  const int64_t N = acc.dim(-1), M = acc.dim(-2);
  if ((as.numel() != 1 && as.numel() != M) || (bs.numel() != 1 && bs.numel() != N)) op_error(n, "a_scale or b_scale does not match the operands");
  const DType to = yz ? yz->dtype() : DType::kU8;
  if (to != DType::kU8 && to != DType::kI8) op_error(n, "y_zero_point must be uint8 or int8");
  const double lo = to == DType::kU8 ? 0 : -128, hi = to == DType::kU8 ? 255 : 127, zp = yz ? int_at(*yz, 0) : 0;
  Tensor y = Tensor::empty(acc.shape(), to);
  for (int64_t i = 0, total = acc.numel(); i < total; ++i) {
    const float f = as.f32()[as.numel() == 1 ? 0 : (i / N) % M] * bs.f32()[bs.numel() == 1 ? 0 : i % N] / ys.f32()[0];
    const double v = std::clamp(std::nearbyint(static_cast<double>(acc.data<int32_t>()[i]) * static_cast<double>(f) + zp), lo, hi);
    if (to == DType::kU8) y.data<uint8_t>()[i] = static_cast<uint8_t>(v);
    else y.data<int8_t>()[i] = static_cast<int8_t>(v);
  }
  out[0] = y;
}

// ONNX's formula: the range widened to hold 0 over 255 steps (1/255 for an all-zero tensor), the
// zero point where the minimum falls, clamped and rounded half to even; y = saturate(round(x /
// scale) + zero point).
void op_dynamic_quantize_linear(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  if (x.dtype() != DType::kF32) op_error(n, "DynamicQuantizeLinear takes float32");
  float lo = 0, hi = 0;
  for (int64_t i = 0, total = x.numel(); i < total; ++i) {
    const float v = x.f32()[i];
    if (std::isnan(v)) op_error(n, "the input holds a NaN");
    lo = std::min(lo, v), hi = std::max(hi, v);
  }
  const float scale = (hi == lo ? 1.0f : hi - lo) / 255.0f;
  const float zp = std::nearbyint(std::clamp(0.0f - lo / scale, 0.0f, 255.0f));
  Tensor y = Tensor::empty(x.shape(), DType::kU8), s = Tensor::empty({}), z = Tensor::empty({}, DType::kU8);
  for (int64_t i = 0, total = x.numel(); i < total; ++i)
    y.data<uint8_t>()[i] = static_cast<uint8_t>(std::clamp(std::nearbyint(x.f32()[i] / scale) + zp, 0.0f, 255.0f));
  s.f32()[0] = scale;
  z.data<uint8_t>()[0] = static_cast<uint8_t>(zp);
  out[0] = y;
  if (out.size() > 1) out[1] = s;
  if (out.size() > 2) out[2] = z;
}

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

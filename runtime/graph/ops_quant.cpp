// ops_quant.cpp — the element-wise operators of quantized ONNX models: QDQ (QuantizeLinear,
// DequantizeLinear: per tensor or per axis, uint8 / int8 with ONNX's round-half-to-even and
// saturation), a QDQ pair fused into one pass, DynamicQuantizeLinear, and Clip; vectorised loops
// (ops_integer.cpp has the integer GEMMs, ops_qlinear.cpp the QOperator format's others).
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/rt/tensor/vec.hpp"
#include "ops.hpp"
#include "quant.hpp"

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

// fn(offset, count, c) over the runs of elements that share the scale and zero point c.
// fn(chunk, offset, count) over [0, total) in chunks of 16k values, spread over the threads.
constexpr int64_t kChunk = int64_t{1} << 14;
template <class Fn>
void for_chunks(int64_t total, Fn fn) {
  vec::for_items((total + kChunk - 1) / kChunk, kChunk, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) fn(c, c * kChunk, std::min(kChunk, total - c * kChunk));
  });
}

template <class Fn>
void for_axis_runs(const PerAxis& p, int64_t total, Fn fn) {
  if (p.scale.size() == 1) return for_chunks(total, [&](int64_t, int64_t o, int64_t count) { fn(o, count, size_t{0}); });
  for (int64_t o = 0, c = 0; o < total; o += p.inner, c = (c + 1) % p.dim) fn(o, std::min(p.inner, total - o), static_cast<size_t>(c));
}

// saturate(round(x / scale) + zero) in [lo, hi], as a float, NaN to lo. x / scale is clamped to
// +-2^20 first (past the reach of any zero point), so that adding and taking away 1.5 * 2^23
// rounds it half to even (the default rounding mode) without a libm call, and the loop widens.
__attribute__((always_inline)) inline float quantized(float x, float scale, float zero, float lo, float hi) {
  float v = x / scale;
  v = v > -1048576.0f ? v : -1048576.0f;
  v = v < 1048576.0f ? v : 1048576.0f;
  float q = ((v + 12582912.0f) - 12582912.0f) + zero;
  q = q > lo ? q : lo;
  return q < hi ? q : hi;
}

LOOM_VEC void quantize_u8(const float* x, int64_t n, float scale, float zero, uint8_t* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<uint8_t>(static_cast<int32_t>(quantized(x[i], scale, zero, 0.0f, 255.0f)));
}

LOOM_VEC void quantize_s8(const float* x, int64_t n, float scale, float zero, int8_t* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int8_t>(static_cast<int32_t>(quantized(x[i], scale, zero, -128.0f, 127.0f)));
}

// (x - zero) * scale for integers x (scale 1: the centred values of an integer GEMM's operand).
template <class T>
__attribute__((always_inline)) inline void dequantize_span(const T* x, int64_t n, float zero, float scale, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = (static_cast<float>(x[i]) - zero) * scale;
}
LOOM_VEC void dequantize_u8(const uint8_t* x, int64_t n, float zero, float scale, float* y) { dequantize_span(x, n, zero, scale, y); }
LOOM_VEC void dequantize_s8(const int8_t* x, int64_t n, float zero, float scale, float* y) { dequantize_span(x, n, zero, scale, y); }

// QLinearAdd (add) or QLinearMul of x and r over `rows` rows of n values, r one row of n (r's step
// 0: one value) read by each; every operand dequantized as DequantizeLinear does, the float sum
// or product quantized as QuantizeLinear does. The dequantized operands go through blocks of
// their own, so that no multiply-add is contracted.
template <class T>
__attribute__((always_inline)) inline void qbinary_rows(bool add, const T* x, const float* xq, const T* r, int64_t r_step, const float* rq,
                                                        const float* yq, T* y, int64_t rows, int64_t n) {
  constexpr int64_t kBlock = 64;
  const float lo = std::is_signed<T>::value ? -128.0f : 0.0f, hi = std::is_signed<T>::value ? 127.0f : 255.0f;
  float fx[kBlock], fr[kBlock];
  for (int64_t row = 0; row < rows; ++row, x += n, y += n)
    for (int64_t c0 = 0; c0 < n; c0 += kBlock) {
      const int64_t m = std::min(kBlock, n - c0);
      for (int64_t c = 0; c < m; ++c) fx[c] = (static_cast<float>(x[c0 + c]) - xq[1]) * xq[0];
      if (r_step) {
        for (int64_t c = 0; c < m; ++c) fr[c] = (static_cast<float>(r[c0 + c]) - rq[1]) * rq[0];
      } else {
        std::fill_n(fr, m, (static_cast<float>(r[0]) - rq[1]) * rq[0]);
      }
      if (add) {
        for (int64_t c = 0; c < m; ++c) y[c0 + c] = static_cast<T>(static_cast<int32_t>(quantized(fx[c] + fr[c], yq[0], yq[1], lo, hi)));
      } else {
        for (int64_t c = 0; c < m; ++c) y[c0 + c] = static_cast<T>(static_cast<int32_t>(quantized(fx[c] * fr[c], yq[0], yq[1], lo, hi)));
      }
    }
}
LOOM_VEC void qbinary_u8(bool add, const uint8_t* x, const float* xq, const uint8_t* r, int64_t r_step, const float* rq, const float* yq, uint8_t* y,
                         int64_t rows, int64_t n) {
  qbinary_rows(add, x, xq, r, r_step, rq, yq, y, rows, n);
}
LOOM_VEC void qbinary_s8(bool add, const int8_t* x, const float* xq, const int8_t* r, int64_t r_step, const float* rq, const float* yq, int8_t* y,
                         int64_t rows, int64_t n) {
  qbinary_rows(add, x, xq, r, r_step, rq, yq, y, rows, n);
}

// The smallest and largest of n floats with 0 (DynamicQuantizeLinear's range); false when one is
// NaN. In 16 lanes, so that the compares become vector min and max (a reduction of one lane does
// not widen: the order of NaNs and signed zeros would change).
LOOM_VEC bool range_with_zero(const float* x, int64_t n, float* lo, float* hi) {
  constexpr int kLanes = 16;
  float l[kLanes] = {}, h[kLanes] = {};
  int nan[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float v = x[i + j];
      l[j] = v < l[j] ? v : l[j];
      h[j] = v > h[j] ? v : h[j];
      nan[j] |= v != v;
    }
  for (; i < n; ++i) {
    const float v = x[i];
    l[0] = v < l[0] ? v : l[0];
    h[0] = v > h[0] ? v : h[0];
    nan[0] |= v != v;
  }
  int bad = 0;
  for (int j = 0; j < kLanes; ++j) {
    l[0] = std::min(l[0], l[j]), h[0] = std::max(h[0], h[j]);
    bad |= nan[j];
  }
  *lo = l[0], *hi = h[0];
  return bad == 0;
}

}  // namespace

// A QuantizeLinear and the DequantizeLinear of its output in one pass: (q - zero) * scale.
LOOM_VEC void quantize_dequantize(const float* x, int64_t n, float scale, float zero, float lo, float hi, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = (quantized(x[i], scale, zero, lo, hi) - zero) * scale;
}

int32_t int_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kU8 ? t.data<uint8_t>()[i] : t.data<int8_t>()[i];
}

void need_int8(const Node& n, const Tensor& t, const char* what) {
  if (t.dtype() != DType::kU8 && t.dtype() != DType::kI8) op_error(n, std::string(what) + " must be uint8 or int8, not " + dtype_name(t.dtype()));
}

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
  const int64_t total = t.numel(), run = dim == 1 ? total : inner;
  for (int64_t o = 0, c = 0; o < total; o += run, c = (c + 1) % dim) {
    const float z = zero ? static_cast<float>(int_at(*zero, c)) : 0.0f;
    const int64_t count = std::min(run, total - o);
    if (t.dtype() == DType::kU8) dequantize_u8(t.data<uint8_t>() + o, count, z, 1.0f, f.f32() + o);
    else dequantize_s8(t.data<int8_t>() + o, count, z, 1.0f, f.f32() + o);
  }
  return f;
}

// Spread over the threads by chunks of rows, or by chunks of a row where there is one (r one
// value, or as large as x).
void qlinear_binary(bool add, const Tensor& x, const float* xq, const Tensor& r, const float* rq, const float* yq, Tensor* y) {
  const int64_t n = x.numel(), rn = r.numel(), step = rn == 1 ? 0 : 1, row = rn == 1 ? n : rn, rows = row ? n / row : 0;
  const bool split_row = rows == 1;
  const int64_t part = split_row ? 4096 : row, parts = split_row ? (n + part - 1) / part : rows;
  vec::for_items(parts, part, [&](int64_t lo, int64_t hi) {
    // Elements [o, o + count): whole rows, or a piece of the one row (r then at the same offset).
    const int64_t o = lo * part, count = std::min(hi * part, n) - o, r_at = split_row ? o * step : 0;
    const int64_t span_rows = split_row ? 1 : hi - lo, span = split_row ? count : row;
    if (x.dtype() == DType::kU8)
      qbinary_u8(add, x.data<uint8_t>() + o, xq, r.data<uint8_t>() + r_at, step, rq, yq, y->data<uint8_t>() + o, span_rows, span);
    else
      qbinary_s8(add, x.data<int8_t>() + o, xq, r.data<int8_t>() + r_at, step, rq, yq, y->data<int8_t>() + o, span_rows, span);
  });
}

// ONNX's formula: the range widened to hold 0 over 255 steps (1/255 for an all-zero tensor), the
// zero point where the minimum falls, clamped and rounded half to even; y = saturate(round(x /
// scale) + zero point).
void op_dynamic_quantize_linear(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  if (x.dtype() != DType::kF32) op_error(n, "DynamicQuantizeLinear takes float32");
  const int64_t chunks = (x.numel() + kChunk - 1) / kChunk;
  std::vector<float> los(static_cast<size_t>(chunks)), his(static_cast<size_t>(chunks));
  std::vector<char> finite(static_cast<size_t>(chunks));
  for_chunks(x.numel(), [&](int64_t c, int64_t o, int64_t count) {
    const auto k = static_cast<size_t>(c);
    finite[k] = range_with_zero(x.f32() + o, count, &los[k], &his[k]);
  });
  float lo = 0, hi = 0;
  for (size_t k = 0; k < los.size(); ++k) {
    if (!finite[k]) op_error(n, "the input holds a NaN");
    lo = std::min(lo, los[k]), hi = std::max(hi, his[k]);
  }
  const float scale = (hi == lo ? 1.0f : hi - lo) / 255.0f;
  const float zp = std::nearbyint(std::clamp(0.0f - lo / scale, 0.0f, 255.0f));
  Tensor y = Tensor::empty(x.shape(), DType::kU8), s = Tensor::empty({}), z = Tensor::empty({}, DType::kU8);
  for_chunks(x.numel(), [&](int64_t, int64_t o, int64_t count) { quantize_u8(x.f32() + o, count, scale, zp, y.data<uint8_t>() + o); });
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
  Tensor y = Tensor::empty(x.shape(), to);
  for_axis_runs(p, x.numel(), [&](int64_t o, int64_t count, size_t c) {
    const float z = static_cast<float>(p.zero[c]);
    if (to == DType::kU8) quantize_u8(x.f32() + o, count, p.scale[c], z, y.data<uint8_t>() + o);
    else quantize_s8(x.f32() + o, count, p.scale[c], z, y.data<int8_t>() + o);
  });
  out[0] = y;
}

void op_dequantize_linear(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &x = need(n, in, 0), &scale = need(n, in, 1);
  const Tensor* zero = in.size() > 2 ? in[2] : nullptr;
  if (x.dtype() != DType::kU8 && x.dtype() != DType::kI8 && x.dtype() != DType::kI32)
    op_error(n, std::string("DequantizeLinear takes uint8, int8 or int32, not ") + dtype_name(x.dtype()));
  const PerAxis p = per_axis(n, x, scale, x.dtype() == DType::kI32 ? nullptr : zero);
  Tensor y = Tensor::empty(x.shape());
  for_axis_runs(p, x.numel(), [&](int64_t o, int64_t count, size_t c) {
    const float z = static_cast<float>(p.zero[c]), s = p.scale[c];
    if (x.dtype() == DType::kU8) return dequantize_u8(x.data<uint8_t>() + o, count, z, s, y.f32() + o);
    if (x.dtype() == DType::kI8) return dequantize_s8(x.data<int8_t>() + o, count, z, s, y.f32() + o);
    for (int64_t i = 0; i < count; ++i) y.f32()[o + i] = static_cast<float>(x.data<int32_t>()[o + i]) * s;
  });
  out[0] = y;
}

// Loom.QuantizeDequantize (fuse_quant.cpp): a QuantizeLinear whose output only DequantizeLinear
// nodes of the same scale and zero point read, as one pass: y = (saturate(round(x / scale) + zero)
// - zero) * scale, per tensor or per axis, the attributes and inputs QuantizeLinear's.
void op_quantize_dequantize(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &x = need(n, in, 0), &scale = need(n, in, 1);
  const Tensor* zero = optional_input(in, 2);
  if (x.dtype() != DType::kF32) op_error(n, "QuantizeLinear takes float32");
  if (zero && zero->dtype() != DType::kI8 && zero->dtype() != DType::kU8) op_error(n, "the zero point must be uint8 or int8");
  const bool s8 = zero && zero->dtype() == DType::kI8;
  const PerAxis p = per_axis(n, x, scale, zero);
  Tensor y = Tensor::empty(x.shape());
  for_axis_runs(p, x.numel(), [&](int64_t o, int64_t count, size_t c) {
    quantize_dequantize(x.f32() + o, count, p.scale[c], static_cast<float>(p.zero[c]), s8 ? -128.0f : 0.0f, s8 ? 127.0f : 255.0f, y.f32() + o);
  });
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

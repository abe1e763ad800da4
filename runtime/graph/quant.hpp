// quant.hpp — what the quantized operators share (ops_quant.cpp, ops_integer.cpp; the fake
// quantization inside attention, ops_attention.cpp): int8 tensors' elements and checks, and an
// integer operand centred on its zero point as floats.
#pragma once

#include <cstdint>

#include "ops.hpp"

namespace loom::rt::graph {

// Element i of a uint8 or int8 tensor.
int32_t int_at(const Tensor& t, int64_t i);
// Throws naming the node unless t is uint8 or int8.
void need_int8(const Node& n, const Tensor& t, const char* what);
// t - zero as float32 (exact: |t - zero| <= 255). zero: absent, one value, or one per index of
// t's dimension `axis` (a's rows: -2; b's columns: -1).
Tensor centred(const Node& n, const Tensor& t, const Tensor* zero, int axis, const char* what);
// QLinearAdd (add) or QLinearMul into y (x's shape and type): x and r uint8 or int8 of one type, r
// repeating over x every r.numel() values (x's trailing dimensions, or one value); each of xq, rq
// and yq the scale and the zero point.
void qlinear_binary(bool add, const Tensor& x, const float* xq, const Tensor& r, const float* rq, const float* yq, Tensor* y);
// y's values [at, at + n) = saturate(round(acc[i] * f[i * f_step]) + zero), the product in float
// (ONNX Runtime's), y uint8 or int8.
void requantize(const int32_t* acc, const float* f, int64_t f_step, float zero, Tensor* y, int64_t at, int64_t n);
// A QuantizeLinear and the DequantizeLinear of its output in one pass over n values (y may be x):
// (saturate(round half to even(x / scale) + zero) to [lo, hi] - zero) * scale.
void quantize_dequantize(const float* x, int64_t n, float scale, float zero, float lo, float hi, float* y);
// ConvInteger's sums into *acc on the int8 GEMM (conv_integer_int8; uint8 weights moved into int8,
// one zero point each, or w_zero's all equal); false where that does not apply.
bool int8_conv(const Node& n, const Tensor& x, const Tensor* x_zero, const Tensor& w, const Tensor* w_zero, Tensor* acc);

}  // namespace loom::rt::graph

// ops_qlinear.cpp — the operators of quantize_static's QOperator format: QLinearConv (ai.onnx), and
// ONNX Runtime's QLinearAdd, QLinearMul,
// QLinearAveragePool, QLinearGlobalAveragePool, QGemm, QLinearSoftmax, QLinearConcat,
// QLinearSigmoid and QLinearLeakyRelu (com.microsoft). Each dequantizes its operands
// (DequantizeLinear's kernel), runs the float operator it stands for, and quantizes the answer
// (QuantizeLinear's: round half to even, saturated), as ORT's reference kernels define them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "ops.hpp"
#include "quant.hpp"

namespace loom::rt::graph {

namespace {

// x (uint8 or int8) as float: (x - zero) * scale, per tensor or (scale of several values) along `axis`.
Tensor dequantized(const Node& n, const Tensor& x, const Tensor& scale, const Tensor* zero, int64_t axis = 1) {
  if (x.dtype() != DType::kU8 && x.dtype() != DType::kI8) op_error(n, std::string("a quantized operand is ") + dtype_name(x.dtype()) + ", not uint8 or int8");
  Tensor spread;  // one zero point for a scale per channel (QLinearConv allows it; DequantizeLinear does not)
  if (zero && zero->numel() == 1 && scale.numel() > 1) {
    spread = Tensor::empty({scale.numel()}, zero->dtype());
    std::fill_n(spread.data<char>(), scale.numel(), zero->data<char>()[0]);
    zero = &spread;
  }
  Node d;
  d.op = "DequantizeLinear", d.name = n.name;
  d.attrs["axis"] = Attr::of(axis);
  std::vector<Tensor> y(1);
  op_dequantize_linear(d, {&x, &scale, zero}, y);
  return y[0];
}

// y quantized by one scale and zero point (uint8 without a zero point).
Tensor quantized(const Node& n, const Tensor& y, const Tensor& scale, const Tensor* zero) {
  if (scale.numel() != 1 || (zero && zero->numel() != 1)) op_error(n, "the output's scale and zero point must be one value each");
  Node q;
  q.op = "QuantizeLinear", q.name = n.name;
  std::vector<Tensor> out(1);
  op_quantize_linear(q, {&y, &scale, zero}, out);
  return out[0];
}

// The node as the float operator `op` (its attributes but those of the quantized form).
Node as_float(const Node& n, const char* op) {
  Node f = n;
  f.op = op;
  f.attrs.erase("channels_last");
  f.attrs.erase("opset");
  return f;
}

std::vector<Tensor> run_float(const Node& f, OpFn fn, const std::vector<const Tensor*>& in) {
  std::vector<Tensor> y(1);
  fn(f, in, y);
  return y;
}

// An int32 bias of per-output-channel sums as float: bias * x_scale * w_scale[c].
Tensor float_bias(const Node& n, const Tensor& b, float x_scale, const Tensor& w_scale, int64_t channels) {
  if (b.dtype() != DType::kI32 || b.numel() != channels) op_error(n, "its bias must be int32 with one value per output channel");
  if (w_scale.numel() != 1 && w_scale.numel() != channels) op_error(n, "the weight's scale has neither one value nor one per channel");
  Tensor f = Tensor::empty({channels});
  for (int64_t c = 0; c < channels; ++c)
    f.f32()[c] = static_cast<float>(static_cast<double>(b.data<int32_t>()[c]) * x_scale * w_scale.f32()[w_scale.numel() == 1 ? 0 : c]);
  return f;
}

float one_scale(const Node& n, const Tensor& s, const char* what) {
  if (s.dtype() != DType::kF32 || s.numel() != 1) op_error(n, std::string(what) + " must be one float32 value");
  return s.f32()[0];
}

}  // namespace

namespace {

// QLinearConv on the int8 GEMM: the int32 sums (int8_conv) plus the int32 bias, requantized per
// output channel by x_scale * w_scale[m] / y_scale as QLinearMatMul is; false where the int8
// GEMM does not apply.
bool qlinear_conv_int8(const Node& n, const std::vector<const Tensor*>& in, Tensor* y) {
  const Tensor &x = need(n, in, 0), &xs = need(n, in, 1), &w = need(n, in, 3), &ws = need(n, in, 4), &ys = need(n, in, 6);
  const Tensor *yz = optional_input(in, 7), *b = optional_input(in, 8);
  const float x_scale = one_scale(n, xs, "x_scale"), y_scale = one_scale(n, ys, "y_scale");
  if (yz && (yz->numel() != 1 || (yz->dtype() != DType::kU8 && yz->dtype() != DType::kI8))) return false;
  Tensor acc;
  if (ws.dtype() != DType::kF32 || !int8_conv(n, x, optional_input(in, 2), w, optional_input(in, 5), &acc)) return false;
  const int64_t N = acc.dim(0), M = acc.dim(1), ohw = acc.dim(2) * acc.dim(3);
  if ((ws.numel() != 1 && ws.numel() != M) || (b && (b->dtype() != DType::kI32 || b->numel() != M)))
    op_error(n, "the weight's scale or the bias does not match its " + std::to_string(M) + " output channels");
  *y = Tensor::empty(acc.shape(), yz ? yz->dtype() : DType::kU8);
  const auto zero = static_cast<float>(yz ? int_at(*yz, 0) : 0);
  for (int64_t i = 0; i < N * M; ++i) {
    const int64_t m = i % M;
    int32_t* row = acc.data<int32_t>() + i * ohw;
    if (b)
      for (int64_t p = 0; p < ohw; ++p) row[p] = static_cast<int32_t>(static_cast<uint32_t>(row[p]) + static_cast<uint32_t>(b->data<int32_t>()[m]));
    const float f = x_scale * ws.f32()[ws.numel() == 1 ? 0 : m] / y_scale;
    requantize(row, &f, 0, zero, y, i * ohw, ohw);
  }
  return true;
}

}  // namespace

// QLinearConv's weight and bias as floats, made once where they and the scales they need are
// constants (fuse_quant.cpp): "loom.weights", "loom.bias" (absent: no bias).
void qlinear_conv_weights(const Node& n, const std::vector<const Tensor*>& in, std::map<std::string, Attr>* attrs) {
  const Tensor &xs = need(n, in, 1), &w = need(n, in, 3), &ws = need(n, in, 4);
  const Tensor* b = optional_input(in, 8);
  Attr fw, fb;
  fw.kind = fb.kind = Attr::kTensor;
  fw.t = dequantized(n, w, ws, optional_input(in, 5), 0);
  if (b) fb.t = float_bias(n, *b, one_scale(n, xs, "x_scale"), ws, w.ndim() ? w.dim(0) : 0), (*attrs)["loom.bias"] = std::move(fb);
  (*attrs)["loom.weights"] = std::move(fw);
}

// QLinearConv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B):
// through the float Conv, its weights made once at load where they are constants (oneDNN's
// primitive then kept for them); else on the int8 GEMM where that is exact, else with weights
// made for the call.
void op_qlinear_conv(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const auto made = n.attrs.find("loom.weights");
  if (made == n.attrs.end() && qlinear_conv_int8(n, in, &out[0])) return;
  const Tensor &x = need(n, in, 0), &xs = need(n, in, 1), &ys = need(n, in, 6);
  const Tensor fx = dequantized(n, x, xs, optional_input(in, 2));
  Node conv = as_float(n, "Conv");
  std::vector<Tensor> y;
  if (made != n.attrs.end()) {
    const auto bias = n.attrs.find("loom.bias");
    conv.attrs.erase("loom.weights"), conv.attrs.erase("loom.bias");
    y = run_float(conv, op_conv, {&fx, &made->second.t, bias != n.attrs.end() ? &bias->second.t : nullptr});
  } else {
    std::map<std::string, Attr> attrs;
    qlinear_conv_weights(n, in, &attrs);
    conv.attrs["loom.transient_weights"] = Attr::of(int64_t{1});
    y = run_float(conv, op_conv, {&fx, &attrs["loom.weights"].t, attrs.count("loom.bias") ? &attrs["loom.bias"].t : nullptr});
  }
  out[0] = quantized(n, y[0], ys, optional_input(in, 7));
}

// QLinearAdd / QLinearMul(A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point).
namespace {

// Whether r repeats over a shape every r.numel() values: its dimensions (leading 1s aside) the
// shape's trailing ones.
bool repeats_over(const Tensor& r, const Shape& shape) {
  Shape rs = r.shape();
  while (!rs.empty() && rs.front() == 1) rs.erase(rs.begin());
  return rs.size() <= shape.size() && std::equal(rs.begin(), rs.end(), shape.end() - static_cast<std::ptrdiff_t>(rs.size()));
}

// QLinearAdd / QLinearMul in one pass where one operand has the output's shape, the other repeats
// over it, both of one int8 type, every scale and zero point one value; false otherwise.
bool qlinear_binary_fast(const Node& n, const std::vector<const Tensor*>& in, Tensor* y) {
  const Tensor *a = in[0], *b = in.size() > 3 ? in[3] : nullptr;
  if (!a || !b || a->dtype() != b->dtype() || (a->dtype() != DType::kU8 && a->dtype() != DType::kI8)) return false;
  float q[3][2];
  for (int k = 0; k < 3; ++k) {
    const size_t si = k < 2 ? static_cast<size_t>(1 + 3 * k) : 6, zi = si + 1;  // A's, B's, then the output's
    const Tensor *s = si < in.size() ? in[si] : nullptr, *z = zi < in.size() ? in[zi] : nullptr;
    if (!s || s->dtype() != DType::kF32 || s->numel() != 1 || !(s->f32()[0] > 0) || !std::isfinite(s->f32()[0])) return false;
    if (z && (z->numel() != 1 || z->dtype() != a->dtype())) return false;
    q[k][0] = s->f32()[0], q[k][1] = z ? static_cast<float>(z->dtype() == DType::kU8 ? z->data<uint8_t>()[0] : z->data<int8_t>()[0]) : 0.0f;
  }
  const Shape shape = broadcast_shape(n, a->shape(), b->shape());
  const bool a_full = a->shape() == shape, b_full = b->shape() == shape;
  if (!(a_full && repeats_over(*b, shape)) && !(b_full && repeats_over(*a, shape))) return false;
  *y = Tensor::empty(shape, a->dtype());
  const bool add = n.op == "com.microsoft:QLinearAdd";
  if (a_full) qlinear_binary(add, *a, q[0], *b, q[1], q[2], y);
  else qlinear_binary(add, *b, q[1], *a, q[0], q[2], y);
  return true;
}

}  // namespace

void op_qlinear_binary(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  if (qlinear_binary_fast(n, in, &out[0])) return;
  const Tensor fa = dequantized(n, need(n, in, 0), need(n, in, 1), optional_input(in, 2)), fb = dequantized(n, need(n, in, 3), need(n, in, 4), optional_input(in, 5));
  const bool add = n.op == "com.microsoft:QLinearAdd";
  const std::vector<Tensor> y = run_float(as_float(n, add ? "Add" : "Mul"), add ? op_add : op_mul, {&fa, &fb});
  out[0] = quantized(n, y[0], need(n, in, 6), optional_input(in, 7));
}

// QLinearAveragePool, QLinearGlobalAveragePool, QLinearSoftmax, QLinearSigmoid, QLinearLeakyRelu
// (X, X_scale, X_zero_point, Y_scale, Y_zero_point): the float operator between.
void op_qlinear_unary(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  if (attr_i(n, "channels_last", 0) != 0) op_error(n, "channels_last is not supported");
  const std::string op = n.op.substr(std::strlen(kContribDomain) + 1 + std::strlen("QLinear"));
  if (op == "Softmax" && attr_i(n, "opset", 13) < 13) op_error(n, "opset " + std::to_string(attr_i(n, "opset", 13)) + "'s softmax (before 13) is not supported");
  const Tensor fx = dequantized(n, need(n, in, 0), need(n, in, 1), optional_input(in, 2));
  const OpFn fn = op == "AveragePool" ? op_pool : op == "GlobalAveragePool" ? op_global_avg_pool : op == "Softmax" ? op_softmax : op_unary;
  const std::vector<Tensor> y = run_float(as_float(n, op.c_str()), fn, {&fx});
  out[0] = quantized(n, y[0], need(n, in, 3), optional_input(in, 4));
}

// QLinearConcat(Y_scale, Y_zero_point, (X, X_scale, X_zero_point)...).
void op_qlinear_concat(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  if (in.size() < 5 || (in.size() - 2) % 3) op_error(n, "its inputs are not Y_scale, Y_zero_point and (X, X_scale, X_zero_point) triples");
  std::vector<Tensor> parts;
  for (size_t i = 2; i < in.size(); i += 3) parts.push_back(dequantized(n, need(n, in, i), need(n, in, i + 1), optional_input(in, i + 2)));
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : parts) ptrs.push_back(&t);
  const std::vector<Tensor> y = run_float(as_float(n, "Concat"), op_concat, ptrs);
  out[0] = quantized(n, y[0], need(n, in, 0), optional_input(in, 1));
}

// QGemm(A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale, y_zero_point): float
// without y_scale; C is an int32 bias in A's and B's scales.
void op_qgemm(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &a = need(n, in, 0), &as = need(n, in, 1), &b = need(n, in, 3), &bs = need(n, in, 4);
  const bool tb = attr_i(n, "transB", 0) != 0;
  const Tensor fa = dequantized(n, a, as, optional_input(in, 2)), fb = dequantized(n, b, bs, optional_input(in, 5), tb ? 0 : 1);
  const Tensor* c = optional_input(in, 6);
  const int64_t cols = b.ndim() == 2 ? b.dim(tb ? 0 : 1) : 0;
  const float alpha = attr_f(n, "alpha", 1.0f);
  Tensor fc = c ? float_bias(n, *c, one_scale(n, as, "a_scale") * alpha, bs, cols) : Tensor();
  Node g = as_float(n, "Gemm");
  g.attrs.erase("beta");
  const std::vector<Tensor> y = run_float(g, op_gemm, {&fa, &fb, c ? &fc : nullptr});
  const Tensor* ys = optional_input(in, 7);
  out[0] = ys ? quantized(n, y[0], *ys, optional_input(in, 8)) : y[0];
}

}  // namespace loom::rt::graph

// ops_integer.cpp — integer products of quantized ONNX models, summed exactly: MatMulInteger,
// ConvInteger, QLinearMatMul and quantize_dynamic's fused MatMulInteger chain, on oneDNN's int8
// GEMM where the CPU makes it exact (VNNI), else as float GEMMs over integers in chunks whose
// sums stay below 2^24, added in int32; QLinearMatMul's requantization.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/vec.hpp"
#include "ops.hpp"
#include "ops_fused.hpp"
#include "quant.hpp"

namespace loom::rt::graph {
namespace {

// y[c] *= s[c * step] over n columns (step 0: one scale).
LOOM_VEC void scale_columns(float* y, const float* s, int64_t step, int64_t n) {
  if (step == 0) {
    for (int64_t c = 0; c < n; ++c) y[c] *= s[0];
  } else {
    for (int64_t c = 0; c < n; ++c) y[c] *= s[c];
  }
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

// saturate(round(acc * f) + zero) in [lo, hi] as ONNX Runtime's requantization (MLAS) computes
// it: the int32 sum made a float, the product in float, clamped to [lo - zero, hi - zero], rounded
// half to even by adding and taking away 1.5 * 2^23, then moved by the zero point. Eight lanes a
// step where the double product the ONNX reference spells took four.
template <class T>
__attribute__((always_inline)) inline void requantize_span(const int32_t* acc, const float* f, int64_t f_step, float zero, float lo, float hi, T* y,
                                                           int64_t n) {
  const float below = lo - zero, above = hi - zero;
  auto one = [&](int64_t c, float factor) {
    float v = static_cast<float>(acc[c]) * factor;
    v = v > below ? v : below;  // NaN (an infinite scale times 0) to the bottom, as MAXPS does
    v = v < above ? v : above;
    v = (v + 12582912.0f) - 12582912.0f;
    y[c] = static_cast<T>(static_cast<int32_t>(v + zero));
  };
  if (f_step)
    for (int64_t c = 0; c < n; ++c) one(c, f[c]);
  else
    for (int64_t c = 0; c < n; ++c) one(c, f[0]);
}
LOOM_VEC void requantize_u8(const int32_t* acc, const float* f, int64_t f_step, float zero, uint8_t* y, int64_t n) {
  requantize_span(acc, f, f_step, zero, 0.0f, 255.0f, y, n);
}
LOOM_VEC void requantize_s8(const int32_t* acc, const float* f, int64_t f_step, float zero, int8_t* y, int64_t n) {
  requantize_span(acc, f, f_step, zero, -128.0f, 127.0f, y, n);
}

// y[M, N] = a[M, K] b[K, N] for floats that hold integers, exactly: each float sum of `chunk`
// products stays an integer of at most 2^24 and the chunks are added in int32 (wrapping, as ORT's
// int32 sums do). The sums go to `sums` when given (y then a scratch), else to y as Cast int32 ->
// float makes them.
void exact_gemm(const float* a, const float* b, int64_t M, int64_t K, int64_t N, int64_t chunk, float* y, int32_t* sums = nullptr) {
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  const size_t count = static_cast<size_t>(M * N);
  std::vector<uint32_t> acc(K > chunk ? count : 0, 0);
  if (K == 0) std::fill_n(y, count, 0.0f);
  for (int64_t k0 = 0; k0 < K; k0 += chunk) {
    cpu::gemm(false, false, i(M), i(N), i(std::min(chunk, K - k0)), 1.0f, a + k0, i(K), b + k0 * N, i(N), 0.0f, y, i(N));
    for (size_t j = 0; j < acc.size(); ++j) acc[j] += static_cast<uint32_t>(static_cast<int32_t>(y[j]));
  }
  if (sums && acc.empty()) {
    for (size_t j = 0; j < count; ++j) sums[j] = static_cast<int32_t>(y[j]);
  } else if (sums) {
    for (size_t j = 0; j < count; ++j) sums[j] = static_cast<int32_t>(acc[j]);
  } else if (!acc.empty()) {
    for (size_t j = 0; j < count; ++j) y[j] = static_cast<float>(static_cast<int32_t>(acc[j]));
  }
}

// The sums of products of (a - a_zero) and (b - b_zero), each at most 255 * 255: 258 of them
// stay below 2^24.
constexpr int64_t kExactChunk = 258;

// (a - a_zero) x (b - b_zero) in int32, exactly (exact_gemm; a batched b: each chunk's float
// GEMM added into int32).
// (a - a_zero) x (b - b_zero) on oneDNN's int8 GEMM into *acc: b int8, each zero point one value,
// b one matrix or as many as a (no broadcast); false where that does not apply.
bool int8_matmul(const Tensor& a, const Tensor* a_zero, const Tensor& b, const Tensor* b_zero, Tensor* acc) {
  if (b.dtype() != DType::kI8 || (a_zero && a_zero->numel() != 1) || (b_zero && b_zero->numel() != 1) || !cpu::exact_int8_gemm()) return false;
  const int64_t M = a.dim(-2), K = a.dim(-1), N = b.dim(-1);
  const Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  if (b.dim(-2) != K || (!bb.empty() && ab != bb)) return false;
  Shape os = ab;
  os.push_back(M), os.push_back(N);
  *acc = Tensor::empty(os, DType::kI32);
  const int64_t count = bb.empty() ? 1 : numel_of(ab), rows = bb.empty() ? numel_of(ab) * M : M;
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  for (int64_t j = 0; j < count; ++j)
    if (!cpu::gemm_int8(i(rows), i(N), i(K), a.data<uint8_t>() + j * rows * K, a.dtype() == DType::kI8, a_zero ? int_at(*a_zero, 0) : 0,
                        b.data<int8_t>() + j * K * N, b_zero ? int_at(*b_zero, 0) : 0, acc->data<int32_t>() + j * rows * N))
      return false;
  return true;
}

Tensor int_matmul(const Node& n, const Tensor& a, const Tensor* a_zero, const Tensor& b, const Tensor* b_zero) {
  if (a.ndim() < 2 || b.ndim() < 2) op_error(n, "1-D operands are not supported");
  need_int8(n, a, "A");
  if (Tensor acc; int8_matmul(a, a_zero, b, b_zero, &acc)) return acc;
  const Tensor fa = centred(n, a, a_zero, -2, "A"), fb = centred(n, b, b_zero, -1, "B");
  const int64_t K = a.dim(-1);
  if (b.ndim() == 2) {  // a weight: every row of a in one GEMM
    if (b.dim(0) != K) op_error(n, "cannot multiply " + a.shape_str() + " by " + b.shape_str());
    Shape os = a.shape();
    os.back() = b.dim(1);
    Tensor y = Tensor::empty(os), acc = Tensor::empty(os, DType::kI32);
    exact_gemm(fa.f32(), fb.f32(), K ? a.numel() / K : numel_of(os) / std::max<int64_t>(1, b.dim(1)), K, b.dim(1), kExactChunk, y.f32(),
               acc.data<int32_t>());
    return acc;
  }
  Node mm;
  mm.op = "MatMul", mm.name = n.name;
  Tensor acc;
  for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += kExactChunk) {
    const int64_t kc = std::min(kExactChunk, K - k0);
    const Tensor ca = K <= kExactChunk ? fa : slice_axis(fa, a.ndim() - 1, k0, kc), cb = K <= kExactChunk ? fb : slice_axis(fb, b.ndim() - 2, k0, kc);
    std::vector<Tensor> y(1);
    op_matmul(mm, {&ca, &cb}, y);
    if (k0 == 0) acc = Tensor::zeros(y[0].shape(), DType::kI32);
    for (int64_t i = 0, total = acc.numel(); i < total; ++i) acc.data<int32_t>()[i] += static_cast<int32_t>(y[0].f32()[i]);
    if (K <= kExactChunk) break;
  }
  return acc;
}

}  // namespace

void requantize(const int32_t* acc, const float* f, int64_t f_step, float zero, Tensor* y, int64_t at, int64_t n) {
  if (y->dtype() == DType::kU8) requantize_u8(acc, f, f_step, zero, y->data<uint8_t>() + at, n);
  else requantize_s8(acc, f, f_step, zero, y->data<int8_t>() + at, n);
}

bool int8_conv(const Node& n, const Tensor& x, const Tensor* x_zero, const Tensor& w, const Tensor* w_zero, Tensor* acc) {
  const int64_t zn = w_zero ? w_zero->numel() : 0;
  for (int64_t i = 1; i < zn; ++i)
    if (int_at(*w_zero, i) != int_at(*w_zero, 0)) return false;
  if ((x_zero && x_zero->numel() != 1) || (w.dtype() != DType::kU8 && w.dtype() != DType::kI8) || !cpu::exact_int8_gemm()) return false;
  const int shift = w.dtype() == DType::kU8 ? 128 : 0;
  Tensor w8 = w;
  if (shift) {
    w8 = Tensor::empty(w.shape(), DType::kI8);
    for (int64_t i = 0; i < w.numel(); ++i) w8.data<int8_t>()[i] = static_cast<int8_t>(w.data<uint8_t>()[i] - 128);
  }
  return conv_integer_int8(n, x, x_zero ? int_at(*x_zero, 0) : 0, w8, (zn ? int_at(*w_zero, 0) : 0) - shift, acc);
}

// ConvInteger(x, w, x_zero_point, w_zero_point): the int32 sums of (x - xz)(w - wz), exactly: on
// the int8 GEMM (int8_conv), else as int_matmul sums: the input channels in chunks of at most 258
// products per output value (each at most 255 * 255), every float partial sum an exact integer
// below 2^24.
void op_conv_integer(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &x = need(n, in, 0), &w = need(n, in, 1);
  if (x.ndim() != 4 || w.ndim() != 4) op_error(n, "only 2-D convolution is supported");
  const Tensor* xz = optional_input(in, 2);
  if (xz && xz->numel() != 1) op_error(n, "x_zero_point must be one value");
  need_int8(n, x, "x");
  if (int8_conv(n, x, xz, w, optional_input(in, 3), &out[0])) return;
  const Tensor fx = centred(n, x, xz, -1, "x"), fw = centred(n, w, optional_input(in, 3), -4, "w");
  const int64_t C = x.dim(1), taps = w.dim(2) * w.dim(3);
  int64_t chunk = taps ? 258 / taps : C;  // input channels per chunk (a grouped one is summed whole)
  if (attr_i(n, "group", 1) != 1) chunk = w.dim(1) * taps <= 258 ? C : 0;
  if (chunk < 1) op_error(n, "its sums of more than 258 products per output are not summed exactly");
  Node conv = n;
  conv.op = "Conv";
  conv.attrs["loom.transient_weights"] = Attr::of(int64_t{1});
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
// per row, b_scale one or one per column, the factor and the product in float32 as ONNX
// Runtime computes them.
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
  const auto zp = static_cast<float>(yz ? int_at(*yz, 0) : 0);
  Tensor y = Tensor::empty(acc.shape(), to);
  vec::for_items(N ? acc.numel() / N : 0, N, [&](int64_t lo, int64_t hi) {
    std::vector<float> f(static_cast<size_t>(N));
    for (int64_t r = lo; r < hi; ++r) {
      if (r == lo || as.numel() != 1)
        for (int64_t c = 0; c < N; ++c) f[static_cast<size_t>(c)] = as.f32()[as.numel() == 1 ? 0 : r % M] * bs.f32()[bs.numel() == 1 ? 0 : c] / ys.f32()[0];
      requantize(acc.data<int32_t>() + r * N, f.data(), 1, zp, &y, r * N, N);
    }
  });
  out[0] = y;
}

// The most products of an operand within 255 of zero and one of `centred`'s values that a float
// sum holds exactly (every partial sum an integer of at most 2^24).
int64_t exact_chunk(const Tensor& centred) {
  float most = 0;
  for (int64_t i = 0, total = centred.numel(); i < total; ++i) most = std::max(most, std::fabs(centred.f32()[i]));
  const auto m = static_cast<int64_t>(most);  // an integer of at most 255
  return m > 0 ? (int64_t{1} << 24) / (255 * m) : std::max<int64_t>(1, centred.numel());
}

// The weight of a Loom.MatMulIntegerToFloat, as its kernel takes it: int8 with one zero point
// ("loom.weights_s8", "loom.weights_zero"; uint8 moved down by 128, the zero point with it) for
// oneDNN's int8 GEMM where that is exact, else (W - W_zero) as floats ("loom.weights") and the
// products a float sum holds exactly ("loom.chunk").
void matmul_integer_weights(const Node& n, const Tensor& w, const Tensor* zero, std::map<std::string, Attr>* attrs) {
  need_int8(n, w, "B");
  if (zero) need_int8(n, *zero, "B's zero point");
  const int64_t count = zero ? zero->numel() : 0;
  bool one_zero = true;
  for (int64_t i = 1; i < count; ++i) one_zero = one_zero && int_at(*zero, i) == int_at(*zero, 0);
  if (cpu::exact_int8_gemm() && one_zero) {
    const int shift = w.dtype() == DType::kU8 ? 128 : 0;
    Attr s8;
    s8.kind = Attr::kTensor;
    s8.t = Tensor::empty(w.shape(), DType::kI8);
    for (int64_t i = 0, total = w.numel(); i < total; ++i) s8.t.data<int8_t>()[i] = static_cast<int8_t>(int_at(w, i) - shift);
    (*attrs)["loom.weights_s8"] = std::move(s8);
    (*attrs)["loom.weights_zero"] = Attr::of(int64_t{(count ? int_at(*zero, 0) : 0) - shift});
    return;
  }
  Attr f;
  f.kind = Attr::kTensor;
  f.t = centred(n, w, zero, -1, "B");
  (*attrs)["loom.chunk"] = Attr::of(exact_chunk(f.t));
  (*attrs)["loom.weights"] = std::move(f);
}

namespace {

// y[c] = acc[c] * s[c * step], then + bias[c], over a row of n int32 sums (step 0: one scale). The
// bias is added in a loop of its own: in one expression GCC would contract the two into a fused
// multiply-add, rounding once where the Mul and Add nodes it stands for round twice.
LOOM_VEC void scale_sums(const int32_t* acc, const float* s, int64_t step, const float* bias, float* y, int64_t n) {
  if (step) {
    for (int64_t c = 0; c < n; ++c) y[c] = static_cast<float>(acc[c]) * s[c];
  } else {
    for (int64_t c = 0; c < n; ++c) y[c] = static_cast<float>(acc[c]) * s[0];
  }
  if (bias)
    for (int64_t c = 0; c < n; ++c) y[c] += bias[c];
}

// The int8 GEMM of a Loom.MatMulIntegerToFloat, its scales and bias applied on the way out; false
// where it does not apply (weights held as floats, a per-row zero-pointed a, a CPU
// without the exact int8 GEMM).
bool int8_matmul_to_float(const Node& n, const Tensor& a, const Tensor* az, const Tensor& scale, const Tensor* bias, Tensor* y) {
  const auto w = n.attrs.find("loom.weights_s8");
  const bool s8 = a.dtype() == DType::kI8;
  if (w == n.attrs.end() || (a.dtype() != DType::kU8 && !s8) || (az && (az->numel() != 1 || az->dtype() != a.dtype()))) return false;
  const int64_t K = w->second.t.dim(0), N = w->second.t.dim(1), rows = y->numel() / std::max<int64_t>(N, 1);
  Tensor acc = Tensor::empty(y->shape(), DType::kI32);
  const int zero = !az ? 0 : int_at(*az, 0);
  if (!cpu::gemm_int8(static_cast<int>(rows), static_cast<int>(N), static_cast<int>(K), a.data<char>(), s8, zero,
                      w->second.t.data<int8_t>(), static_cast<int>(attr_i(n, "loom.weights_zero", 0)), acc.data<int32_t>()))
    return false;
  const int64_t step = scale.numel() == 1 ? 0 : 1;
  vec::for_items(rows, N, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      scale_sums(acc.data<int32_t>() + r * N, scale.f32(), step, bias ? bias->f32() : nullptr, y->f32() + r * N, N);
  });
  return true;
}

// The weights of a Loom.MatMulIntegerToFloat as floats (W - W_zero), and the chunk a float sum of
// their products holds exactly.
std::pair<Tensor, int64_t> float_weights(const Node& n) {
  if (const auto f = n.attrs.find("loom.weights"); f != n.attrs.end()) return {f->second.t, attr_i(n, "loom.chunk", kExactChunk)};
  const Tensor& w = n.attrs.at("loom.weights_s8").t;
  Tensor zero = Tensor::empty({}, DType::kI8);
  zero.data<int8_t>()[0] = static_cast<int8_t>(attr_i(n, "loom.weights_zero", 0));  // as the int8 GEMM would take it
  Tensor shifted = centred(n, w, &zero, -1, "B");
  return {shifted, exact_chunk(shifted)};
}

}  // namespace

// Loom.MatMulIntegerToFloat (fuse_quant.cpp): quantize_dynamic's MatMulInteger(a, W, a_zero,
// W_zero) -> Cast to float -> Mul by the scales -> Add of a bias row (optional) -> GELU (optional,
// "loom.gelu"), as one GEMM: inputs a, a_zero (or absent), the scales (one value or one per
// column), the bias (or absent), and the weight's scale where the kernel multiplies the scales
// itself (input 2 then a's); the weight in its attributes (matmul_integer_weights). The sums are
// exact and each step after rounds as the node it replaces.
void op_matmul_integer_to_float(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor *az = optional_input(in, 1), *bias = optional_input(in, 3), *w_scale = optional_input(in, 4);
  std::vector<Tensor> quantized(1);  // loom.quantize_a: the float activation as QuantizeLinear(a, scale, zero)
  if (attr_i(n, "loom.quantize_a", 0)) {
    Node q;
    q.op = "QuantizeLinear", q.name = n.name;
    op_quantize_linear(q, {&need(n, in, 0), &need(n, in, 2), az}, quantized);
  }
  const Tensor& a = quantized[0].defined() ? quantized[0] : need(n, in, 0);
  Tensor product;  // the activation's scale times the weight's, as the Mul it stands for
  if (w_scale) {
    Node mul;
    mul.op = "Mul", mul.name = n.name;
    std::vector<Tensor> y(1);
    op_mul(mul, {&need(n, in, 2), w_scale}, y);
    product = y[0];
  }
  const Tensor& scale = w_scale ? product : need(n, in, 2);
  const auto w8 = n.attrs.find("loom.weights_s8");
  const Tensor& w = w8 != n.attrs.end() ? w8->second.t : n.attrs.at("loom.weights").t;
  const int64_t K = w.dim(0), N = w.dim(1);
  if (a.ndim() < 2 || a.dim(-1) != K) op_error(n, "cannot multiply " + a.shape_str() + " by [" + std::to_string(K) + "," + std::to_string(N) + "]");
  if (scale.dtype() != DType::kF32 || (scale.numel() != 1 && (scale.numel() != N || scale.dim(-1) != N)))
    op_error(n, "the scale " + scale.shape_str() + " is neither one value nor one per column of " + std::to_string(N));
  if (bias && (bias->dtype() != DType::kF32 || bias->numel() != N)) op_error(n, "the fused bias does not match the output");
  Shape os = a.shape();
  os.back() = N;
  Tensor y = Tensor::empty(os);
  const int64_t rows = numel_of(os) / std::max<int64_t>(N, 1);
  const bool gelu = attr_i(n, "loom.gelu", 0) != 0;
  if (int8_matmul_to_float(n, a, az, scale, bias, &y)) {
    if (gelu) gelu_rows(y.f32(), y.f32(), y.numel());
    out[0] = y;
    return;
  }
  const Tensor fa = centred(n, a, az, -2, "A");
  const auto [fw, chunk] = float_weights(n);
  exact_gemm(fa.f32(), fw.f32(), rows, K, N, chunk, y.f32());
  float* p = y.f32();
  for (int64_t r = 0; r < rows; ++r, p += N) scale_columns(p, scale.f32(), scale.numel() == 1 ? 0 : 1, N);
  if (bias) cpu::bias_act(y.f32(), bias->f32(), rows, N, gelu ? cpu::Act::kGelu : cpu::Act::kNone);
  else if (gelu) gelu_rows(y.f32(), y.f32(), y.numel());
  out[0] = y;
}

}  // namespace loom::rt::graph

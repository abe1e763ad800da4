// int8.hpp — INT8 arithmetic for quantized models: PyTorch's quantization formulas
// (round half to even, clamp) and an int8 linear layer whose GEMM runs on oneDNN's int8 matmul
// primitive with the requantization fused into its epilogue (bias, ReLU, the next layer's scale),
// so activations stay uint8 between layers. Without oneDNN the same arithmetic runs as plain
// loops (exact int32 accumulation), which is also the reference the tests compare against.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom::rt::int8 {

// Activations: affine uint8, real = scale * (q - zero_point), q in [0, kActMax]. kActMax is 127,
// not 255 ("reduce range", as PyTorch's fbgemm backend does): on CPUs without VNNI the u8 x s8
// multiply-add sums pairs of products into int16, and 255 * 127 * 2 would saturate it.
constexpr int kActMax = 127;
struct QParams {
  float scale = 1.0f;
  int zero_point = 0;
};
// The affine parameters of PyTorch's MinMaxObserver (quint8, reduce_range) for a range that
// is widened to hold 0: scale = (max - min) / kActMax, zero_point = clamp(round(-min / scale)).
QParams affine_from_range(float lo, float hi);

// round_half_even(x * (1.0f / scale)) + zp, clamped to [qmin, qmax] — torch.quantize_per_channel's
// formula (PyTorch's quantize_val multiplies by the float inverse of the scale).
int quantize_value(float x, float scale, int zero_point, int qmin, int qmax);
// Per-output-channel symmetric int8 weights of w [rows, cols]: scale[r] = max|w[r,:]| / 127.5
// (PyTorch's PerChannelMinMaxObserver, qint8, per_channel_symmetric; eps-floored), zero point 0.
// `per_tensor`: one scale for the whole tensor (max|w| / 127.5), repeated for every channel.
std::vector<float> symmetric_scales(const float* w, int rows, int cols, bool per_tensor = false);
void quantize_per_channel(const float* w, int rows, int cols, const float* scale, int8_t* out);
void quantize_u8(const float* x, int64_t n, QParams q, uint8_t* out);

// Whether the int8 GEMM runs on oneDNN in this build ("onednn") or on the reference loops ("reference").
const char* backend();

// y = epilogue(sum_k (x[m,k] - x_zp) * w[n,k]) for x uint8 [M,K] and w int8 [N,K] (PyTorch's
// Linear layout). The epilogue of output kind:
//   kS32: the int32 accumulator itself (for benchmarks and tests)
//   kF32: acc * scale[n] + bias[n], ReLU when asked
//   kU8:  clamp(round_half_even(acc * scale[n] + bias[n]) (ReLU when asked) + out_zp, 0, kActMax)
// For a layer whose input has scale s_x and weights s_w[n], and whose output feeds a layer of
// input scale s_y: kF32 takes scale = s_x s_w[n] and the float bias; kU8 takes
// scale = s_x s_w[n] / s_y and bias / s_y.
enum class Out { kS32, kF32, kU8 };
struct Epilogue {
  Out out = Out::kS32;
  std::vector<float> scale, bias;  // per output channel (bias may be empty)
  bool relu = false;
  int out_zero_point = 0;
};

class Linear {
 public:
  // w: int8 [n, k], copied. Throws Error on bad sizes.
  Linear(int n, int k, const int8_t* w, int x_zero_point, Epilogue e);
  ~Linear();
  Linear(Linear&&) noexcept;
  Linear& operator=(Linear&&) noexcept;
  int in() const { return k_; }
  int out() const { return n_; }
  const Epilogue& epilogue() const { return e_; }
  // x: uint8 [m, k]; y: int32, float or uint8 [m, n] as the epilogue says. Thread-safe.
  void run(const uint8_t* x, int m, void* y) const;
  // The same through the reference loops, whatever the build.
  void run_reference(const uint8_t* x, int m, void* y) const;

 private:
  int n_, k_, x_zp_;
  // The weights as given. With oneDNN, released once reordered into the layout its primitives
  // take (and restored from there when another layout or the reference loops need them): a
  // served model holds one copy of its int8 weights, not two.
  mutable std::vector<int8_t> w_;
  Epilogue e_;
  struct Impl;
  std::unique_ptr<Impl> impl_;  // oneDNN primitives by batch size, when built with it
};

// A linear layer with int8 weights and float inputs and outputs (PyTorch's dynamic quantization,
// quantize_dynamic, with a range per input row rather than per tensor: each token's activations
// set their own scale, so one outlier token costs the others no precision). Each row of x is
// quantized to uint8 over its own range widened to hold 0 (affine_from_range), the GEMM runs on
// Linear with an int32 result, and
//   y[m,n] = s_x[m] s_w[n] (sum_k q[m,k] w[n,k] - zp[m] sum_k w[n,k]) + bias[n].
class DynamicLinear {
 public:
  // w: int8 [n, k] with one scale per output channel (symmetric_scales). Throws Error on bad sizes.
  DynamicLinear(int n, int k, const int8_t* w, std::vector<float> scale);
  int in() const { return lin_.in(); }
  int out() const { return lin_.out(); }
  const std::vector<float>& scale() const { return scale_; }
  // x float [m, k] -> y float [m, n]; bias may be null. Thread-safe.
  void run(const float* x, int m, const float* bias, float* y) const;
  // The same with the GEMM on the reference loops.
  void run_reference(const float* x, int m, const float* bias, float* y) const;

 private:
  void run(const float* x, int m, const float* bias, float* y, bool reference) const;
  Linear lin_;
  std::vector<float> scale_;
  std::vector<int32_t> wsum_;  // sum_k w[n,k]
};

}  // namespace loom::rt::int8

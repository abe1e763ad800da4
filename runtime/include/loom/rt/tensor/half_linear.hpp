// half_linear.hpp — a linear layer whose weights stay 16-bit (BF16 or F16) in memory, as a
// checkpoint stores them: each GEMM converts a block of rows at a time into a per-thread float
// buffer and multiplies it there, so the products are float32's (what PyTorch computes after
// upcasting the same weights) while the weights take half the memory of a float copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace loom::rt {

class HalfLinear {
 public:
  // w: [out, in] 16-bit values (bf16: bfloat16, else IEEE half), moved in.
  HalfLinear(std::vector<uint16_t> w, int out, int in, bool bf16);
  int out() const { return out_; }
  int in() const { return in_; }
  bool bf16() const { return bf16_; }
  size_t bytes() const { return w_.size() * sizeof(uint16_t); }
  // y[m, out] = x[m, in] w^T (+ bias[out]). Thread-safe.
  void run(const float* x, int m, const float* bias, float* y) const;
  // Row r as floats (an embedding's lookup).
  void row(int r, float* out) const;
  // Rows [r0, r0 + n) as floats into out [n, in].
  void rows(int r0, int n, float* out) const;

 private:
  std::vector<uint16_t> w_;
  int out_, in_;
  bool bf16_;
};

}  // namespace loom::rt

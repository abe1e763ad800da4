// packed_linear.hpp — a float linear layer for inference whose weights are reordered once into
// the layout oneDNN's matmul prefers, with the row count left to run time: one primitive serves
// every batch size. dnnl_sgemm re-packs its B operand on every call, which at the decoder's
// 8-64 rows costs as much as the multiply (measured on AVX-512: 1.4-2.3x more GFLOP/s packed
// once; doc/serve.md). Without oneDNN, or with OpenBLAS chosen as the GEMM, it is gemm().
#pragma once

#include <memory>

#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt {

class PackedLinear {
 public:
  // w: float [out, in] (torch.nn.Linear's layout); bias: [out] or null. Both copied.
  PackedLinear(const Tensor& w, const Tensor* bias);
  ~PackedLinear();
  PackedLinear(const PackedLinear&) = delete;
  PackedLinear& operator=(const PackedLinear&) = delete;
  int out() const { return n_; }
  int in() const { return k_; }
  // y [rows, out] = x [rows, in] w^T + bias. Thread-safe.
  void run(const float* x, int rows, float* y) const;
  // Whether the weights live in oneDNN's layout ("onednn") or as given, for gemm() ("gemm").
  const char* path() const;

 private:
  int n_, k_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::rt

// gpt_kernels.hpp — the gpt's layers, forward and backward (gpt.cpp composes them), on the CPU
// or on the GPU.
// Attention runs as GEMMs per (sequence, head) — S = Q K^T, causal softmax, Y = P V and their
// gradients — and the element-wise layers run over rows with the AVX2 exp and erf of vec.hpp;
// with OpenMP loops on (cpu::openmp_loops) each spreads over the threads. Sums across rows
// (LayerNorm's dgamma and dbeta) add fixed blocks of rows in a fixed order: the result does not
// depend on the number of threads.
#pragma once

#include <random>

#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt::gptk {

// Every layer runs where its tensors live: on the CPU here, on the GPU through gpt_cuda.hpp and
// cuBLAS (outputs are allocated on the input's device).
Tensor& ensure(Tensor& t, std::vector<int64_t> shape, Device device = Device::kCpu);
// y[N,out] = x[N,in] W[out,in]^T (+ b)
void linear_fwd(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
// dW = dy^T x, db = sum dy, dx = dy W (overwrites; db and dx optional)
void linear_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dw, Tensor* db, Tensor* dx);
void layernorm_fwd(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean, Tensor& rstd);
// dx += LayerNorm's input gradient (the residual stream adds); dgamma, dbeta overwritten.
void layernorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& gamma,
                   Tensor& dx, Tensor& dgamma, Tensor& dbeta);
// qkv [B*T, 3C] -> att [B, H, T, T] (causal softmax, zeros above the diagonal), y [B*T, C].
void attention_fwd(const Tensor& qkv, int b, int t, int h, int c, Tensor& att, Tensor& y);
void attention_bwd(const Tensor& dy, const Tensor& qkv, const Tensor& att, int b, int t, int h, int c, Tensor& dqkv);
// y = x Phi(x) (erf GELU, as torch's default); Phi(x) is kept in cdf for the backward.
void gelu_fwd(const Tensor& x, Tensor& y, Tensor& cdf);
void gelu_bwd(const Tensor& x, const Tensor& cdf, Tensor& dy);  // in place: dy becomes dx
// out = a + b (element-wise; out may be a or b)
void add(const Tensor& a, const Tensor& b, Tensor& out);
// Dropout: mask holds 0 or 1/(1-p); applied in place. p == 0 (or eval) leaves mask undefined.
void dropout_fwd(Tensor& x, Tensor& mask, float p, bool train, std::mt19937_64& rng);
void dropout_bwd(Tensor& dy, const Tensor& mask);

}  // namespace loom::rt::gptk

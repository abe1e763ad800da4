// gpt_kernels.hpp — the gpt's layers, forward and backward (gpt.cpp composes them), on the CPU
// or on the GPU.
// Attention runs as GEMMs per (sequence, head) — S = Q K^T, causal softmax, Y = P V and their
// gradients —, either keeping P [B, H, T, T] for the backward (full) or, flash, keeping only each
// row's log-sum-exp and recomputing P tile by tile (flash_attention.cpp); the element-wise layers run over rows with the vectorised exp and normal CDF of vec.hpp;
// with OpenMP loops on (cpu::openmp_loops) each spreads over the threads. Sums across rows
// (LayerNorm's dgamma and dbeta) add fixed blocks of rows in a fixed order: the result does not
// depend on the number of threads.
#pragma once

#include <random>

#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/tensor.hpp"
#include "loom/rt/tensor/vec.hpp"

namespace loom::rt::gptk {

using vec::for_range;

// Every layer runs where its tensors live: on the CPU here, on the GPU through gpt_cuda.hpp and
// cuBLAS (outputs are allocated on the input's device).
Tensor& ensure(Tensor& t, std::vector<int64_t> shape, Device device = Device::kCpu);
// y[N,out] = x[N,in] W[out,in]^T (+ b)
void linear_fwd(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
// dW = dy^T x, db = sum dy, dx = dy W (overwrites; db and dx optional)
void linear_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dw, Tensor* db, Tensor* dx);
// y = (x - mean) / sqrt(var + eps) * gamma + beta over each row (eps 1e-5, torch's default; the
// CUDA kernel takes only that).
constexpr float kLnEps = 1e-5f;
void layernorm_fwd(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean, Tensor& rstd,
                   float eps = kLnEps);
// dx += LayerNorm's input gradient (the residual stream adds); dgamma, dbeta overwritten.
void layernorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& gamma,
                   Tensor& dx, Tensor& dgamma, Tensor& dbeta);
// qkv [B*T, 3C] -> y [B*T, C]; att keeps what the backward needs: full, the causal softmax
// [B, H, T, T] (zeros above the diagonal); flash, each row's log-sum-exp of its scaled scores
// [B, H, T]. The backward takes the forward's y and att, and overwrites dqkv.
void attention_fwd(const Tensor& qkv, int b, int t, int h, int c, bool flash, Tensor& att, Tensor& y);
void attention_bwd(const Tensor& dy, const Tensor& qkv, const Tensor& att, const Tensor& y, int b, int t, int h, int c,
                   bool flash, Tensor& dqkv);
// The flash path on host arrays (flash_attention.cpp); lse [B*H*T].
void flash_attention_fwd_cpu(const float* qkv, float* y, float* lse, int b, int t, int h, int c);
void flash_attention_bwd_cpu(const float* dy, const float* qkv, const float* y, const float* lse, float* dqkv, int b,
                             int t, int h, int c);
// The fc layer's bias and GELU in one pass: with v = x + bias (bias added to each row of x),
// y = v Phi(v) (the erf GELU, torch's default), and x becomes GELU'(v), all the backward needs
// (the GELU's gradient is then mul(dy, x)); the pre-activation itself is not kept.
void bias_gelu_fwd(Tensor& x, const Tensor& bias, Tensor& y);
// x *= m, element by element (the GELU's and dropout's backward)
void mul(Tensor& x, const Tensor& m);
// out = a + b (element-wise; out may be a or b)
void add(const Tensor& a, const Tensor& b, Tensor& out);
// Dropout: mask holds 0 or 1/(1-p); applied in place. p == 0 (or eval) leaves mask undefined.
void dropout_fwd(Tensor& x, Tensor& mask, float p, bool train, std::mt19937_64& rng);
void dropout_bwd(Tensor& dy, const Tensor& mask);

}  // namespace loom::rt::gptk

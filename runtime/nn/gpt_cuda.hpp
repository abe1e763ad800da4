// gpt_cuda.hpp — the gpt's own layers on CUDA (gpt_cuda.cu), on device arrays: what
// gpt_kernels.cpp runs when the tensors live on the GPU. The GEMMs (linears, attention's
// per-head products) are cuBLAS's, through kernels_cuda.hpp; these are the rest. Same formulas
// as the CPU layers; sums run in another order (warp reductions, atomics for the embedding's
// gradient), so results agree within fp32 rounding, not bit for bit.
#pragma once

#include <cstdint>

namespace loom::rt::gpt_cuda {

// x[r] = wte[tok[r]] + wpe[r % t], rows r < n, width c.
void embed_fwd(const int32_t* tok, const float* wte, const float* wpe, float* x, int64_t n, int t, int c);
// dwte and dwpe overwritten: the sums of dx over the rows of each token and each position.
void embed_bwd(const int32_t* tok, const float* dx, float* dwte, float* dwpe, int64_t n, int t, int c, int64_t vocab);
void layernorm_fwd(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd, int64_t n,
                   int c);
// dx += the input gradient; dgamma, dbeta overwritten.
void layernorm_bwd(const float* dy, const float* x, const float* mean, const float* rstd, const float* gamma, float* dx,
                   float* dgamma, float* dbeta, int64_t n, int c);
// Rows of t x t score matrices (rows = matrices * t): causal softmax in place, zeros above the
// diagonal; and its backward in place over dp: p * (dp - rowsum(p * dp)) * scale.
void causal_softmax(float* a, int64_t rows, int t);
void softmax_bwd(const float* p, float* dp, int64_t rows, int t, float scale);
// Causal self-attention without the T x T matrix (flash_attention.cu; the CPU's algorithm in
// flash_attention.cpp): qkv [b*t, 3c] -> y [b*t, c] and each row's log-sum-exp lse [b*h*t]; the
// backward overwrites dqkv, using rowsum [b*h*t] as scratch. Heads of up to kFlashMaxHeadSize
// values (Error otherwise).
constexpr int kFlashMaxHeadSize = 128;
void flash_attention_fwd(const float* qkv, float* y, float* lse, int b, int t, int h, int c);
void flash_attention_bwd(const float* dy, const float* qkv, const float* y, const float* lse, float* rowsum,
                         float* dqkv, int b, int t, int h, int c);
void bias_gelu_fwd(float* x, const float* bias, float* y, int64_t rows, int cols);  // gptk::bias_gelu_fwd
void add(const float* a, const float* b, float* out, int64_t n);
void mul(float* x, const float* m, int64_t n);  // x *= m (dropout's mask, GELU')

}  // namespace loom::rt::gpt_cuda

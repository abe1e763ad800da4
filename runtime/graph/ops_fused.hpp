// ops_fused.hpp — vectorised row loops (ops_fused.cpp) for the operators and fused kernels, each
// spread over the runtime's threads when it holds 16k values or more.
#pragma once

#include <cstdint>

namespace loom::rt::graph {

// y = 0.5 x (1 + erf(x / sqrt 2)) over n values.
void gelu_rows(const float* x, float* y, int64_t n);
// Softmax (or log-softmax) of each row of `cols` contiguous values.
void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, bool log);
// The same on the calling thread alone (inside a loop already spread over the threads).
void softmax_rows_here(const float* x, float* y, int64_t rows, int64_t cols);
// (x - mean) / sqrt(var + eps) * g (+ b) per row; each row's mean and inverse deviation when
// means / invs are not null.
void layer_norm_rows(const float* x, const float* g, const float* b, float* y, int64_t rows, int64_t cols, float eps,
                     float* means, float* invs);
// The transcendental unary operators over n values with vec.hpp's exp (no libm call per value):
// Tanh, Sigmoid, Exp and Erf (within 1e-6 of libm; Exp within 3e-7 relative). False for another op.
bool unary_rows(const char* op, const float* x, float* y, int64_t n);

}  // namespace loom::rt::graph

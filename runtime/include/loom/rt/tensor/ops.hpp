// ops.hpp — the kernels of kernels.hpp, dispatched on the device of the data: the CPU kernels,
// or their CUDA twins when libloomrt is built with CUDA (an Error otherwise). Models and the
// optimizer call these, so one code path serves both devices.
#pragma once

#include <cstdint>

#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt::ops {

bool cuda_built();
// True when a CUDA device is usable; otherwise false and *why says why.
bool cuda_usable(std::string* why);

void gemm(Device d, bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc);
void bias_act(Device d, float* y, const float* bias, int rows, int cols, cpu::Act act);
void relu_backward(Device d, float* dy, const float* y, int64_t n);
void bias_grad(Device d, const float* dy, float* db, int rows, int cols);
double softmax_xent(Device d, const float* logits, const int32_t* labels, float* dlogits, int rows, int cols);
// The int8 linear layer on CUDA (cuda::int8_linear); an Error in a build without CUDA.
void int8_linear_cuda(int m, int n, int k, const int8_t* x, int x_zp, const int8_t* w, const int32_t* w_rowsum,
                      const float* scale, const float* bias, bool relu, int out_kind, int out_zp, int act_max, void* y);

}  // namespace loom::rt::ops

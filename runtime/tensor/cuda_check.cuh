// cuda_check.cuh — the checks every CUDA source of libloomrt wraps its CUDA and cuBLAS calls in:
// a failure reports file:line, the call and the library's own message (check_failed throws).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "loom/rt/error.hpp"

#define CUDA_OK(call)                                                                                   \
  do {                                                                                                  \
    cudaError_t e_ = (call);                                                                            \
    if (e_ != cudaSuccess) ::loom::rt::check_failed(__FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
  } while (0)
#define CUBLAS_OK(call)                                                                                      \
  do {                                                                                                       \
    cublasStatus_t s_ = (call);                                                                              \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                                         \
      ::loom::rt::check_failed(__FILE__, __LINE__, #call, "cuBLAS status " + std::to_string(static_cast<int>(s_))); \
  } while (0)

namespace loom::rt::cuda {

// Blocks of `threads` that cover n elements (callers return before a launch of zero blocks).
inline unsigned blocks(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace loom::rt::cuda

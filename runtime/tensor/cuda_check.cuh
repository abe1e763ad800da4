// cuda_check.cuh — the checks every CUDA source of libloomrt wraps its CUDA and cuBLAS calls in:
// a failure reports file:line, the call and the library's own message (check_failed throws).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "loom/rt/error.hpp"

namespace loom::rt::cuda {

inline bool cuda_ok(cudaError_t e) { return e == cudaSuccess; }
inline bool cublas_ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }
inline std::string cublas_text(cublasStatus_t s) { return "cuBLAS status " + std::to_string(static_cast<int>(s)); }

}  // namespace loom::rt::cuda

#define LOOM_CHECK_CUDA(call) LOOM_CHECK_CALL(call, ::loom::rt::cuda::cuda_ok, cudaGetErrorString)
#define LOOM_CHECK_CUBLAS(call) LOOM_CHECK_CALL(call, ::loom::rt::cuda::cublas_ok, ::loom::rt::cuda::cublas_text)

namespace loom::rt::cuda {

// Blocks of `threads` that cover n elements (callers return before a launch of zero blocks).
inline unsigned blocks(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace loom::rt::cuda

// kernels_cuda.hpp — the CUDA versions of the CPU kernels in kernels.hpp (cuBLAS for GEMM), on
// device pointers, with a caching device allocator. Built whenever nvcc is found; every kernel
// is compared with its CPU twin by tests/gpu/kernels_test (run by tests/gpu/run.sh).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "loom/rt/tensor/kernels.hpp"

namespace loom::rt::cuda {

// True when a CUDA device can be used; otherwise false with the driver's reason.
// *no_code (when given) tells a GPU this build has no code for (its compute capability) from
// the rest (no driver, no device).
bool available(std::string* why, bool* no_code = nullptr);

// The GPU of a rank, before its first CUDA call: device 0 under the Loom plugin (LOOM_GPU set:
// the task's own GPU comes first in CUDA_VISIBLE_DEVICES), else the node-local rank's, modulo the
// GPUs visible. Returns the device, or -1 where no GPU is visible (nothing is set).
int select_device(int local_rank);
// The calling thread's device, and setting it (a thread that copies a rank's buffers, such as the
// gradient exchange's, must use the rank's device: the current device is per thread).
int current_device();
// The current GPU's compute capability, major * 10 + minor (80: an A100; bf16 from 80 on).
int compute_capability();
void set_device(int dev);

void* device_alloc(size_t bytes);              // cached by size, like the CPU allocator
void device_free(void* p, size_t bytes);
void to_device(void* dst, const void* src, size_t bytes);
// Copies to the host beside the compute: mark_queued() records an event after the work queued so
// far on the default stream; to_host_after(mark, ...) copies on the device's side stream once
// that work is done, without waiting for work queued later (the next step's kernels run on);
// it returns when the copy is done. release_mark() when every copy after it has returned.
void* mark_queued();
void to_host_after(void* mark, void* dst, const void* src, size_t bytes);
void release_mark(void* mark);
void to_host(void* dst, const void* src, size_t bytes);
// Host-to-device on that side stream, not waiting for the default stream (the caller knows
// nothing there touches dst); mark_beside() records an event after what the side stream holds,
// and queue_after(mark) makes the default stream's later work wait for it (no host wait).
void to_device_beside(void* dst, const void* src, size_t bytes);
void* mark_beside();
void queue_after(void* mark);
// Page-locks host memory for true asynchronous copies (cudaHostRegister); false when the system
// refuses (the memory stays pageable and still works).
bool pin_host(void* p, size_t bytes);
void unpin_host(void* p);
void synchronize();          // every stream of the current device
void wait_default_stream();  // the default stream only (ops::wait_compute)

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc);
// `count` GEMMs as gemm's, the i-th on a + i*stride_a, b + i*stride_b, c + i*stride_c
// (cublasSgemmStridedBatched): attention's per-head products.
void gemm_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                  int64_t stride_a, const float* b, int ldb, int64_t stride_b, float beta, float* c, int ldc,
                  int64_t stride_c, int count);
// Mixed precision: gemm and gemm_batched on tensor cores, their fp32 operands rounded to fp16
// (0) or bf16 (1) by cuBLAS and accumulated in fp32 (CUBLAS_COMPUTE_32F_FAST_16F/16BF); -1: plain
// fp32 (cublasSgemm), the default. Process-wide.
void set_gemm_precision(int low);
int gemm_precision();
// The CPU's emulation of the low precision (amp.cpp) on device arrays: x rounded to fp16/bf16
// and back; a gradient's pass (fp16: times scale, rounded, times 1/scale; bf16: rounded), setting
// *nonfinite (a device float) to 1 when a value ends inf or NaN.
void round_low(float* x, int64_t n, bool bf16);
void amp_grad(float* g, int64_t n, float scale, bool bf16, float* nonfinite);
void copy_on_device(void* dst, const void* src, size_t bytes);
void bias_act(float* y, const float* bias, int rows, int cols, cpu::Act act);
void relu_backward(float* dy, const float* y, int64_t n);
void bias_grad(const float* dy, float* db, int rows, int cols);
double softmax_xent(const float* logits, const int32_t* labels, float* dlogits, int rows, int cols, int64_t grad_rows = 0);
void argmax_rows(const float* x, int rows, int cols, int32_t* out);
void fill(float* x, float v, int64_t n);
// The gradient exchange's packing on the GPU: dst = a * src; dst = fp16(src) (nearest
// even, as float_to_half); dst = float(src).
void scale_copy(float* dst, const float* src, float a, int64_t n);
void axpy(float* y, const float* x, float a, int64_t n);  // y += a * x
void to_half(uint16_t* dst, const float* src, int64_t n);
void from_half(float* dst, const uint16_t* src, int64_t n);
// The optimizer updates of optim.cpp on device arrays (same formulas, same order of operations).
void sgd_step(float* w, const float* g, float* m, int64_t n, float lr, float mu, float wd, float keep, bool nesterov);
void adamw_step(float* w, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps,
                float wd, float bc1, float root_bc2);

// The int8 linear layer of int8.hpp on the GPU: acc[m,n] = sum_k (x[m,k] - x_zp) w[n,k] with
// x and w int8 device arrays (the CPU's uint8 activations lie in [0, 127], so their bytes are
// valid int8), computed by cuBLASLt's int8 GEMM (tensor cores, int32 accumulation; a plain
// kernel where cuBLASLt refuses the shape), the zero point subtracted through w's row sums,
// then out_kind 0: int32 acc; 1: float acc * scale[n] + bias[n] (ReLU when asked);
// 2: uint8 clamp(round_half_even(...) + out_zp, 0, act_max). scale and bias are device arrays.
void int8_linear(int m, int n, int k, const int8_t* x, int x_zp, const int8_t* w, const int32_t* w_rowsum,
                 const float* scale, const float* bias, bool relu, int out_kind, int out_zp, int act_max, void* y);
// Whether the last int8_linear ran on cuBLASLt (false: the plain kernel).
bool int8_used_cublaslt();

}  // namespace loom::rt::cuda

// ops.hpp — the kernels of kernels.hpp, dispatched on the device of the data: the CPU kernels,
// or their CUDA twins when libloomrt is built with CUDA (an Error otherwise). Models and the
// optimizer call these, so one code path serves both devices.
#pragma once

#include <cstdint>
#include <string>

#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt::ops {

bool cuda_built();
// True when a CUDA device is usable; otherwise false and *why says why (*no_code, when given:
// because this build has no code for the GPU that is here).
bool cuda_usable(std::string* why, bool* no_code = nullptr);
// The rank's GPU's compute capability (cuda::compute_capability; an Error without CUDA).
int cuda_capability();

// Copies between a device's memory and the host (a plain memcpy for the CPU); wait_compute waits
// for the work queued so far on the device's default stream, not for the gradient exchange's
// streams (NCCL's, the side stream's copies), whose work waits for the other ranks; select_gpu
// is cuda::select_device (-1 without CUDA).
void download(Device d, void* host, const void* src, size_t bytes);
void upload(Device d, void* dst, const void* host, size_t bytes);
void wait_compute(Device d);
// cuda::mark_queued, to_host_after and release_mark (null and a plain memcpy on the CPU).
void* mark_queued(Device d);
void download_after(Device d, void* mark, void* host, const void* src, size_t bytes);
void release_mark(Device d, void* mark);
// Gradients staged through host memory: upload_beside copies host -> device without waiting for
// the default stream (a memcpy on the CPU); mark_beside / queue_after make the default stream's
// later work wait for those copies (null and nothing on the CPU); pin / unpin page-lock a host
// buffer for CUDA's copies (nothing on the CPU; false where the system refuses).
void upload_beside(Device d, void* dst, const void* host, size_t bytes);
void* mark_beside(Device d);
void queue_after(Device d, void* mark);
bool pin(Device d, void* host, size_t bytes);
void unpin(Device d, void* host);
// Packing gradients on their device: dst = a * src; dst = fp16(src); dst = float(src).
void scale_copy(Device d, float* dst, const float* src, float a, int64_t n);
void to_half(Device d, uint16_t* dst, const float* src, int64_t n);
void from_half(Device d, float* dst, const uint16_t* src, int64_t n);
// y += a * x (PowerSGD's error feedback, where the gradients live).
void axpy(Device d, float* y, const float* x, float a, int64_t n);
// Mixed precision: the low precision's rounding (fp16, or bf16) of x in place; and the GEMM
// precision on CUDA ("fp32", or "fp16"/"bf16" on tensor cores: cuda::set_gemm_precision).
void round_low(Device d, float* x, int64_t n, bool bf16);
void set_cuda_gemm_precision(const std::string& precision);
// A gradient's mixed-precision pass on CUDA (cuda::amp_grad); an Error in a build without CUDA.
void amp_grad_cuda(float* g, int64_t n, float scale, bool bf16, float* nonfinite);
int select_gpu(int local_rank);
int current_gpu();     // cuda::current_device
void use_gpu(int dev);  // cuda::set_device

void gemm(Device d, bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc);
void bias_act(Device d, float* y, const float* bias, int rows, int cols, cpu::Act act);
void relu_backward(Device d, float* dy, const float* y, int64_t n);
void bias_grad(Device d, const float* dy, float* db, int rows, int cols);
double softmax_xent(Device d, const float* logits, const int32_t* labels, float* dlogits, int rows, int cols,
                    int64_t grad_rows = 0);  // cpu::softmax_xent
// The int8 linear layer on CUDA (cuda::int8_linear); an Error in a build without CUDA.
void int8_linear_cuda(int m, int n, int k, const int8_t* x, int x_zp, const int8_t* w, const int32_t* w_rowsum,
                      const float* scale, const float* bias, bool relu, int out_kind, int out_zp, int act_max, void* y);

}  // namespace loom::rt::ops

// ops.cpp — device dispatch for the kernels.
#include "loom/rt/tensor/ops.hpp"

#include <cstring>

#ifdef LOOM_HAVE_CUDA
#include "loom/rt/tensor/kernels_cuda.hpp"
#define ON_CUDA(call) \
  do {               \
    cuda::call;      \
    return;          \
  } while (0)
#else
#define ON_CUDA(call) throw Error("this build of Loom has no CUDA support")
#endif

namespace loom::rt::ops {

bool cuda_built() {
#ifdef LOOM_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_capability() {
#ifdef LOOM_HAVE_CUDA
  return cuda::compute_capability();
#else
  throw Error("this build of Loom has no CUDA support");
#endif
}

bool cuda_usable(std::string* why, bool* no_code) {
  if (no_code) *no_code = false;
#ifdef LOOM_HAVE_CUDA
  bool gpu_without_code = false;
  if (cuda::available(why, &gpu_without_code)) return true;
  if (no_code) *no_code = gpu_without_code;
#ifdef LOOM_CUDA_ARCHS
  std::string archs = "sm_" LOOM_CUDA_ARCHS;
  for (size_t at = archs.find(','); at != std::string::npos; at = archs.find(',', at)) archs.replace(at, 1, " sm_");
  if (why && gpu_without_code)
    *why += " (this build has code for " + archs + " and PTX " + std::to_string(LOOM_CUDA_PTX) +
            ", from CUDA " LOOM_CUDA_TOOLKIT "; CUDA 13 dropped Volta: for a V100 build with a CUDA 12 toolkit and "
            "--with-cuda-arch=\"70 80 90\", see the README)";
#endif
  return false;
#else
  if (why) *why = "this build of Loom has no CUDA support (configure found no nvcc)";
  return false;
#endif
}

void download(Device d, void* host, const void* src, size_t bytes) {
  if (d == Device::kCuda) ON_CUDA(to_host(host, src, bytes));
  std::memcpy(host, src, bytes);
}

void upload(Device d, void* dst, const void* host, size_t bytes) {
  if (d == Device::kCuda) ON_CUDA(to_device(dst, host, bytes));
  std::memcpy(dst, host, bytes);
}

void* mark_queued(Device d) {
#ifdef LOOM_HAVE_CUDA
  if (d == Device::kCuda) return cuda::mark_queued();
#endif
  if (d == Device::kCuda) throw Error("this build of Loom has no CUDA support");
  return nullptr;
}

void download_after(Device d, void* mark, void* host, const void* src, size_t bytes) {
  if (d == Device::kCuda) ON_CUDA(to_host_after(mark, host, src, bytes));
  std::memcpy(host, src, bytes);
}

void release_mark(Device d, void* mark) {
  if (d == Device::kCuda && mark) ON_CUDA(release_mark(mark));
}

void wait_compute(Device d) {
  if (d == Device::kCuda) ON_CUDA(wait_default_stream());
}

void upload_beside(Device d, void* dst, const void* host, size_t bytes) {
  if (d == Device::kCuda) ON_CUDA(to_device_beside(dst, host, bytes));
  std::memcpy(dst, host, bytes);
}

void* mark_beside(Device d) {
#ifdef LOOM_HAVE_CUDA
  if (d == Device::kCuda) return cuda::mark_beside();
#endif
  if (d == Device::kCuda) throw Error("this build of Loom has no CUDA support");
  return nullptr;
}

void queue_after(Device d, void* mark) {
  if (d == Device::kCuda && mark) ON_CUDA(queue_after(mark));
}

bool pin(Device d, void* host, size_t bytes) {
#ifdef LOOM_HAVE_CUDA
  if (d == Device::kCuda) return cuda::pin_host(host, bytes);
#endif
  (void)d, (void)host, (void)bytes;
  return false;
}

void unpin(Device d, void* host) {
  if (d == Device::kCuda) ON_CUDA(unpin_host(host));
}

void scale_copy(Device d, float* dst, const float* src, float a, int64_t n) {
  if (d == Device::kCuda) ON_CUDA(scale_copy(dst, src, a, n));
  for (int64_t k = 0; k < n; ++k) dst[k] = a * src[k];
}

void axpy(Device d, float* y, const float* x, float a, int64_t n) {
  if (d == Device::kCuda) ON_CUDA(axpy(y, x, a, n));
  for (int64_t k = 0; k < n; ++k) y[k] += a * x[k];
}

void to_half(Device d, uint16_t* dst, const float* src, int64_t n) {
  if (d == Device::kCuda) ON_CUDA(to_half(dst, src, n));
  floats_to_halves(src, dst, static_cast<size_t>(n));
}

void from_half(Device d, float* dst, const uint16_t* src, int64_t n) {
  if (d == Device::kCuda) ON_CUDA(from_half(dst, src, n));
  halves_to_floats(src, dst, static_cast<size_t>(n));
}

void round_low(Device d, float* x, int64_t n, bool bf16) {
  if (d == Device::kCuda) ON_CUDA(round_low(x, n, bf16));
  if (!bf16) return round_to_half(x, static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) x[k] = bf16_to_float(float_to_bf16(x[k]));
}

void set_cuda_gemm_precision(const std::string& precision) {
  const int low = precision == "fp16" ? 0 : precision == "bf16" ? 1 : -1;
#ifdef LOOM_HAVE_CUDA
  cuda::set_gemm_precision(low);
#else
  if (low >= 0) throw Error("this build of Loom has no CUDA support");
#endif
}

void amp_grad_cuda(float* g, int64_t n, float scale, bool bf16, float* nonfinite) {
  ON_CUDA(amp_grad(g, n, scale, bf16, nonfinite));
}

int select_gpu(int local_rank) {
#ifdef LOOM_HAVE_CUDA
  return cuda::select_device(local_rank);
#else
  (void)local_rank;
  return -1;
#endif
}

int current_gpu() {
#ifdef LOOM_HAVE_CUDA
  return cuda::current_device();
#else
  return -1;
#endif
}

void use_gpu(int dev) {
  if (dev >= 0) ON_CUDA(set_device(dev));
}

void gemm(Device d, bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc) {
  if (d == Device::kCuda) ON_CUDA(gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
  cpu::gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void bias_act(Device d, float* y, const float* bias, int rows, int cols, cpu::Act act) {
  if (d == Device::kCuda) ON_CUDA(bias_act(y, bias, rows, cols, act));
  cpu::bias_act(y, bias, rows, cols, act);
}

void relu_backward(Device d, float* dy, const float* y, int64_t n) {
  if (d == Device::kCuda) ON_CUDA(relu_backward(dy, y, n));
  cpu::relu_backward(dy, y, n);
}

void bias_grad(Device d, const float* dy, float* db, int rows, int cols) {
  if (d == Device::kCuda) ON_CUDA(bias_grad(dy, db, rows, cols));
  cpu::bias_grad(dy, db, rows, cols);
}

double softmax_xent(Device d, const float* logits, const int32_t* labels, float* dlogits, int rows, int cols,
                    int64_t grad_rows) {
#ifdef LOOM_HAVE_CUDA
  if (d == Device::kCuda) return cuda::softmax_xent(logits, labels, dlogits, rows, cols, grad_rows);
#else
  if (d == Device::kCuda) throw Error("this build of Loom has no CUDA support");
#endif
  return cpu::softmax_xent(logits, labels, dlogits, rows, cols, grad_rows);
}

void int8_linear_cuda(int m, int n, int k, const int8_t* x, int x_zp, const int8_t* w, const int32_t* w_rowsum,
                      const float* scale, const float* bias, bool relu, int out_kind, int out_zp, int act_max, void* y) {
  ON_CUDA(int8_linear(m, n, k, x, x_zp, w, w_rowsum, scale, bias, relu, out_kind, out_zp, act_max, y));
}

}  // namespace loom::rt::ops

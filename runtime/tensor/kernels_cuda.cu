// kernels_cuda.cu — CUDA kernels and cuBLAS GEMM behind kernels_cuda.hpp (the device, its memory
// and copies are in device_cuda.cu). Every CUDA and cuBLAS call is checked and reports file:line
// with the library's own message.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <map>
#include <string>
#include <type_traits>
#include <vector>
#include <algorithm>

#include "cuda_check.cuh"
#include "loom/rt/tensor/kernels_cuda.hpp"
#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt::cuda {

namespace {

// cuBLAS and cuBLASLt handles (and a workspace where one is asked for), one per thread and
// device: a handle belongs to the device that was current when it was made, and threads-as-ranks
// (the in-process transport) drive one device each, at the same time. A thread's handles go with
// it; the main thread's stay until the process ends (the CUDA runtime may be gone before its
// thread_local destructors run).
template <class H, cublasStatus_t (*Create)(H*), cublasStatus_t (*Destroy)(H), size_t kWorkspace = 0>
class ThreadHandles {
 public:
  ~ThreadHandles() {
    if (static_cast<pid_t>(syscall(SYS_gettid)) == getpid()) return;
    for (auto& [dev, one] : by_device_) {
      Destroy(one.first);
      if (one.second) cudaFree(one.second);
    }
  }
  H get() { return mine().first; }
  void* workspace() { return mine().second; }

 private:
  const std::pair<H, void*>& mine() {
    int dev = 0;
    LOOM_CHECK_CUDA(cudaGetDevice(&dev));
    auto it = by_device_.find(dev);
    if (it != by_device_.end()) return it->second;
    std::pair<H, void*> one{};
    LOOM_CHECK_CUBLAS(Create(&one.first));
    if (kWorkspace > 0) LOOM_CHECK_CUDA(cudaMalloc(&one.second, kWorkspace));
    return by_device_.emplace(dev, one).first->second;
  }
  std::map<int, std::pair<H, void*>> by_device_;
};

cublasHandle_t handle() {
  thread_local ThreadHandles<cublasHandle_t, cublasCreate, cublasDestroy> handles;
  return handles.get();
}

__global__ void k_bias_act(float* y, const float* b, int rows, int cols, int act) {
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= int64_t{rows} * cols) return;
  float v = y[i] + b[i % cols];
  if (act == 1) v = fmaxf(v, 0.0f);
  else if (act == 2) v = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  y[i] = v;
}

__global__ void k_relu_backward(float* dy, const float* y, int64_t n) {
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n && !(y[i] > 0.0f)) dy[i] = 0.0f;
}

__global__ void k_bias_grad(const float* dy, float* db, int rows, int cols) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.0f;
  for (int r = 0; r < rows; ++r) s += dy[int64_t{r} * cols + c];
  db[c] += s;
}

// One block per row: max, sum of exponentials, loss and gradient.
__global__ void k_softmax_xent(const float* x, const int32_t* labels, float* dx, float* row_loss, int cols, float inv_rows) {
  extern __shared__ float red[];
  const int r = blockIdx.x;
  const float* xr = x + int64_t{r} * cols;
  float mx = -3.4e38f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) mx = fmaxf(mx, xr[c]);
  red[threadIdx.x] = mx;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  mx = red[0];
  __syncthreads();
  float sum = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(xr[c] - mx);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const float lse = logf(red[0]) + mx;
  const int y = labels[r];
  if (threadIdx.x == 0) row_loss[r] = lse - xr[y];
  if (dx)
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
      dx[int64_t{r} * cols + c] = (expf(xr[c] - lse) - (c == y ? 1.0f : 0.0f)) * inv_rows;
}

__global__ void k_argmax(const float* x, int rows, int cols, int32_t* out) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* xr = x + int64_t{r} * cols;
  int best = 0;
  for (int c = 1; c < cols; ++c)
    if (xr[c] > xr[best]) best = c;
  out[r] = best;
}

__global__ void k_fill(float* x, float v, int64_t n) {
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) x[i] = v;
}

__global__ void k_sgd(float* w, const float* g, float* m, int64_t n, float lr, float mu, float wd, float keep, int nesterov) {
  int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (k >= n) return;
  float d = g[k] + wd * w[k];
  if (mu == 0.0f) {
    w[k] -= lr * d;
    return;
  }
  m[k] = keep * m[k] + d;
  w[k] -= nesterov ? lr * (d + mu * m[k]) : lr * m[k];
}

__global__ void k_adamw(float* w, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps,
                        float wd, float bc1, float root_bc2) {
  int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (k >= n) return;
  w[k] *= 1.0f - lr * wd;
  m[k] = b1 * m[k] + (1.0f - b1) * g[k];
  v[k] = b2 * v[k] + (1.0f - b2) * g[k] * g[k];
  w[k] -= (lr / bc1) * m[k] / (sqrtf(v[k]) / root_bc2 + eps);
}

// The gradient exchange's packing: dst = a * src, in fp32 or rounded to fp16 (nearest even).
__global__ void k_scale_copy(float* dst, const float* src, float a, int64_t n) {
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) dst[i] = a * src[i];
}

__global__ void k_axpy(float* y, const float* x, float a, int64_t n) {
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}

__global__ void k_to_half(__half* dst, const float* src, int64_t n) {
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) dst[i] = __float2half_rn(src[i]);
}

__global__ void k_from_half(float* dst, const __half* src, int64_t n) {
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) dst[i] = __half2float(src[i]);
}

// Mixed precision as on the CPU (amp.cpp): x rounded to fp16 or bf16 (nearest even) and back.
__device__ float round_low(float x, int bf16) {
  return bf16 ? __bfloat162float(__float2bfloat16_rn(x)) : __half2float(__float2half_rn(x));
}

__global__ void k_round_low(float* x, int64_t n, int bf16) {
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) x[i] = round_low(x[i], bf16);
}

// A gradient's pass: fp16 scaled, rounded and unscaled (times 1/scale, as the CPU does); bf16
// rounded. *nonfinite becomes 1 when any value is inf or NaN afterwards.
__global__ void k_amp_grad(float* g, int64_t n, float scale, float inv, int bf16, float* nonfinite) {
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float v = bf16 ? round_low(g[i], 1) : round_low(g[i] * scale, 0) * inv;
  g[i] = v;
  if (!isfinite(v)) *nonfinite = 1.0f;
}

// GEMMs: plain fp32 (cublasSgemm), or for mixed precision on tensor cores: each fp32 operand
// rounded to fp16/bf16 (nearest even, as PyTorch's autocast and the CPU's emulation round) into a
// 16-bit copy, multiplied with fp32 accumulation and an fp32 result. (cuBLAS's own rounding of
// fp32 operands, CUBLAS_COMPUTE_32F_FAST_16BF, differed from round-to-nearest by up to 0.05 on
// an H200 and ran at half the rate of the bf16 GEMM on 16-bit operands.)
int g_gemm_low = -1;  // -1 fp32, 0 fp16, 1 bf16

template <typename T>
__global__ void k_to_low(T* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) dst[i] = __float2bfloat16_rn(src[i]);
    else dst[i] = __float2half_rn(src[i]);
  }
}

// The 16-bit copies of a GEMM's two operands: one grow-only buffer per operand, thread and
// device (threads-as-ranks share a device; a buffer is only ever reused by later work queued on
// the same stream, and a smaller one is given back only once that stream has finished with it).
struct LowOperands {
  void* p[2] = {nullptr, nullptr};
  size_t bytes[2] = {0, 0};
  void* get(int which, size_t need) {
    if (bytes[which] < need) {
      if (p[which]) {
        LOOM_CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
        device_free(p[which], bytes[which]);
      }
      p[which] = device_alloc(need);
      bytes[which] = need;
    }
    return p[which];
  }
};

// `src` (fp32, `elements` long from its first to its last value, gaps between rows included)
// rounded into operand buffer `which`: its 16-bit twin at the same offsets.
const void* to_low(int which, const float* src, int64_t elements) {
  thread_local std::map<int, LowOperands> per_device;
  int dev = 0;
  LOOM_CHECK_CUDA(cudaGetDevice(&dev));
  void* dst = per_device[dev].get(which, static_cast<size_t>(elements) * 2);
  const unsigned grid = std::min<unsigned>(blocks(elements, 256), 65535u * 4);
  if (g_gemm_low == 1) k_to_low<<<grid, 256>>>(static_cast<__nv_bfloat16*>(dst), src, elements);
  else k_to_low<<<grid, 256>>>(static_cast<__half*>(dst), src, elements);
  LOOM_CHECK_CUDA(cudaGetLastError());
  return dst;
}

// The elements a row-major operand spans: rows of `cols` values, `ld` apart, `count` of them
// `stride` apart.
int64_t span(int rows, int cols, int ld, int64_t stride = 0, int count = 1) {
  return int64_t{count - 1} * stride + int64_t{rows - 1} * ld + cols;
}

cudaDataType_t low_type() { return g_gemm_low == 1 ? CUDA_R_16BF : CUDA_R_16F; }

}  // namespace

void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc) {
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (g_gemm_low < 0) {
    LOOM_CHECK_CUBLAS(cublasSgemm(handle(), op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc));
    return;
  }
  if (m == 0 || n == 0) return;
  if (k == 0) {  // no operand to round: C = beta C, as cuBLAS computes it
    LOOM_CHECK_CUBLAS(cublasSgemm(handle(), op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc));
    return;
  }
  const void* la = to_low(0, a, ta ? span(k, m, lda) : span(m, k, lda));
  const void* lb = to_low(1, b, tb ? span(n, k, ldb) : span(k, n, ldb));
  LOOM_CHECK_CUBLAS(cublasGemmEx(handle(), op_b, op_a, n, m, k, &alpha, lb, low_type(), ldb, la, low_type(), lda, &beta, c,
                         CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void set_gemm_precision(int low) { g_gemm_low = low; }
int gemm_precision() { return g_gemm_low; }

void round_low(float* x, int64_t n, bool bf16) {
  if (n == 0) return;
  k_round_low<<<blocks(n, 256), 256>>>(x, n, bf16 ? 1 : 0);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void amp_grad(float* g, int64_t n, float scale, bool bf16, float* nonfinite) {
  if (n == 0) return;
  k_amp_grad<<<blocks(n, 256), 256>>>(g, n, scale, 1.0f / scale, bf16 ? 1 : 0, nonfinite);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void gemm_batched(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, int64_t stride_a,
                  const float* b, int ldb, int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c, int count) {
  if (count == 0) return;
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (g_gemm_low < 0) {
    LOOM_CHECK_CUBLAS(cublasSgemmStridedBatched(handle(), op_b, op_a, n, m, k, &alpha, b, ldb, stride_b, a, lda, stride_a, &beta,
                                        c, ldc, stride_c, count));
    return;
  }
  if (m == 0 || n == 0) return;
  if (k == 0) {
    LOOM_CHECK_CUBLAS(cublasSgemmStridedBatched(handle(), op_b, op_a, n, m, k, &alpha, b, ldb, stride_b, a, lda, stride_a, &beta,
                                        c, ldc, stride_c, count));
    return;
  }
  const void* la = to_low(0, a, ta ? span(k, m, lda, stride_a, count) : span(m, k, lda, stride_a, count));
  const void* lb = to_low(1, b, tb ? span(n, k, ldb, stride_b, count) : span(k, n, ldb, stride_b, count));
  LOOM_CHECK_CUBLAS(cublasGemmStridedBatchedEx(handle(), op_b, op_a, n, m, k, &alpha, lb, low_type(), ldb, stride_b, la,
                                       low_type(), lda, stride_a, &beta, c, CUDA_R_32F, ldc, stride_c, count,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void bias_act(float* y, const float* bias, int rows, int cols, cpu::Act act) {
  int64_t n = int64_t{rows} * cols;
  if (n == 0) return;  // a launch of zero blocks is an error, not a no-op
  k_bias_act<<<blocks(n, 256), 256>>>(y, bias, rows, cols, act == cpu::Act::kRelu ? 1 : act == cpu::Act::kGelu ? 2 : 0);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void relu_backward(float* dy, const float* y, int64_t n) {
  if (n == 0) return;
  k_relu_backward<<<blocks(n, 256), 256>>>(dy, y, n);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void bias_grad(const float* dy, float* db, int rows, int cols) {
  if (cols == 0) return;
  k_bias_grad<<<blocks(cols, 128), 128>>>(dy, db, rows, cols);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

double softmax_xent(const float* logits, const int32_t* labels, float* dlogits, int rows, int cols, int64_t grad_rows) {
  if (rows == 0) return 0.0;
  std::vector<int32_t> host_labels(static_cast<size_t>(rows));
  to_host(host_labels.data(), labels, sizeof(int32_t) * rows);
  for (int32_t y : host_labels)
    if (y < 0 || y >= cols) throw Error("label " + std::to_string(y) + " outside [0, " + std::to_string(cols) + ")");
  float* row_loss = static_cast<float*>(device_alloc(sizeof(float) * rows));
  k_softmax_xent<<<rows, 256, 256 * sizeof(float)>>>(logits, labels, dlogits, row_loss, cols,
                                                    1.0f / static_cast<float>(grad_rows > 0 ? grad_rows : rows));
  LOOM_CHECK_CUDA(cudaGetLastError());
  std::vector<float> host(static_cast<size_t>(rows));
  to_host(host.data(), row_loss, sizeof(float) * rows);
  device_free(row_loss, sizeof(float) * rows);
  double total = 0;
  for (float v : host) total += v;
  return total / rows;
}

void argmax_rows(const float* x, int rows, int cols, int32_t* out) {
  if (rows == 0) return;
  k_argmax<<<blocks(rows, 128), 128>>>(x, rows, cols, out);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void fill(float* x, float v, int64_t n) {
  if (n == 0) return;
  k_fill<<<blocks(n, 256), 256>>>(x, v, n);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void scale_copy(float* dst, const float* src, float a, int64_t n) {
  if (n == 0) return;
  k_scale_copy<<<blocks(n, 256), 256>>>(dst, src, a, n);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void axpy(float* y, const float* x, float a, int64_t n) {
  if (n == 0) return;
  k_axpy<<<blocks(n, 256), 256>>>(y, x, a, n);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void to_half(uint16_t* dst, const float* src, int64_t n) {
  if (n == 0) return;
  k_to_half<<<blocks(n, 256), 256>>>(reinterpret_cast<__half*>(dst), src, n);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void from_half(float* dst, const uint16_t* src, int64_t n) {
  if (n == 0) return;
  k_from_half<<<blocks(n, 256), 256>>>(dst, reinterpret_cast<const __half*>(src), n);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void sgd_step(float* w, const float* g, float* m, int64_t n, float lr, float mu, float wd, float keep, bool nesterov) {
  if (n == 0) return;
  k_sgd<<<blocks(n, 256), 256>>>(w, g, m, n, lr, mu, wd, keep, nesterov ? 1 : 0);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void adamw_step(float* w, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps,
                float wd, float bc1, float root_bc2) {
  if (n == 0) return;
  k_adamw<<<blocks(n, 256), 256>>>(w, g, m, v, n, lr, b1, b2, eps, wd, bc1, root_bc2);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

namespace {

constexpr size_t kLtWorkspace = size_t{4} << 20;

ThreadHandles<cublasLtHandle_t, cublasLtCreate, cublasLtDestroy, kLtWorkspace>& lt() {
  thread_local ThreadHandles<cublasLtHandle_t, cublasLtCreate, cublasLtDestroy, kLtWorkspace> handles;
  return handles;
}

bool g_int8_lt = false;

// acc[m, n] (row-major) = sum_k x[m, k] w[n, k], one thread per output.
__global__ void k_gemm_s8(const int8_t* x, const int8_t* w, int32_t* acc, int m, int n, int k) {
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= int64_t{m} * n) return;
  const int8_t* xr = x + (i / n) * k;
  const int8_t* wr = w + (i % n) * k;
  int32_t s = 0;
  for (int t = 0; t < k; ++t) s += int32_t{xr[t]} * int32_t{wr[t]};
  acc[i] = s;
}

__global__ void k_int8_epilogue(const int32_t* acc, int m, int n, int x_zp, const int32_t* rowsum, const float* scale,
                                const float* bias, int relu, int kind, int out_zp, int act_max, void* y) {
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= int64_t{m} * n) return;
  const int c = static_cast<int>(i % n);
  const int32_t a = acc[i] - x_zp * rowsum[c];
  if (kind == 0) {
    static_cast<int32_t*>(y)[i] = a;
    return;
  }
  float v = static_cast<float>(a) * scale[c] + (bias ? bias[c] : 0.0f);
  if (relu) v = fmaxf(v, 0.0f);
  if (kind == 1) {
    static_cast<float*>(y)[i] = v;
    return;
  }
  const float q = fminf(fmaxf(rintf(v) + static_cast<float>(out_zp), 0.0f), static_cast<float>(act_max));
  static_cast<uint8_t*>(y)[i] = static_cast<uint8_t>(q);
}

// The row-major product as cuBLASLt's column-major one: C^T[n, m] = op_T(W)[n, k] * X^T[k, m]
// ("TN", what its int8 tensor-core kernels take). False when cuBLASLt has no kernel for it.
bool lt_gemm_s8(const int8_t* x, const int8_t* w, int32_t* acc, int m, int n, int k) {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  LOOM_CHECK_CUBLAS(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32I, CUDA_R_32I));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LOOM_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LOOM_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  LOOM_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&a, CUDA_R_8I, k, n, k));
  LOOM_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&b, CUDA_R_8I, k, m, k));
  LOOM_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&c, CUDA_R_32I, n, m, n));
  const int32_t alpha = 1, beta = 0;
  const cublasStatus_t st =
      cublasLtMatmul(lt().get(), op, &alpha, w, a, x, b, &beta, acc, c, acc, c, nullptr, lt().workspace(), kLtWorkspace, 0);
  cublasLtMatrixLayoutDestroy(c);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatmulDescDestroy(op);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) return false;
  LOOM_CHECK_CUBLAS(st);
  return true;
}

}  // namespace

void int8_linear(int m, int n, int k, const int8_t* x, int x_zp, const int8_t* w, const int32_t* w_rowsum,
                 const float* scale, const float* bias, bool relu, int out_kind, int out_zp, int act_max, void* y) {
  const size_t bytes = sizeof(int32_t) * static_cast<size_t>(m) * n;
  int32_t* acc = static_cast<int32_t*>(device_alloc(bytes));
  g_int8_lt = lt_gemm_s8(x, w, acc, m, n, k);
  if (!g_int8_lt) k_gemm_s8<<<blocks(int64_t{m} * n, 256), 256>>>(x, w, acc, m, n, k);
  LOOM_CHECK_CUDA(cudaGetLastError());
  k_int8_epilogue<<<blocks(int64_t{m} * n, 256), 256>>>(acc, m, n, x_zp, w_rowsum, scale, bias, relu ? 1 : 0, out_kind,
                                                        out_zp, act_max, y);
  LOOM_CHECK_CUDA(cudaGetLastError());
  LOOM_CHECK_CUDA(cudaDeviceSynchronize());
  device_free(acc, bytes);
}

bool int8_used_cublaslt() { return g_int8_lt; }

}  // namespace loom::rt::cuda

// gpt_cuda.cu — the gpt's layers on CUDA (gpt_cuda.hpp). Row kernels give each row one warp
// (eight rows to a block of 256); element-wise kernels one thread per element.
#include "../tensor/cuda_check.cuh"
#include "gpt_cuda.hpp"

namespace loom::rt::gpt_cuda {

namespace {

using cuda::blocks;

constexpr float kLnEps = 1e-5f;  // as the CPU's LayerNorm and torch.nn.LayerNorm
constexpr int kRowsPerBlock = 8;

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The row of this warp (the same for its 32 lanes, so a warp returns whole).
__device__ int64_t warp_row() { return (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; }

unsigned row_blocks(int64_t rows) { return blocks(rows, kRowsPerBlock); }

__global__ void k_embed_fwd(const int32_t* tok, const float* wte, const float* wpe, float* x, int64_t n, int t, int c) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n * c) return;
  const int64_t r = i / c, k = i % c;
  x[i] = wte[int64_t{tok[r]} * c + k] + wpe[(r % t) * c + k];
}

__global__ void k_embed_bwd_tokens(const int32_t* tok, const float* dx, float* dwte, int64_t n, int c) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n * c) return;
  atomicAdd(&dwte[int64_t{tok[i / c]} * c + i % c], dx[i]);
}

// One thread per (position, channel): the sum over the sequences, in sequence order.
__global__ void k_embed_bwd_positions(const float* dx, float* dwpe, int64_t sequences, int t, int c) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= int64_t{t} * c) return;
  float s = 0.0f;
  for (int64_t b = 0; b < sequences; ++b) s += dx[b * t * c + i];
  dwpe[i] = s;
}

__global__ void k_ln_fwd(const float* x, const float* g, const float* b, float* y, float* mean, float* rstd, int64_t n,
                         int c) {
  const int64_t r = warp_row();
  const int lane = threadIdx.x % 32;
  if (r >= n) return;
  const float* xr = x + r * c;
  float s = 0.0f;
  for (int k = lane; k < c; k += 32) s += xr[k];
  const float m = warp_sum(s) / c;
  float v = 0.0f;
  for (int k = lane; k < c; k += 32) v += (xr[k] - m) * (xr[k] - m);
  const float rs = rsqrtf(warp_sum(v) / c + kLnEps);
  for (int k = lane; k < c; k += 32) y[r * c + k] = (xr[k] - m) * rs * g[k] + b[k];
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
}

__global__ void k_ln_bwd_rows(const float* dy, const float* x, const float* mean, const float* rstd, const float* g,
                              float* dx, int64_t n, int c) {
  const int64_t r = warp_row();
  const int lane = threadIdx.x % 32;
  if (r >= n) return;
  const float m = mean[r], s = rstd[r];
  const float *xr = x + r * c, *dyr = dy + r * c;
  float a = 0.0f, b = 0.0f;  // sums of dxhat and of dxhat * xhat
  for (int k = lane; k < c; k += 32) {
    const float xhat = (xr[k] - m) * s, dxhat = dyr[k] * g[k];
    a += dxhat;
    b += dxhat * xhat;
  }
  a = warp_sum(a) / c;
  b = warp_sum(b) / c;
  for (int k = lane; k < c; k += 32) {
    const float xhat = (xr[k] - m) * s;
    dx[r * c + k] += s * (dyr[k] * g[k] - a - xhat * b);
  }
}

// dgamma, dbeta (zeroed before): a block of 32 columns x 8 row lanes sums a chunk of 256 rows,
// then adds its partial sums atomically.
constexpr int kChunkRows = 256;
__global__ void k_ln_bwd_params(const float* dy, const float* x, const float* mean, const float* rstd, float* dg,
                                float* db, int64_t n, int c) {
  __shared__ float sg[8][32], sb[8][32];
  const int col = blockIdx.x * 32 + threadIdx.x;
  const int64_t lo = blockIdx.y * int64_t{kChunkRows}, hi = min(n, lo + kChunkRows);
  float pg = 0.0f, pb = 0.0f;
  if (col < c)
    for (int64_t r = lo + threadIdx.y; r < hi; r += 8) {
      const float d = dy[r * c + col];
      pg += d * (x[r * c + col] - mean[r]) * rstd[r];
      pb += d;
    }
  sg[threadIdx.y][threadIdx.x] = pg;
  sb[threadIdx.y][threadIdx.x] = pb;
  __syncthreads();
  if (threadIdx.y != 0 || col >= c) return;
  for (int j = 1; j < 8; ++j) {
    pg += sg[j][threadIdx.x];
    pb += sb[j][threadIdx.x];
  }
  atomicAdd(&dg[col], pg);
  atomicAdd(&db[col], pb);
}

__global__ void k_causal_softmax(float* a, int64_t rows, int t) {
  const int64_t r = warp_row();
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int i = static_cast<int>(r % t);  // the row within its matrix: columns 0..i are kept
  float* ar = a + r * t;
  float mx = -3.4e38f;
  for (int j = lane; j <= i; j += 32) mx = fmaxf(mx, ar[j]);
  mx = warp_max(mx);
  float s = 0.0f;
  for (int j = lane; j <= i; j += 32) s += (ar[j] = expf(ar[j] - mx));
  const float inv = 1.0f / warp_sum(s);
  for (int j = lane; j < t; j += 32) ar[j] = j <= i ? ar[j] * inv : 0.0f;
}

__global__ void k_softmax_bwd(const float* p, float* dp, int64_t rows, int t, float scale) {
  const int64_t r = warp_row();
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int i = static_cast<int>(r % t);
  const float* pr = p + r * t;
  float* dr = dp + r * t;
  float dot = 0.0f;
  for (int j = lane; j <= i; j += 32) dot += pr[j] * dr[j];
  dot = warp_sum(dot);
  for (int j = lane; j < t; j += 32) dr[j] = j <= i ? pr[j] * (dr[j] - dot) * scale : 0.0f;
}

// v = x + bias (row-wise), y = v Phi(v), x = GELU'(v) = Phi(v) + v phi(v).
__global__ void k_bias_gelu_fwd(float* x, const float* bias, float* y, int64_t n, int cols) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float v = x[i] + bias[i % cols];
  const float phi = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
  y[i] = v * phi;
  x[i] = phi + v * 0.3989422804014327f * expf(-0.5f * v * v);
}

__global__ void k_add(const float* a, const float* b, float* out, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void k_mul(float* x, const float* m, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) x[i] *= m[i];
}

}  // namespace

void embed_fwd(const int32_t* tok, const float* wte, const float* wpe, float* x, int64_t n, int t, int c) {
  if (n * c == 0) return;
  k_embed_fwd<<<blocks(n * c, 256), 256>>>(tok, wte, wpe, x, n, t, c);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void embed_bwd(const int32_t* tok, const float* dx, float* dwte, float* dwpe, int64_t n, int t, int c, int64_t vocab) {
  LOOM_CHECK_CUDA(cudaMemsetAsync(dwte, 0, sizeof(float) * vocab * c));
  if (int64_t{t} * c == 0) return;
  if (n > 0) {
    k_embed_bwd_tokens<<<blocks(n * c, 256), 256>>>(tok, dx, dwte, n, c);
    LOOM_CHECK_CUDA(cudaGetLastError());
  }
  // With no rows, zeros: dwpe is overwritten either way.
  k_embed_bwd_positions<<<blocks(int64_t{t} * c, 256), 256>>>(dx, dwpe, n / t, t, c);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void layernorm_fwd(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd, int64_t n,
                   int c) {
  if (n == 0) return;
  k_ln_fwd<<<row_blocks(n), 32 * kRowsPerBlock>>>(x, gamma, beta, y, mean, rstd, n, c);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void layernorm_bwd(const float* dy, const float* x, const float* mean, const float* rstd, const float* gamma, float* dx,
                   float* dgamma, float* dbeta, int64_t n, int c) {
  LOOM_CHECK_CUDA(cudaMemsetAsync(dgamma, 0, sizeof(float) * c));
  LOOM_CHECK_CUDA(cudaMemsetAsync(dbeta, 0, sizeof(float) * c));
  if (n == 0) return;
  k_ln_bwd_rows<<<row_blocks(n), 32 * kRowsPerBlock>>>(dy, x, mean, rstd, gamma, dx, n, c);
  LOOM_CHECK_CUDA(cudaGetLastError());
  const dim3 grid(blocks(c, 32), blocks(n, kChunkRows)), block(32, 8);
  k_ln_bwd_params<<<grid, block>>>(dy, x, mean, rstd, dgamma, dbeta, n, c);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void causal_softmax(float* a, int64_t rows, int t) {
  if (rows == 0) return;
  k_causal_softmax<<<row_blocks(rows), 32 * kRowsPerBlock>>>(a, rows, t);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void softmax_bwd(const float* p, float* dp, int64_t rows, int t, float scale) {
  if (rows == 0) return;
  k_softmax_bwd<<<row_blocks(rows), 32 * kRowsPerBlock>>>(p, dp, rows, t, scale);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void bias_gelu_fwd(float* x, const float* bias, float* y, int64_t rows, int cols) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  k_bias_gelu_fwd<<<blocks(n, 256), 256>>>(x, bias, y, n, cols);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void add(const float* a, const float* b, float* out, int64_t n) {
  if (n == 0) return;
  k_add<<<blocks(n, 256), 256>>>(a, b, out, n);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void mul(float* x, const float* m, int64_t n) {
  if (n == 0) return;
  k_mul<<<blocks(n, 256), 256>>>(x, m, n);
  LOOM_CHECK_CUDA(cudaGetLastError());
}

}  // namespace loom::rt::gpt_cuda

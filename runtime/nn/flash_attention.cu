// flash_attention.cu — causal self-attention on CUDA without the T x T matrix per head
// (gpt_cuda.hpp): FlashAttention-2's algorithm (Dao, 2023), as flash_attention.cpp runs it on
// the CPU, in fp32. A block of kRows threads takes kRows rows of one (sequence, head), one row a
// thread, its vectors in registers (HS, the head size rounded up to 32, 64 or 128, fixes their
// length at compile time); the other side's rows pass through shared memory kStage at a time.
//   forward: one thread per query row; online softmax over the keys up to the row (running max
//     m and sum l, the sum so far rescaled by exp(m_old - m_new)); y = o / l, lse = m + log l.
//   backward: D = rowsum(dy * y); one kernel per query row for dq (P = exp(s - lse) again,
//     ds = P (dP - D) scale, dq += ds k), one per key row for dk and dv: every sum has one
//     owner, so no atomics and the same result every run.
#include "../tensor/cuda_check.cuh"
#include "gpt_cuda.hpp"

namespace loom::rt::gpt_cuda {

namespace {

using cuda::blocks;

constexpr int kRows = 64;   // threads a block, rows a block
constexpr int kStage = 32;  // rows of the other side in shared memory at a time

// Where head `hd` of sequence `bi` starts in qkv (its q; k is c after, v 2c after).
__device__ const float* head_base(const float* qkv, int bi, int hd, int t, int c, int hs) {
  return qkv + int64_t{bi} * t * 3 * c + int64_t{hd} * hs;
}

// Rows [r0, r0 + kStage) of two matrices of the head (offsets a and b from its q, rows 3c apart)
// into shared memory, zeros past row t or column hs. Every thread of the block takes part.
template <int HS>
__device__ void stage(float (*sa)[HS], float (*sb)[HS], const float* base, int a, int b, int r0, int t, int c,
                      int hs) {
  for (int e = threadIdx.x; e < kStage * HS; e += blockDim.x) {
    const int rr = e / HS, k = e % HS, r = r0 + rr;
    const bool in = r < t && k < hs;
    sa[rr][k] = in ? base[int64_t{r} * 3 * c + a + k] : 0.0f;
    sb[rr][k] = in ? base[int64_t{r} * 3 * c + b + k] : 0.0f;
  }
}

// blockIdx.x: (sequence, head); blockIdx.y: tile of query rows.
template <int HS>
__global__ void k_flash_fwd(const float* qkv, float* y, float* lse, int t, int h, int c, int hs, float scale) {
  __shared__ float ks[kStage][HS], vs[kStage][HS];
  const int bh = blockIdx.x, bi = bh / h, hd = bh % h;
  const float* base = head_base(qkv, bi, hd, t, c, hs);
  const int i = blockIdx.y * kRows + threadIdx.x;
  const bool live = i < t;
  float q[HS], o[HS];
#pragma unroll
  for (int k = 0; k < HS; ++k) {
    q[k] = live && k < hs ? base[int64_t{i} * 3 * c + k] * scale : 0.0f;
    o[k] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int last = min(t, (blockIdx.y + 1) * kRows) - 1;  // no row of the tile looks past it
  for (int j0 = 0; j0 <= last; j0 += kStage) {
    __syncthreads();
    stage<HS>(ks, vs, base, c, 2 * c, j0, t, c, hs);
    __syncthreads();
    const int n = live ? min(kStage, i - j0 + 1) : 0;  // keys j0 .. i
    for (int jj = 0; jj < n; ++jj) {
      float s = 0.0f;
#pragma unroll
      for (int k = 0; k < HS; ++k) s += q[k] * ks[jj][k];
      const float mx = fmaxf(m, s), corr = expf(m - mx), p = expf(s - mx);  // expf(-inf) = 0
      l = l * corr + p;
#pragma unroll
      for (int k = 0; k < HS; ++k) o[k] = o[k] * corr + p * vs[jj][k];
      m = mx;
    }
  }
  if (!live) return;
  const float inv = 1.0f / l;
  float* yr = y + (int64_t{bi} * t + i) * c + int64_t{hd} * hs;
#pragma unroll
  for (int k = 0; k < HS; ++k)
    if (k < hs) yr[k] = o[k] * inv;
  lse[int64_t{bh} * t + i] = m + logf(l);
}

// rowsum[bh * t + i] = dy_i . y_i over the head's values.
__global__ void k_flash_rowsum(const float* dy, const float* y, float* rowsum, int64_t rows, int t, int h, int c) {
  const int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (e >= rows) return;
  const int64_t bh = e / t, i = e % t, bi = bh / h;
  const int hs = c / h;
  const int64_t off = (bi * t + i) * c + (bh % h) * hs;
  float d = 0.0f;
  for (int k = 0; k < hs; ++k) d += dy[off + k] * y[off + k];
  rowsum[e] = d;
}

// dq of one query row a thread: the keys up to the row, kStage at a time.
template <int HS>
__global__ void k_flash_dq(const float* dy, const float* qkv, const float* lse, const float* rowsum, float* dqkv, int t,
                           int h, int c, int hs, float scale) {
  __shared__ float ks[kStage][HS], vs[kStage][HS];
  const int bh = blockIdx.x, bi = bh / h, hd = bh % h;
  const float* base = head_base(qkv, bi, hd, t, c, hs);
  const int i = blockIdx.y * kRows + threadIdx.x;
  const bool live = i < t;
  const float* dyr = dy + (int64_t{bi} * t + (live ? i : 0)) * c + int64_t{hd} * hs;
  float q[HS], d_o[HS], dq[HS];
#pragma unroll
  for (int k = 0; k < HS; ++k) {
    q[k] = live && k < hs ? base[int64_t{i} * 3 * c + k] : 0.0f;
    d_o[k] = live && k < hs ? dyr[k] : 0.0f;
    dq[k] = 0.0f;
  }
  const float li = live ? lse[int64_t{bh} * t + i] : 0.0f, di = live ? rowsum[int64_t{bh} * t + i] : 0.0f;
  const int last = min(t, (blockIdx.y + 1) * kRows) - 1;
  for (int j0 = 0; j0 <= last; j0 += kStage) {
    __syncthreads();
    stage<HS>(ks, vs, base, c, 2 * c, j0, t, c, hs);
    __syncthreads();
    const int n = live ? min(kStage, i - j0 + 1) : 0;
    for (int jj = 0; jj < n; ++jj) {
      float s = 0.0f, dp = 0.0f;
#pragma unroll
      for (int k = 0; k < HS; ++k) {
        s += q[k] * ks[jj][k];
        dp += d_o[k] * vs[jj][k];
      }
      const float p = expf(s * scale - li), ds = p * (dp - di) * scale;
#pragma unroll
      for (int k = 0; k < HS; ++k) dq[k] += ds * ks[jj][k];
    }
  }
  if (!live) return;
  float* out = dqkv + (int64_t{bi} * t + i) * 3 * c + int64_t{hd} * hs;
#pragma unroll
  for (int k = 0; k < HS; ++k)
    if (k < hs) out[k] = dq[k];
}

// dk and dv of one key row a thread: the query rows from the key on, kStage at a time.
template <int HS>
__global__ void k_flash_dkv(const float* dy, const float* qkv, const float* lse, const float* rowsum, float* dqkv,
                            int t, int h, int c, int hs, float scale) {
  __shared__ float qs[kStage][HS], dos[kStage][HS];
  __shared__ float ls[kStage], ds_[kStage];
  const int bh = blockIdx.x, bi = bh / h, hd = bh % h;
  const float* base = head_base(qkv, bi, hd, t, c, hs);
  const int j = blockIdx.y * kRows + threadIdx.x;
  const bool live = j < t;
  float kk[HS], vv[HS], dk[HS], dv[HS];
#pragma unroll
  for (int k = 0; k < HS; ++k) {
    kk[k] = live && k < hs ? base[int64_t{j} * 3 * c + c + k] : 0.0f;
    vv[k] = live && k < hs ? base[int64_t{j} * 3 * c + 2 * c + k] : 0.0f;
    dk[k] = dv[k] = 0.0f;
  }
  const float* dyh = dy + int64_t{bi} * t * c + int64_t{hd} * hs;  // dy of the head, rows c apart
  for (int i0 = blockIdx.y * kRows; i0 < t; i0 += kStage) {  // no query before the tile's first key sees it
    __syncthreads();
    for (int e = threadIdx.x; e < kStage * HS; e += blockDim.x) {
      const int rr = e / HS, k = e % HS, r = i0 + rr;
      const bool in = r < t && k < hs;
      qs[rr][k] = in ? base[int64_t{r} * 3 * c + k] : 0.0f;
      dos[rr][k] = in ? dyh[int64_t{r} * c + k] : 0.0f;
    }
    for (int rr = threadIdx.x; rr < kStage; rr += blockDim.x) {
      const bool in = i0 + rr < t;
      ls[rr] = in ? lse[int64_t{bh} * t + i0 + rr] : 0.0f;
      ds_[rr] = in ? rowsum[int64_t{bh} * t + i0 + rr] : 0.0f;
    }
    __syncthreads();
    if (!live) continue;
    const int first = max(0, j - i0), n = min(kStage, t - i0);  // queries i >= j
    for (int ii = first; ii < n; ++ii) {
      float s = 0.0f, dp = 0.0f;
#pragma unroll
      for (int k = 0; k < HS; ++k) {
        s += qs[ii][k] * kk[k];
        dp += dos[ii][k] * vv[k];
      }
      const float p = expf(s * scale - ls[ii]), ds = p * (dp - ds_[ii]) * scale;
#pragma unroll
      for (int k = 0; k < HS; ++k) {
        dv[k] += p * dos[ii][k];
        dk[k] += ds * qs[ii][k];
      }
    }
  }
  if (!live) return;
  float* out = dqkv + (int64_t{bi} * t + j) * 3 * c + int64_t{hd} * hs;
#pragma unroll
  for (int k = 0; k < HS; ++k)
    if (k < hs) {
      out[c + k] = dk[k];
      out[2 * c + k] = dv[k];
    }
}

void check_head_size(int hs) {
  if (hs > kFlashMaxHeadSize)
    throw Error("flash attention on CUDA takes heads of up to " + std::to_string(kFlashMaxHeadSize) +
                " values; this model's have " + std::to_string(hs) + " (use --attention full)");
}

// The kernel instance for this head size: HS is hs rounded up to 32, 64 or 128.
template <template <int> class Launch, class... Args>
void by_head_size(int hs, Args... args) {
  check_head_size(hs);
  if (hs <= 32) return Launch<32>::run(args...);
  if (hs <= 64) return Launch<64>::run(args...);
  Launch<128>::run(args...);
}

template <int HS>
struct Forward {
  static void run(dim3 grid, const float* qkv, float* y, float* lse, int t, int h, int c, int hs, float scale) {
    k_flash_fwd<HS><<<grid, kRows>>>(qkv, y, lse, t, h, c, hs, scale);
  }
};

template <int HS>
struct Backward {
  static void run(dim3 grid, const float* dy, const float* qkv, const float* lse, const float* rowsum, float* dqkv,
                  int t, int h, int c, int hs, float scale) {
    k_flash_dq<HS><<<grid, kRows>>>(dy, qkv, lse, rowsum, dqkv, t, h, c, hs, scale);
    LOOM_CHECK_CUDA(cudaGetLastError());
    k_flash_dkv<HS><<<grid, kRows>>>(dy, qkv, lse, rowsum, dqkv, t, h, c, hs, scale);
  }
};

}  // namespace

void flash_attention_fwd(const float* qkv, float* y, float* lse, int b, int t, int h, int c) {
  const int hs = c / h;
  if (int64_t{b} * h * t == 0) return;
  const dim3 grid(static_cast<unsigned>(b * h), blocks(t, kRows));
  by_head_size<Forward>(hs, grid, qkv, y, lse, t, h, c, hs, 1.0f / sqrtf(static_cast<float>(hs)));
  LOOM_CHECK_CUDA(cudaGetLastError());
}

void flash_attention_bwd(const float* dy, const float* qkv, const float* y, const float* lse, float* rowsum,
                         float* dqkv, int b, int t, int h, int c) {
  const int hs = c / h;
  const int64_t rows = int64_t{b} * h * t;
  if (rows == 0) return;
  check_head_size(hs);
  k_flash_rowsum<<<blocks(rows, 256), 256>>>(dy, y, rowsum, rows, t, h, c);
  LOOM_CHECK_CUDA(cudaGetLastError());
  const dim3 grid(static_cast<unsigned>(b * h), blocks(t, kRows));
  by_head_size<Backward>(hs, grid, dy, qkv, lse, rowsum, dqkv, t, h, c, hs, 1.0f / sqrtf(static_cast<float>(hs)));
  LOOM_CHECK_CUDA(cudaGetLastError());
}

}  // namespace loom::rt::gpt_cuda

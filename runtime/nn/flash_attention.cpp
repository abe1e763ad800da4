// flash_attention.cpp — causal self-attention on the CPU without the T x T matrix per head
// (gpt_kernels.hpp's flash path): FlashAttention-2's algorithm (Dao, 2023) on tiles of
// kTile query rows by kTile keys, the products on the GEMM library like the full path's.
//   forward, per query tile: for each key tile up to the diagonal, S = scale Q K^T, a running
//     row maximum m and sum l (online softmax: what was summed so far is rescaled by
//     exp(m_old - m_new)), O += exp(S - m) V; at the end Y = O / l and L = m + log l.
//   backward, per key tile: for each query tile from the diagonal on, P = exp(S - L) again,
//     dV += P^T dY, dP = dY V^T, dS = P (dP - D) scale with D = rowsum(dY * Y),
//     dQ += dS K, dK += dS^T Q.
// Memory per thread: a few tiles; per layer, L [B, H, T] instead of P [B, H, T, T].
#include <algorithm>
#include <cmath>
#include <vector>

#include "gpt_kernels.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/vec.hpp"

namespace loom::rt::gptk {

namespace {

constexpr int kTile = 64;

// One (sequence, head): its q, k, v rows (ld = 3c apart) and its y / dy rows (c apart).
struct Head {
  const float *q, *k, *v;
  int64_t ld, ldy;
  int t, hs;
};

Head head_of(const float* qkv, int64_t bh, int t, int h, int c) {
  const int hs = c / h;
  const float* q = qkv + (bh / h) * t * 3 * c + (bh % h) * hs;
  return {q, q + c, q + 2 * c, 3 * int64_t{c}, c, t, hs};
}

// Rows of a score tile s (row stride kTile) in place: keys j0 + j with j0 + j <= i0 + r stay,
// the rest become 0; returns how many keys row r keeps.
inline int kept(int i0, int r, int j0, int cols) { return std::max(0, std::min(cols, i0 + r - j0 + 1)); }

// The online softmax over one score tile: rescales o (rows x hs) and l by exp(m_old - m_new),
// turns s into exp(s - m_new) (0 above the diagonal), and adds the tile's sums to l.
LOOM_VEC void online_softmax(float* s, int rows, int cols, int i0, int j0, float* m, float* l, float* o, int hs) {
  for (int r = 0; r < rows; ++r) {
    float* sr = s + int64_t{r} * kTile;
    const int n = kept(i0, r, j0, cols);
    for (int j = n; j < cols; ++j) sr[j] = 0.0f;
    if (n == 0) continue;
    const float mx = vec::max(sr, n, l[r] > 0.0f ? m[r] : sr[0]);
    const float corr = l[r] > 0.0f ? vec::exp(m[r] - mx) : 0.0f;
    const float sum = vec::exp_sum(sr, sr, mx, n);
    l[r] = l[r] * corr + sum;
    m[r] = mx;
    float* orow = o + int64_t{r} * hs;
    for (int k = 0; k < hs; ++k) orow[k] *= corr;
  }
}

// P = exp(S - L) in place (0 above the diagonal), then dP (in dp) becomes dS = P (dP - D) scale.
LOOM_VEC void softmax_grad_tile(float* s, float* dp, int rows, int cols, int i0, int j0, const float* lse,
                                const float* dsum, float scale) {
  for (int r = 0; r < rows; ++r) {
    float* sr = s + int64_t{r} * kTile;
    float* dr = dp + int64_t{r} * kTile;
    const int n = kept(i0, r, j0, cols);
    const float li = lse[i0 + r], di = dsum[i0 + r];
    for (int j = 0; j < n; ++j) {
      sr[j] = vec::exp(sr[j] - li);
      dr[j] = sr[j] * (dr[j] - di) * scale;
    }
    for (int j = n; j < cols; ++j) sr[j] = dr[j] = 0.0f;
  }
}

void forward_head(const Head& hd, float* y, float* lse, std::vector<float>& s, std::vector<float>& o,
                  std::vector<float>& m, std::vector<float>& l) {
  const int t = hd.t, hs = hd.hs;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int i0 = 0; i0 < t; i0 += kTile) {
    const int rows = std::min(kTile, t - i0);
    std::fill(o.begin(), o.end(), 0.0f);
    std::fill(l.begin(), l.end(), 0.0f);
    for (int j0 = 0; j0 < i0 + rows; j0 += kTile) {  // keys up to the tile's last row
      const int cols = std::min(kTile, t - j0);
      cpu::gemm(false, true, rows, cols, hs, scale, hd.q + i0 * hd.ld, static_cast<int>(hd.ld), hd.k + j0 * hd.ld,
                static_cast<int>(hd.ld), 0.0f, s.data(), kTile);
      online_softmax(s.data(), rows, cols, i0, j0, m.data(), l.data(), o.data(), hs);
      cpu::gemm(false, false, rows, hs, cols, 1.0f, s.data(), kTile, hd.v + j0 * hd.ld, static_cast<int>(hd.ld), 1.0f,
                o.data(), hs);
    }
    for (int r = 0; r < rows; ++r) {
      const float inv = 1.0f / l[static_cast<size_t>(r)];
      float* yr = y + (i0 + r) * hd.ldy;
      for (int k = 0; k < hs; ++k) yr[k] = o[static_cast<size_t>(r * hs + k)] * inv;
      lse[i0 + r] = m[static_cast<size_t>(r)] + std::log(l[static_cast<size_t>(r)]);
    }
  }
}

// dq, dk, dv: this head's columns of dqkv (ld apart), overwritten.
void backward_head(const Head& hd, const float* dy, const float* y, const float* lse, float* dq, std::vector<float>& s,
                   std::vector<float>& dp, std::vector<float>& dsum) {
  const int t = hd.t, hs = hd.hs, ld = static_cast<int>(hd.ld), ldy = static_cast<int>(hd.ldy);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float *dk = dq + (hd.k - hd.q), *dv = dq + (hd.v - hd.q);
  for (int i = 0; i < t; ++i) {
    const float *a = dy + int64_t{i} * ldy, *b = y + int64_t{i} * ldy;
    dsum[static_cast<size_t>(i)] = vec::dot(a, b, hs);
    for (int k = 0; k < hs; ++k) dq[i * hd.ld + k] = dk[i * hd.ld + k] = dv[i * hd.ld + k] = 0.0f;
  }
  for (int j0 = 0; j0 < t; j0 += kTile) {
    const int cols = std::min(kTile, t - j0);
    for (int i0 = j0; i0 < t; i0 += kTile) {  // query tiles at or below the diagonal
      const int rows = std::min(kTile, t - i0);
      cpu::gemm(false, true, rows, cols, hs, scale, hd.q + i0 * hd.ld, ld, hd.k + j0 * hd.ld, ld, 0.0f, s.data(), kTile);
      cpu::gemm(false, true, rows, cols, hs, 1.0f, dy + int64_t{i0} * ldy, ldy, hd.v + j0 * hd.ld, ld, 0.0f, dp.data(),
                kTile);  // dP = dY V^T
      softmax_grad_tile(s.data(), dp.data(), rows, cols, i0, j0, lse, dsum.data(), scale);
      cpu::gemm(true, false, cols, hs, rows, 1.0f, s.data(), kTile, dy + int64_t{i0} * ldy, ldy, 1.0f, dv + j0 * hd.ld,
                ld);  // dV += P^T dY
      cpu::gemm(false, false, rows, hs, cols, 1.0f, dp.data(), kTile, hd.k + j0 * hd.ld, ld, 1.0f, dq + i0 * hd.ld,
                ld);  // dQ += dS K
      cpu::gemm(true, false, cols, hs, rows, 1.0f, dp.data(), kTile, hd.q + i0 * hd.ld, ld, 1.0f, dk + j0 * hd.ld,
                ld);  // dK += dS^T Q
    }
  }
}

}  // namespace

void flash_attention_fwd_cpu(const float* qkv, float* y, float* lse, int b, int t, int h, int c) {
  const int hs = c / h;
  for_range(int64_t{b} * h, 2, [&](int64_t lo, int64_t hi) {
    std::vector<float> s(static_cast<size_t>(kTile) * kTile), o(static_cast<size_t>(kTile) * hs), m(kTile), l(kTile);
    for (int64_t bh = lo; bh < hi; ++bh)
      forward_head(head_of(qkv, bh, t, h, c), y + (bh / h) * t * c + (bh % h) * hs, lse + bh * t, s, o, m, l);
  });
}

void flash_attention_bwd_cpu(const float* dy, const float* qkv, const float* y, const float* lse, float* dqkv, int b,
                             int t, int h, int c) {
  const int hs = c / h;
  for_range(int64_t{b} * h, 2, [&](int64_t lo, int64_t hi) {
    std::vector<float> s(static_cast<size_t>(kTile) * kTile), dp(s.size()), dsum(static_cast<size_t>(t));
    for (int64_t bh = lo; bh < hi; ++bh) {
      const int64_t rows = (bh / h) * t, col = (bh % h) * hs;
      backward_head(head_of(qkv, bh, t, h, c), dy + rows * c + col, y + rows * c + col, lse + bh * t,
                    dqkv + rows * 3 * c + col, s, dp, dsum);
    }
  });
}

}  // namespace loom::rt::gptk

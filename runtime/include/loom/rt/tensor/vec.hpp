// vec.hpp — what makes the hot loops (the ONNX executor's, the gpt's) vectorise on this generic
// x86-64 build: LOOM_VEC compiles a function twice (x86-64-v3: AVX2 with FMA, and the baseline) and
// picks one at load time; exp and the normal CDF written without branches or libm calls, so the vectoriser can widen them; and
// for_range and for_items, which spread a loop over the threads when OpenMP loops are on.
#pragma once

#include <omp.h>

#include <cstdint>
#include <cstring>

#include "loom/rt/tensor/kernels.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// x86-64-v3 rather than "avx2": the FMA it adds is a third fewer instructions in exp and the CDF, and
// arch=haswell's tuning splits unaligned 256-bit loads (half the speed on this code).
#define LOOM_VEC __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define LOOM_VEC
#endif

namespace loom::rt::vec {

// fn(lo, hi) over [0, n) in one piece per thread (one piece without OpenMP loops or when small).
template <class Fn>
void for_range(int64_t n, int64_t min_parallel, Fn fn) {
  if (!cpu::openmp_loops() || n < min_parallel) return fn(int64_t{0}, n);
#pragma omp parallel
  {
    const int64_t p = omp_get_num_threads(), me = omp_get_thread_num();
    const int64_t lo = n * me / p, hi = n * (me + 1) / p;
    if (lo < hi) fn(lo, hi);
  }
}

// Values below which a loop runs on one thread (waking the others would cost more than it saves).
constexpr int64_t kParallelValues = 1 << 14;

// fn(lo, hi) over [0, items) as for_range, spread when the items hold kParallelValues or more.
template <class Fn>
void for_items(int64_t items, int64_t values_each, Fn fn) {
  for_range(items, kParallelValues / (values_each > 1 ? values_each : 1) + 1, fn);
}

// e^x for float: Cody-Waite reduction and Cephes' polynomial (about 1 ulp), x clamped to the
// range where the result is finite and normal.
__attribute__((always_inline)) inline float exp(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  // Round to nearest by adding and taking away 1.5 * 2^23 (no compare, no blend).
  const float fx = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = x - fx * 0.693359375f + fx * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(fx) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return y * scale;
}

// (1 - erf(a)) / 2 for a >= 0, given e = e^(-a^2): Abramowitz and Stegun 7.1.26 (absolute error
// of erf below 1.5e-7).
__attribute__((always_inline)) inline float half_erfc(float a, float e) {
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  const float poly = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t;
  return 0.5f * poly * e;
}

// Phi(x) = (1 + erf(x / sqrt 2)) / 2, the GELU's gate: the tail is computed once and the sign of
// x picks it or its complement, without the negations a signed erf would need. e receives
// e^(-x^2/2), the factor erf shares with the normal density.
__attribute__((always_inline)) inline float normal_cdf(float x, float& e) {
  const float z = x * 0.70710678118654752f;
  const float a = z < 0.0f ? -z : z;
  e = vec::exp(-a * a);
  const float tail = half_erfc(a, e);
  return z < 0.0f ? tail : 1.0f - tail;
}
__attribute__((always_inline)) inline float normal_cdf(float x) {
  float e;
  return normal_cdf(x, e);
}

// The erf GELU and its derivative from one exponential: y = x Phi(x), dy = Phi(x) + x phi(x)
// (e^(-x^2/2) is both erf's factor and the normal density's).
struct Gelu {
  float y, dy;
};
__attribute__((always_inline)) inline Gelu gelu(float x) {
  float e;
  const float cdf = normal_cdf(x, e);
  return {x * cdf, cdf + x * 0.3989422804014327f * e};
}

// Sums and maxima over a row in kLanes running lanes, folded pairwise at the end: without
// -ffast-math GCC keeps a plain `s += x[k]` in order, one add at a time; lanes are two AVX2
// registers of independent adds. The order depends only on n, never on the threads.
constexpr int kLanes = 16;

__attribute__((always_inline)) inline float fold(float* acc) {
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

// sum of x[0, n)
__attribute__((always_inline)) inline float sum(const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[k + l];
  float s = fold(acc);
  for (; k < n; ++k) s += x[k];
  return s;
}

// sum of (x - m)^2 over [0, n)
__attribute__((always_inline)) inline float sum_sq_dev(const float* x, float m, int64_t n) {
  float acc[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += (x[k + l] - m) * (x[k + l] - m);
  float s = fold(acc);
  for (; k < n; ++k) s += (x[k] - m) * (x[k] - m);
  return s;
}

// sum of a * b over [0, n)
__attribute__((always_inline)) inline float dot(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[k + l] * b[k + l];
  float s = fold(acc);
  for (; k < n; ++k) s += a[k] * b[k];
  return s;
}

// max of m and x[0, n)
__attribute__((always_inline)) inline float max(const float* x, int64_t n, float m) {
  float acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = m;
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = acc[l] > x[k + l] ? acc[l] : x[k + l];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] = acc[l] > acc[l + w] ? acc[l] : acc[l + w];
  for (; k < n; ++k) acc[0] = acc[0] > x[k] ? acc[0] : x[k];
  return acc[0];
}

// y = e^(x - m) over [0, n) (y may be x), and its sum
__attribute__((always_inline)) inline float exp_sum(const float* x, float* y, float m, int64_t n) {
  float acc[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += (y[k + l] = vec::exp(x[k + l] - m));
  float s = fold(acc);
  for (; k < n; ++k) s += (y[k] = vec::exp(x[k] - m));
  return s;
}

}  // namespace loom::rt::vec

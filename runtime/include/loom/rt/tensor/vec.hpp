// vec.hpp — what makes the hot loops (the ONNX executor's, the gpt's) vectorise on this generic
// x86-64 build: LOOM_VEC compiles a function twice (AVX2 and the baseline) and picks one at load
// time; exp and erf written without branches or libm calls, so the vectoriser can widen them; and
// for_range, which spreads a loop over the threads when OpenMP loops are on.
#pragma once

#include <omp.h>

#include <cstdint>
#include <cstring>

#include "loom/rt/tensor/kernels.hpp"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LOOM_VEC __attribute__((target_clones("avx2", "default")))
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

// e^x for float: Cody-Waite reduction and Cephes' polynomial (about 1 ulp), x clamped to the
// range where the result is finite and normal.
__attribute__((always_inline)) inline float exp(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  float fx = x * 1.44269504088896341f;
  fx = static_cast<float>(static_cast<int32_t>(fx + (fx >= 0.0f ? 0.5f : -0.5f)));
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

// erf(x): Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7).
__attribute__((always_inline)) inline float erf(float x) {
  const float a = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  const float poly = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t;
  const float y = 1.0f - poly * vec::exp(-a * a);
  return x < 0.0f ? -y : y;
}

}  // namespace loom::rt::vec

// sgemm_peer.hpp — the CPU's GEMM ceiling for loom-bench train: a step's GEMMs timed under each
// GEMM library this build has (OpenBLAS's cblas_sgemm; oneDNN's dnnl_sgemm, faster on AVX-512
// and loom-train's default there), the faster one kept and named.
#pragma once

#include <string>

#include "loom/rt/error.hpp"
#include "loom/rt/tensor/kernels.hpp"

// `measure()` returns GFLOP/s through loom::rt::cpu::gemm; *which names the library that won.
template <class F>
double best_cpu_sgemm(int threads, F measure, std::string* which) {
  loom::rt::cpu::set_threads(threads);
  double best = 0;
  for (const char* lib : {"openblas", "onednn"}) {
    try {
      loom::rt::cpu::set_gemm_backend(lib);
    } catch (const loom::rt::Error&) {
      continue;  // not in this build
    }
    const double r = measure();
    if (r > best) best = r, *which = std::string(lib) == "openblas" ? "cblas_sgemm (OpenBLAS)" : "dnnl_sgemm (oneDNN)";
  }
  return best;
}

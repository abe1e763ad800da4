// progress.hpp — what a long benchmark is doing, on stderr (the figures stay alone on stdout):
// "loom-bench: [12.3 s] writing checkpoint 2 of 3".
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

inline void bench_progress(const std::string& what) {
  static const auto t0 = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "loom-bench: [%.1f s] %s\n", s, what.c_str());
}

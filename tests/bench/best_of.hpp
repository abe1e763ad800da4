// best_of.hpp — the benchmarks' timer: the best seconds of `reps` calls after a warm-up call.
#pragma once

#include <algorithm>
#include <chrono>

namespace loom::bench {

template <typename F>
double best_of(int reps, F f) {
  using Clock = std::chrono::steady_clock;
  f();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t).count());
  }
  return best;
}

}  // namespace loom::bench

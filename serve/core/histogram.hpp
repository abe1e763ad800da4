// histogram.hpp — a histogram's counts as Prometheus keeps them (one per bound, plus +Inf), its
// sum and count: loom-serve's metrics and the controller's share it.
#pragma once

#include <cstdint>
#include <vector>

namespace loom::serve {

struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // one per bound, plus +Inf
  double sum = 0;
  uint64_t n = 0;
  void add(double v) {
    if (counts.empty()) counts.assign(bounds.size() + 1, 0);
    size_t i = 0;
    while (i < bounds.size() && v > bounds[i]) ++i;
    ++counts[i];
    sum += v;
    ++n;
  }
};

}  // namespace loom::serve

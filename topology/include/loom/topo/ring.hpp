// ring.hpp — the best ring over a set of GPUs: the bottleneck link is maximised first, then the
// ring's total bandwidth. Exact by enumeration up to 8 GPUs, a 2-opt heuristic beyond.
#pragma once

#include <vector>

#include "loom/topo/topology.hpp"

namespace loom::topo {

struct Ring {
  std::vector<int> gpus;          // GPU indices in ring order
  double bottleneck_gbps = 0.0;   // slowest hop
  int bottleneck_links = 0;       // NVLinks on the slowest hop (0 if it is PCIe or slower)
  double total_gbps = 0.0;        // sum over hops
};

// The best ring through exactly the GPUs in `gpu_indices`.
Ring best_ring(const Topology& t, const std::vector<int>& gpu_indices);

// The best ring through `k` of the GPUs in `allowed` (the k-GPU subset whose ring is best).
Ring best_ring_of_k(const Topology& t, const std::vector<int>& allowed, int k);

}  // namespace loom::topo

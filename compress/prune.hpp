// prune.hpp — structured pruning of an MLP (Li et al. 2017, "Pruning Filters for Efficient
// ConvNets", applied to neurons): each hidden Linear's neurons are scored by the L1 (or L2) norm
// of their weight row, the lowest `sparsity` fraction is removed, with the matching input
// columns of the next Linear, so the model (and its file) is physically smaller.
#pragma once

#include <string>
#include <vector>

#include "loom/rt/nn/mlp.hpp"

namespace loom::compress {

struct PruneResult {
  rt::Mlp model;
  std::vector<std::vector<int>> kept;  // per hidden layer: the original indices of the neurons kept, in order
};

// Throws rt::Error for a sparsity outside (0, 1) or an unknown criterion ("l1" or "l2").
// Every hidden layer keeps at least one neuron: round(width * (1 - sparsity)), at least 1.
PruneResult prune_mlp(const rt::Mlp& m, double sparsity, const std::string& criterion);

}  // namespace loom::compress

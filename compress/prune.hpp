// prune.hpp — structured pruning of an MLP (Li et al. 2017, "Pruning Filters for Efficient
// ConvNets", applied to neurons): each hidden Linear's neurons are scored by the L1 (or L2) norm
// of their weight row, the lowest `sparsity` fraction is removed, with the matching input
// columns of the next Linear, so the model (and its file) is physically smaller.
#pragma once

#include <string>
#include <vector>

#include "loom/rt/nn/gpt.hpp"
#include "loom/rt/nn/mlp.hpp"

namespace loom::compress {

struct PruneResult {
  rt::Mlp model;
  std::vector<std::vector<int>> kept;  // per hidden layer: the original indices of the neurons kept, in order
};

// Throws rt::Error for a sparsity outside (0, 1) or an unknown criterion ("l1" or "l2").
// Every hidden layer keeps at least one neuron: round(width * (1 - sparsity)), at least 1.
PruneResult prune_mlp(const rt::Mlp& m, double sparsity, const std::string& criterion);

// Structured pruning of a gpt: in every block, the same fraction of attention heads and of MLP
// neurons goes, those whose output weights (their columns of attn.c_proj, of mlp.c_proj) have
// the lowest L1 (or L2) norm — the scores need no data, as the MLP's, and a unit whose output
// weights are small adds little to the residual stream whatever its input. A head's rows of
// c_attn (its q, k and v) and columns of c_proj go with it; a neuron's row of c_fc and column of
// mlp.c_proj. model.config keeps embd and gains head_size and inner.
struct GptPruneResult {
  rt::Gpt model;
  std::vector<std::vector<int>> heads_kept, neurons_kept;  // per block: the original indices kept, in order
};
// Throws rt::Error for a sparsity outside (0, 1), an unknown criterion, or a sparsity that would
// remove every head or every neuron of a block.
GptPruneResult prune_gpt(rt::Gpt& g, double sparsity, const std::string& criterion);

}  // namespace loom::compress

// executor.cpp — the graph once at load (topological order, constants folded: the shape
// arithmetic PyTorch's exporter writes mostly becomes constants; patterns fused (fuse.cpp); each
// value's last use found, so its buffer returns to the allocator's cache for the next node),
// then each run on host tensors.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>

#include "ops.hpp"

namespace loom::rt::graph {
namespace {

// Kahn's order over the nodes (the file's order when it already is one).
std::vector<Node> topological(std::vector<Node> nodes, const std::vector<bool>& available_at_start,
                              const std::vector<std::string>& names) {
  std::vector<bool> ready = available_at_start;
  std::vector<Node> order;
  std::vector<bool> done(nodes.size(), false);
  for (size_t placed = 0; placed < nodes.size();) {
    bool progress = false;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (done[i]) continue;
      bool ok = true;
      for (int v : nodes[i].in) ok = ok && (v < 0 || ready[static_cast<size_t>(v)]);
      if (!ok) continue;
      for (int v : nodes[i].out)
        if (v >= 0) ready[static_cast<size_t>(v)] = true;
      order.push_back(std::move(nodes[i]));
      done[i] = true;
      ++placed;
      progress = true;
    }
    if (!progress) {
      for (size_t i = 0; i < nodes.size(); ++i)
        if (!done[i])
          for (int v : nodes[i].in)
            if (v >= 0 && !ready[static_cast<size_t>(v)])
              throw Error(nodes[i].label() + ": input '" + names[static_cast<size_t>(v)] +
                          "' is produced by no node (or by a cycle)");
    }
  }
  return order;
}

}  // namespace

void Model::run_node(const Node& n, std::vector<Tensor>& vals) const {
  thread_local std::vector<const Tensor*> in;  // reused: a node's run allocates only its outputs
  thread_local std::vector<Tensor> out;
  in.assign(n.in.size(), nullptr);
  for (size_t i = 0; i < n.in.size(); ++i)
    if (n.in[i] >= 0) {
      const Tensor& t = vals[static_cast<size_t>(n.in[i])];
      if (!t.defined()) throw Error(n.label() + ": input '" + names_[static_cast<size_t>(n.in[i])] + "' has no value");
      in[i] = &t;
    }
  out.clear();
  out.resize(n.out.size());
  try {
    n.fn(n, in, out);
  } catch (const AllocationRefused& e) {  // from Tensor::empty, which knows no node
    out.clear();
    throw AllocationRefused(n.label() + ": " + e.what());
  }
  for (size_t i = 0; i < n.out.size(); ++i)
    if (n.out[i] >= 0) vals[static_cast<size_t>(n.out[i])] = std::move(out[i]);
}

void Model::prepare() {
  std::vector<bool> avail(names_.size(), false);
  for (size_t v = 0; v < names_.size(); ++v) avail[v] = constants_[v].defined();
  for (int id : input_ids_) avail[static_cast<size_t>(id)] = true;
  nodes_ = topological(std::move(nodes_), avail, names_);
  // Fold every node whose inputs are all constants (a DequantizeLinear's kept for the fusions).
  std::vector<Node> kept, dequantized;
  for (Node& n : nodes_) {
    bool constant = true;
    for (int v : n.in) constant = constant && (v < 0 || constants_[static_cast<size_t>(v)].defined());
    if (constant) {
      run_node(n, constants_);
      if (n.op == "DequantizeLinear") dequantized.push_back(n);
      ++folded_;
    } else {
      kept.push_back(std::move(n));
    }
  }
  nodes_ = std::move(kept);
  not_row_independent_ = rows_independent(nodes_, constants_, input_ids_, inputs_, output_ids_, names_);
  fused_ = fuse_nodes(nodes_, constants_, output_ids_, dequantized);
  // Each value's last reader releases it, unless it is an output or a constant.
  std::vector<int> last(names_.size(), -1);
  for (size_t i = 0; i < nodes_.size(); ++i)
    for (int v : nodes_[i].in)
      if (v >= 0) last[static_cast<size_t>(v)] = static_cast<int>(i);
  // Constants no node reads any more (folded into others, or taken into a fused node) are let go.
  std::vector<bool> read(names_.size(), false);
  for (const Node& n : nodes_)
    for (int v : n.in)
      if (v >= 0) read[static_cast<size_t>(v)] = true;
  for (int v : output_ids_) read[static_cast<size_t>(v)] = true;
  for (size_t v = 0; v < names_.size(); ++v)
    if (!read[v]) constants_[v] = Tensor();
  for (int v : output_ids_) last[static_cast<size_t>(v)] = -1;
  release_.assign(nodes_.size(), {});
  for (size_t v = 0; v < names_.size(); ++v)
    if (last[v] >= 0 && !constants_[v].defined()) release_[static_cast<size_t>(last[v])].push_back(static_cast<int>(v));
}

std::vector<Tensor> Model::run(const std::vector<Tensor>& inputs) const {
  if (inputs.size() != inputs_.size())
    throw Error("the model takes " + std::to_string(inputs_.size()) + " inputs, got " + std::to_string(inputs.size()));
  std::vector<Tensor> vals = constants_;
  std::map<std::string, std::pair<int64_t, std::string>> named;  // an open dimension's name: its size, and where
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorInfo& ti = inputs_[i];
    const Tensor& t = inputs[i];
    if (t.dtype() != ti.dtype)
      throw Error("input '" + ti.name + "' must be " + kserve_type_name(ti.dtype) + ", not " + dtype_name(t.dtype()));
    if (t.ndim() != static_cast<int>(ti.shape.size()))
      throw Error("input '" + ti.name + "' must have rank " + std::to_string(ti.shape.size()) + ", got " + t.shape_str());
    for (size_t d = 0; d < ti.shape.size(); ++d)
      if (ti.shape[d] >= 0 && ti.shape[d] != t.shape()[d])
        throw Error("input '" + ti.name + "' dimension " + std::to_string(d) + " must be " + std::to_string(ti.shape[d]) +
                    ", got " + t.shape_str());
    for (size_t d = 0; d < ti.dim_names.size() && d < ti.shape.size(); ++d) {
      if (ti.dim_names[d].empty()) continue;
      const auto seen = named.emplace(ti.dim_names[d], std::make_pair(t.shape()[d], ti.name));
      if (seen.first->second.first != t.shape()[d])
        throw Error("input '" + ti.name + "' dimension " + std::to_string(d) + " ('" + ti.dim_names[d] + "') is " +
                    std::to_string(t.shape()[d]) + ", but input '" + seen.first->second.second + "' has it " +
                    std::to_string(seen.first->second.first), Kind::kInput);
    }
    vals[static_cast<size_t>(input_ids_[i])] = t;
  }
  static const bool profile = std::getenv("LOOM_GRAPH_PROFILE") != nullptr;
  std::map<std::string, double> spent;
  std::optional<AllocationBudget> budget;
  if (budget_) budget.emplace(budget_);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run_node(nodes_[i], vals);
    if (profile) spent[nodes_[i].op] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int v : release_[i]) vals[static_cast<size_t>(v)] = Tensor();
  }
  if (profile)  // LOOM_GRAPH_PROFILE=1: seconds by operator, on stderr
    for (const auto& [op, s] : spent) std::fprintf(stderr, "loom graph profile: %-20s %8.3f ms\n", op.c_str(), s * 1e3);
  std::vector<Tensor> out;
  for (size_t k = 0; k < output_ids_.size(); ++k) {
    const Tensor& t = vals[static_cast<size_t>(output_ids_[k])];
    if (!t.defined()) throw Error("output '" + outputs_[k].name + "' was not computed");
    out.push_back(t);
  }
  return out;
}

}  // namespace loom::rt::graph

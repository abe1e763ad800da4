// nodes.hpp — what the graph tests that build nodes by hand share: a node of a registered
// operator, the nodes run in order over a table of values, and a float tensor of smooth values.
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "loom/rt/graph/graph.hpp"
#include "ops.hpp"

namespace loom_test {

using loom::rt::Tensor;
using loom::rt::graph::Node;

inline Tensor noisy(std::vector<int64_t> shape, float scale, float phase = 0.37f) {
  Tensor t = Tensor::empty(std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = std::sin(static_cast<float>(i) * phase + 0.1f) * scale;
  return t;
}

inline Node node(const std::string& op, std::vector<int> in, std::vector<int> out) {
  Node n;
  n.op = op, n.name = op, n.in = std::move(in), n.out = std::move(out);
  n.fn = loom::rt::graph::find_op(op);
  return n;
}

// The nodes run in order over values that start as `vals` (the constants and the inputs).
inline std::vector<Tensor> run_nodes(const std::vector<Node>& nodes, std::vector<Tensor> vals) {
  for (const Node& n : nodes) {
    if (n.op.empty()) continue;
    std::vector<const Tensor*> in;
    for (int v : n.in) in.push_back(v >= 0 ? &vals[static_cast<size_t>(v)] : nullptr);
    std::vector<Tensor> out(n.out.size());
    n.fn(n, in, out);
    for (size_t i = 0; i < out.size(); ++i) vals[static_cast<size_t>(n.out[i])] = out[i];
  }
  return vals;
}

}  // namespace loom_test

// fuse.hpp — what the load-time fusions share (fuse.cpp; fuse_attention.cpp; fuse_quant.cpp for
// the quantized models' patterns): the nodes in execution order, the folded constants and each value's readers.
#pragma once

#include <algorithm>
#include <vector>

#include "ops.hpp"

namespace loom::rt::graph {

struct Graph {
  std::vector<Node>& nodes;
  const std::vector<Tensor>& constants;
  std::vector<int> uses;  // readers of each value (+1000 for the graph's outputs)
  const std::vector<Node>& folded;  // nodes folded into constants at load

  // The folded node that made constant v, or null.
  const Node* folded_producer(int v) const {
    for (const Node& n : folded)
      if (n.out.size() == 1 && n.out[0] == v) return &n;
    return nullptr;
  }

  // The only node that reads value v, when exactly one does (and it is not a graph output).
  Node* sole_reader(int v, size_t after) {
    if (v < 0 || uses[static_cast<size_t>(v)] != 1) return nullptr;
    for (size_t j = after + 1; j < nodes.size(); ++j)
      for (int i : nodes[j].in)
        if (i == v) return nodes[j].op.empty() ? nullptr : &nodes[j];
    return nullptr;
  }
  // Every node after `after` that reads value v.
  std::vector<Node*> readers(int v, size_t after) {
    std::vector<Node*> r;
    for (size_t j = after + 1; j < nodes.size(); ++j)
      if (!nodes[j].op.empty() && std::find(nodes[j].in.begin(), nodes[j].in.end(), v) != nodes[j].in.end()) r.push_back(&nodes[j]);
    return r;
  }
  // The node before `before` that writes value v, when its one output is v (null otherwise).
  Node* producer(int v, size_t before) {
    for (size_t j = 0; j < before && j < nodes.size(); ++j)
      if (!nodes[j].op.empty() && nodes[j].out.size() == 1 && nodes[j].out[0] == v) return &nodes[j];
    return nullptr;
  }
  // The constant value v, or null.
  const Tensor* constant(int v) const {
    return v >= 0 && constants[static_cast<size_t>(v)].defined() ? &constants[static_cast<size_t>(v)] : nullptr;
  }
  // The float value of a one-element float constant, else false.
  bool scalar(int v, float* out) const {
    if (v < 0) return false;
    const Tensor& t = constants[static_cast<size_t>(v)];
    if (!t.defined() || t.numel() != 1 || t.dtype() != DType::kF32) return false;
    *out = t.f32()[0];
    return true;
  }
};

// fuse_attention.cpp: attention's MatMul, mask, Softmax and MatMul as one Loom.Attention node,
// whatever exporter wrote them; returns how many patterns went.
int fuse_attention(Graph& g);

// Whether d is a Loom.QuantizeDequantize of one float scale and one 8-bit zero point (or none),
// constants (so that it commutes with a transpose and runs inside attention's pass); *q, when
// given, its {scale, zero, lo, hi} (fuse_quant.cpp).
bool scalar_qdq(const Graph& g, const Node& d, std::vector<float>* q = nullptr);

// fuse_quant.cpp: onnxruntime.quantization's patterns (quantize_dynamic's MatMulInteger chain,
// QDQ pairs); returns how many nodes went.
int fuse_quantized(Graph& g);

}  // namespace loom::rt::graph

// backend.hpp — what computes a served model's answers, behind one interface: an MLP (float or
// INT8, on the CPU or a GPU), an ONNX graph, or a language model's decoder engine. ServedModel
// loads a file into one of these and describes it (name, version, metadata, batching); the
// batcher, the front ends and the generate routes reach the backend only through ServedModel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor_in.hpp"
#include "llm/engine.hpp"
#include "loom/rt/nn/mlp.hpp"
#include "loom/rt/nn/quant_mlp.hpp"
#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt::graph {
class Model;
}

namespace loom::serve {

class Backend {
 public:
  virtual ~Backend() = default;
  // A request's tensors as the inputs (`inputs`' order) and its rows. Throws ServeError kInput.
  virtual std::vector<rt::Tensor> decode(const std::vector<TensorDesc>& inputs, bool batched, const std::vector<TensorIn>& in,
                                         int max_rows, int* rows) const = 0;
  // The inputs (rows stacked) to the outputs; one caller at a time (the batcher).
  virtual std::vector<rt::Tensor> forward(const std::vector<rt::Tensor>& in) = 0;
  // A language model's engine (generate, the OpenAI completions); null for the others.
  virtual llm::Engine* engine() { return nullptr; }
  // The bytes one run may hold at once (an ONNX graph's; nothing for the others).
  virtual void set_run_memory_budget(size_t) {}
  virtual int64_t opset() const { return 0; }
  // An ONNX graph's shape after the load-time passes ("209 nodes, 133 folded, 60 fused"); "" else.
  virtual std::string summary() const { return ""; }
};

// An MLP: float (`mlp`) or INT8 (`int8`, then `mlp` may be null), on the GPU when `cuda`;
// `input` says how a request's rows become its `features` inputs.
std::unique_ptr<Backend> mlp_backend(std::unique_ptr<rt::Mlp> mlp, std::unique_ptr<rt::QuantMlp> int8, bool cuda,
                                     InputSpec input);
// An ONNX graph (a build with libonnx).
std::unique_ptr<Backend> graph_backend(std::unique_ptr<rt::graph::Model> graph);
// A language model served by its decoder engine: generate, not infer.
std::unique_ptr<Backend> engine_backend(std::unique_ptr<llm::Engine> engine, std::string path);

}  // namespace loom::serve

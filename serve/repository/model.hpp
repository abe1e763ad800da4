// model.hpp — one model version as loom-serve runs it: a Loom HDF5 MLP or gpt, GPT-2 or an ONNX
// graph loaded and checked into its backend (backend.hpp), and what the front ends ask of it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/options.hpp"
#include "core/status.hpp"
#include "core/tensor_in.hpp"
#include "llm/chat_template.hpp"
#include "llm/engine.hpp"
#include "loom/rt/io/model_io.hpp"
#include "loom/rt/tensor/tensor.hpp"
#include "repository/backend.hpp"

namespace loom::serve {

// One model version loaded from a Loom HDF5 file: type "mlp" (infer; float, pruned or INT8,
// Contract 7) or "gpt" (generate). Inputs: "input", FP32 (as the
// model sees it) or UINT8 (raw pixels: model.config's preprocess scale/mean/std applied),
// shape [N, features] or [N, ...] whose trailing dimensions multiply to the features. Output:
// "logits", FP32 [N, classes]. Or an ONNX file (model.onnx, Contract 8): the graph's own inputs
// and outputs, their datatypes and shapes.
class ServedModel {
 public:
  // Throws rt::Error when the file cannot be served, or device "cuda" is not usable.
  ServedModel(std::string name, std::string version, std::string path, const std::string& device = "cpu",
              const LlmOptions& llm = {});
  ~ServedModel();
  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  // The bytes an ONNX graph's run may hold at once (rt::graph::Model::set_memory_budget); a run
  // past it fails with AllocationRefused naming the node. Nothing for other models.
  void set_run_memory_budget(size_t bytes) { backend_->set_run_memory_budget(bytes); }
  const std::string& path() const { return path_; }
  int in_features() const { return in_; }
  bool on_cuda() const { return cuda_; }
  int out_features() const { return out_; }
  const std::string& config_json() const { return config_; }
  const InputSpec& input() const { return input_; }
  // "loom-hdf5", "loom-onnx", "loom-gpt2" or "loom-hf" (a Hugging Face folder: config.json and
  // safetensors), for the metadata.
  const char* platform() const { return platform_; }
  // A language model's decoder family, for the load line: gpt, gpt2, llama, mistral, qwen2, qwen3.
  const std::string& family() const { return family_; }
  // What the model takes and gives, as the metadata reports it.
  const std::vector<TensorDesc>& inputs() const { return inputs_; }
  const std::vector<TensorDesc>& outputs() const { return outputs_; }
  // Whether requests join into batches along dimension 0 (every input and output has a dynamic
  // first dimension); otherwise each request runs alone.
  bool batched() const { return batched_; }
  // Why a model with a dynamic first dimension still runs one request at a time ("" else).
  const std::string& not_batched() const { return not_batched_; }
  // The model folder's word (Triton's max_batch_size 0): never join requests.
  void never_batch(const std::string& why) {
    if (batched_) batched_ = false, not_batched_ = why;
  }
  // The shape input k takes, where the model's configuration fixes a dim the graph leaves free.
  void narrow_input(size_t k, std::vector<int64_t> shape) { inputs_.at(k).shape = std::move(shape); }
  int64_t opset() const { return backend_->opset(); }
  // An ONNX graph's shape after the load-time passes: "209 nodes, 133 folded, 60 fused".
  std::string graph_summary() const { return backend_->summary(); }
  // "fp32", "int8" (run by the INT8 kernels) or "int8-weights" (dequantized weights, float
  // arithmetic), for metadata and metrics.
  const std::string& precision() const { return precision_; }
  // A language model (Loom's gpt, GPT-2): served by generate and the OpenAI completions through
  // its decoder engine, not infer; null for the others.
  llm::Engine* engine() const { return backend_->engine(); }
  // A language model's chat format (chat_template.jinja, or tokenizer_config.json's
  // chat_template, in its version folder or else its model folder), for /v1/chat/completions;
  // null when it has none.
  const llm::ChatFormat* chat() const { return chat_.get(); }
  // A request's tensors as the model's inputs (in inputs() order) and its rows. Throws
  // ServeError kInput naming what is wrong.
  std::vector<rt::Tensor> decode(const std::vector<TensorIn>& in, int max_rows, int* rows) const {
    return backend_->decode(inputs_, batched_, in, max_rows, rows);
  }
  // The inputs (rows stacked) to the outputs (outputs() order); one caller at a time (the batcher).
  std::vector<rt::Tensor> forward(const std::vector<rt::Tensor>& in) { return backend_->forward(in); }

 private:
  std::string name_, version_, path_, config_, precision_ = "fp32";
  int in_ = 0, out_ = 0;
  bool cuda_ = false;
  const char* platform_ = "loom-hdf5";
  std::string family_ = "gpt";
  InputSpec input_;
  std::vector<TensorDesc> inputs_, outputs_;
  bool batched_ = true;
  std::string not_batched_;
  std::unique_ptr<Backend> backend_;  // what computes: an MLP, an ONNX graph or an LLM engine
  std::unique_ptr<llm::ChatFormat> chat_;
  void check_finite(const std::vector<rt::Param>& params) const;
  void load_gpt(const rt::ModelFile& f, const nlohmann::json& cfg, const LlmOptions& llm);
  void load_hf(const LlmOptions& llm);
  void load_onnx(const std::string& device);
};

}  // namespace loom::serve

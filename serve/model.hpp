// model.hpp — one model version as loom-serve runs it: a Loom HDF5 MLP loaded and checked,
// its forward pass (CPU or CUDA), and the decoding of a request's input tensor to its rows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "generator.hpp"
#include "loom/rt/io/model_io.hpp"
#include "loom/rt/nn/mlp.hpp"
#include "loom/rt/nn/quant_mlp.hpp"
#include "status.hpp"
#include "tensor_in.hpp"

namespace loom::serve {

// One model version loaded from a Loom HDF5 file: type "mlp" (infer; float, pruned or INT8,
// Contract 7) or "gpt" (generate). Inputs: "input", FP32 (as the
// model sees it) or UINT8 (raw pixels: model.config's preprocess scale/mean/std applied),
// shape [N, features] or [N, ...] whose trailing dimensions multiply to the features. Output:
// "logits", FP32 [N, classes].
class ServedModel {
 public:
  // Throws rt::Error when the file cannot be served, or device "cuda" is not usable.
  ServedModel(std::string name, std::string version, std::string path, const std::string& device = "cpu");
  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  const std::string& path() const { return path_; }
  int in_features() const { return in_; }
  bool on_cuda() const { return cuda_; }
  int out_features() const { return out_; }
  const std::string& config_json() const { return config_; }
  const InputSpec& input() const { return input_; }
  // "fp32", "int8" (run by the INT8 kernels) or "int8-weights" (dequantized weights, float
  // arithmetic), for metadata and metrics.
  const std::string& precision() const { return precision_; }
  // A gpt model: served by generate (POST .../generate), not infer; null for an mlp.
  TextGenerator* generator() const { return generator_.get(); }
  // rows x in_features (preprocessed) -> rows x out_features; one caller at a time (the batcher).
  void forward(const float* x, int rows, float* out);

 private:
  std::string name_, version_, path_, config_, precision_ = "fp32";
  int in_ = 0, out_ = 0;
  bool cuda_ = false;
  InputSpec input_;
  std::unique_ptr<rt::Mlp> mlp_;
  std::unique_ptr<rt::QuantMlp> int8_;
  std::unique_ptr<TextGenerator> generator_;
  void check_finite(const std::vector<rt::Param>& params) const;
  void load_gpt(const rt::ModelFile& f, const nlohmann::json& cfg);
};

}  // namespace loom::serve

// model.cpp — loading a served model version, its forward pass and input decoding.
#include "model.hpp"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "loom/rt/io/model_io.hpp"
#include "loom/rt/io/quant_model.hpp"
#include "loom/rt/tensor/ops.hpp"
#include "status.hpp"

namespace loom::serve {

ServedModel::ServedModel(std::string name, std::string version, std::string path, const std::string& device)
    : name_(std::move(name)), version_(std::move(version)), path_(std::move(path)) {
  if (device != "auto" && device != "cpu" && device != "cuda")
    throw rt::Error("--device must be auto, cpu or cuda, not '" + device + "'");
  rt::ModelFile f = rt::load_model(path_);  // verifies every checksum
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(f.config_json);
  } catch (const nlohmann::json::exception& e) {
    throw rt::Error(path_ + ": model.config is not valid JSON: " + e.what());
  }
  if (!cfg.is_object()) throw rt::Error(path_ + ": model.config must be a JSON object");
  const std::string type = cfg.value("type", "");
  if (type == "gpt") {
    if (device == "cuda") throw rt::Error("--device cuda: gpt models are served on the CPU in this build");
    load_gpt(f, cfg);
    config_ = f.config_json;
    return;
  }
  if (type != "mlp")
    throw rt::Error(path_ + ": model type '" + type + "' cannot be served (loom-serve serves types mlp and gpt)");
  precision_ = rt::model_precision(path_, f);
  mlp_ = std::make_unique<rt::Mlp>(rt::load_mlp(path_, f));  // the file is read (and verified) once
  if (precision_ == "int8") int8_ = std::make_unique<rt::QuantMlp>(rt::load_quant_mlp(path_, f));
  in_ = mlp_->widths().front();
  out_ = mlp_->widths().back();
  input_.features = in_;
  check_finite(mlp_->params());
  if (int8_) mlp_.reset();  // checked; the INT8 model serves, without a float copy 4x its size
  if (cfg.contains("preprocess")) {
    const auto& p = cfg["preprocess"];
    try {
      input_.scale = p.value("scale", 1.0f);
      input_.mean = p.value("mean", 0.0f);
      input_.std = p.value("std", 1.0f);
    } catch (const nlohmann::json::exception&) {
      throw rt::Error(path_ + ": model.config preprocess must hold numbers scale, mean and std");
    }
    if (!(input_.std > 0) || !std::isfinite(input_.std) || !std::isfinite(input_.scale) || !std::isfinite(input_.mean))
      throw rt::Error(path_ + ": model.config preprocess has a bad scale, mean or std");
  }
  config_ = f.config_json;
  std::string why;
  cuda_ = device != "cpu" && rt::ops::cuda_usable(&why);
  if (device == "cuda" && !cuda_) throw rt::Error("--device cuda: " + why);
  if (cuda_ && int8_) int8_->to(rt::Device::kCuda);  // cuBLASLt's int8 GEMM
  else if (cuda_) mlp_->to(rt::Device::kCuda);
}

// A model of NaN weights would answer null with 200: refused at load.
void ServedModel::check_finite(const std::vector<rt::Param>& params) const {
  for (const auto& p : params) {
    const float* v = p.value.f32();
    for (int64_t i = 0, n = p.value.numel(); i < n; ++i)
      if (!std::isfinite(v[i])) throw rt::Error(path_ + ": /params/" + p.name + " holds a NaN or infinite weight");
  }
}

// A gpt is served by the generate extension (on the CPU): its vocabulary from vocab_bytes.
void ServedModel::load_gpt(const rt::ModelFile& f, const nlohmann::json& cfg) {
  rt::Gpt gpt = rt::load_gpt(path_, f);
  check_finite(gpt.params());
  std::vector<int> bytes;
  try {
    bytes = cfg.at("vocab_bytes").get<std::vector<int>>();
  } catch (const nlohmann::json::exception&) {
    throw rt::Error(path_ + ": model.config has no vocab_bytes (a gpt exported before byte-level tokens: train it again)");
  }
  generator_ = std::make_unique<TextGenerator>(std::move(gpt), std::move(bytes), path_);
}

void ServedModel::forward(const float* x, int rows, float* out) {
  rt::Tensor in = rt::Tensor::empty({rows, in_});
  std::memcpy(in.f32(), x, static_cast<size_t>(rows) * in_ * sizeof(float));
  if (int8_) {
    const rt::Tensor y = int8_->forward(in);
    std::memcpy(out, y.f32(), static_cast<size_t>(rows) * out_ * sizeof(float));
    return;
  }
  if (cuda_) {
    const rt::Tensor y = mlp_->forward(in.to(rt::Device::kCuda)).to(rt::Device::kCpu);
    std::memcpy(out, y.f32(), static_cast<size_t>(rows) * out_ * sizeof(float));
    return;
  }
  const rt::Tensor& y = mlp_->forward(in);
  std::memcpy(out, y.f32(), static_cast<size_t>(rows) * out_ * sizeof(float));
}

}  // namespace loom::serve

// model.cpp — loading a served model version, its forward pass and input decoding.
#include "model.hpp"

#include <cctype>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "loom/rt/io/model_io.hpp"
#include "loom/rt/tensor/ops.hpp"

namespace loom::serve {

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 128 || s[0] == '.') return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

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
  const std::string type = cfg.value("type", "");
  if (type != "mlp")
    throw rt::Error(path_ + ": model type '" + type + "' cannot be served (loom-serve serves type mlp)");
  mlp_ = std::make_unique<rt::Mlp>(rt::load_mlp(path_, f));  // the file is read (and verified) once
  in_ = mlp_->widths().front();
  out_ = mlp_->widths().back();
  if (cfg.contains("preprocess")) {
    const auto& p = cfg["preprocess"];
    scale_ = p.value("scale", 1.0f);
    mean_ = p.value("mean", 0.0f);
    std_ = p.value("std", 1.0f);
    if (!(std_ > 0) || !std::isfinite(scale_) || !std::isfinite(mean_))
      throw rt::Error(path_ + ": model.config preprocess has a bad scale, mean or std");
  }
  config_ = f.config_json;
  std::string why;
  cuda_ = device != "cpu" && rt::ops::cuda_usable(&why);
  if (device == "cuda" && !cuda_) throw rt::Error("--device cuda: " + why);
  if (cuda_) mlp_->to(rt::Device::kCuda);
}

void ServedModel::forward(const float* x, int rows, float* out) {
  rt::Tensor in = rt::Tensor::empty({rows, in_});
  std::memcpy(in.f32(), x, static_cast<size_t>(rows) * in_ * sizeof(float));
  if (cuda_) {
    const rt::Tensor y = mlp_->forward(in.to(rt::Device::kCuda)).to(rt::Device::kCpu);
    std::memcpy(out, y.f32(), static_cast<size_t>(rows) * out_ * sizeof(float));
    return;
  }
  const rt::Tensor& y = mlp_->forward(in);
  std::memcpy(out, y.f32(), static_cast<size_t>(rows) * out_ * sizeof(float));
}

std::vector<float> decode_input(const ServedModel& m, const std::vector<TensorIn>& inputs, int* rows) {
  if (inputs.empty()) throw ServeError(Status::kBadRequest, "missing input: the model takes one tensor named 'input'");
  if (inputs.size() > 1) throw ServeError(Status::kBadRequest, "the model takes one input ('input'), not " + std::to_string(inputs.size()));
  const TensorIn& t = inputs[0];
  if (t.name != "input") throw ServeError(Status::kBadRequest, "unexpected input '" + t.name + "': the model's input is 'input'");
  if (t.shape.size() < 2) throw ServeError(Status::kBadRequest, "input shape must be [N, " + std::to_string(m.in_features()) + "]");
  int64_t features = 1;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] <= 0 || t.shape[i] > (int64_t{1} << 24))
      throw ServeError(Status::kBadRequest, "input shape has a bad dimension " + std::to_string(t.shape[i]));
    if (i > 0) features *= t.shape[i];
  }
  if (features != m.in_features())
    throw ServeError(Status::kBadRequest, "input shape: each row must hold " + std::to_string(m.in_features()) +
                                              " values, not " + std::to_string(features));
  const int64_t n = t.shape[0];
  const size_t count = static_cast<size_t>(n * features);
  std::vector<float> x(count);
  if (t.datatype == "FP32") {
    if (t.data.size() != count * 4)
      throw ServeError(Status::kBadRequest, "input holds " + std::to_string(t.data.size()) + " bytes, shape and FP32 need " +
                                                std::to_string(count * 4));
    std::memcpy(x.data(), t.data.data(), count * 4);
    for (float v : x)
      if (!std::isfinite(v)) throw ServeError(Status::kBadRequest, "input holds a NaN or infinite value");
  } else if (t.datatype == "UINT8") {
    if (t.data.size() != count)
      throw ServeError(Status::kBadRequest, "input holds " + std::to_string(t.data.size()) + " bytes, shape and UINT8 need " +
                                                std::to_string(count));
    const float scale = m.scale(), mean = m.mean(), inv_std = 1.0f / m.stddev();
    for (size_t i = 0; i < count; ++i)
      x[i] = (static_cast<float>(static_cast<unsigned char>(t.data[i])) * scale - mean) * inv_std;
  } else {
    throw ServeError(Status::kBadRequest, "input datatype " + t.datatype + " is not supported (FP32 or UINT8)");
  }
  *rows = static_cast<int>(n);
  return x;
}

}  // namespace loom::serve

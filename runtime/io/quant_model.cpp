// quant_model.cpp — writing and reading INT8 MLP files.
#include "loom/rt/io/quant_model.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

namespace loom::rt {

namespace {

nlohmann::json parse_config(const std::string& path, const std::string& text) {
  try {
    auto cfg = nlohmann::json::parse(text);
    if (!cfg.is_object()) throw Error(path + ": model.config must be a JSON object");
    return cfg;
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": model.config is not valid JSON: " + e.what());
  }
}

std::vector<QuantizedTensor> weights_of(const QuantMlp& q) {
  std::vector<QuantizedTensor> out;
  for (size_t l = 0; l < q.layers().size(); ++l)
    out.push_back({"fc" + std::to_string(l + 1) + ".weight", q.layers()[l].w, q.layers()[l].w_scale, 0});
  return out;
}

}  // namespace

std::string model_precision(const std::string& path, const ModelFile& f) {
  size_t int8 = 0;
  for (const auto& p : f.params) int8 += p.second.dtype() == DType::kI8;
  const auto cfg = parse_config(path, f.config_json);
  const bool has_quant = cfg.contains("quant");
  if (int8 == 0 && !has_quant) return "fp32";
  if (int8 == 0) throw Error(path + ": model.config has 'quant' but no /params tensor is int8");
  if (!has_quant || !cfg["quant"].is_object())
    throw Error(path + ": /params holds int8 tensors but model.config has no 'quant' object");
  const auto& q = cfg["quant"];
  const std::string act = q.value("activations", "");
  if (act == "float") return "int8-weights";
  if (act == "uint8_affine") return "int8";
  throw Error(path + ": model.config quant.activations must be uint8_affine or float, not '" + act + "'");
}

void save_quant_mlp(const std::string& path, const QuantMlp& q, const std::string& float_config,
                    const std::string& observer, bool per_tensor_weights) {
  auto cfg = parse_config(path, float_config);
  nlohmann::json inputs = nlohmann::json::array();
  for (const auto& l : q.layers()) inputs.push_back({{"scale", l.input.scale}, {"zero_point", l.input.zero_point}});
  cfg["quant"] = {{"weights", per_tensor_weights ? "int8_per_tensor_symmetric" : "int8_per_channel_symmetric"},
                  {"activations", "uint8_affine"},
                  {"act_max", int8::kActMax}, {"observer", observer}, {"inputs", inputs}};
  std::vector<Param> biases;
  for (size_t l = 0; l < q.layers().size(); ++l)
    biases.push_back({"fc" + std::to_string(l + 1) + ".bias", q.layers()[l].bias, Tensor()});
  save_model(path, cfg.dump(), biases, weights_of(q));
}

void save_weight_only_mlp(const std::string& path, const Mlp& m, const std::string& float_config) {
  auto cfg = parse_config(path, float_config);
  cfg["quant"] = {{"weights", "int8_per_channel_symmetric"}, {"activations", "float"}};
  std::vector<int8::QParams> unused(m.widths().size() - 1);
  const QuantMlp q = QuantMlp::quantize(m, unused);
  std::vector<Param> biases;
  for (size_t l = 0; l < q.layers().size(); ++l)
    biases.push_back({"fc" + std::to_string(l + 1) + ".bias", q.layers()[l].bias, Tensor()});
  save_model(path, cfg.dump(), biases, weights_of(q));
}

QuantMlp load_quant_mlp(const std::string& path, const ModelFile& f) {
  if (model_precision(path, f) != "int8") throw Error(path + ": not an INT8 model (weights and activations)");
  const Mlp shape = load_mlp(path, f);  // checks layers against tensors
  const auto cfg = parse_config(path, f.config_json);
  const auto& q = cfg["quant"];
  if (q.value("act_max", 0) != int8::kActMax)
    throw Error(path + ": quant.act_max must be " + std::to_string(int8::kActMax) + " (this build's activation range)");
  const size_t layers = shape.widths().size() - 1;
  if (!q.contains("inputs") || !q["inputs"].is_array() || q["inputs"].size() != layers)
    throw Error(path + ": model.config quant.inputs must hold one {scale, zero_point} per layer (" +
                std::to_string(layers) + ")");
  std::vector<QuantLinear> out;
  for (size_t l = 0; l < layers; ++l) {
    const std::string fc = "fc" + std::to_string(l + 1);
    QuantLinear ql;
    for (const auto& p : f.params) {
      if (p.first == fc + ".weight") ql.w = p.second;
      if (p.first == fc + ".bias") ql.bias = p.second;
    }
    if (ql.w.dtype() != DType::kI8) throw Error(path + ": /params/" + fc + ".weight is not int8");
    if (ql.bias.dtype() != DType::kF32) throw Error(path + ": /params/" + fc + ".bias must stay float32");
    if (f.zero_points.at(fc + ".weight") != 0) throw Error(path + ": /params/" + fc + ".weight must be symmetric (zero_point 0)");
    ql.w_scale = f.scales.at(fc + ".weight");
    try {
      ql.input.scale = q["inputs"][l].at("scale").get<float>();
      ql.input.zero_point = q["inputs"][l].at("zero_point").get<int>();
    } catch (const nlohmann::json::exception& e) {
      throw Error(path + ": model.config quant.inputs[" + std::to_string(l) + "] is not valid: " + e.what());
    }
    out.push_back(std::move(ql));
  }
  try {
    return QuantMlp(shape.widths(), std::move(out));
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace loom::rt

// quant_model.cpp — writing and reading INT8 MLP files.
#include "loom/rt/io/quant_model.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include "loom/rt/io/json.hpp"

namespace loom::rt {

namespace {

nlohmann::json parse_config(const std::string& path, const std::string& text) {
  try {
    auto cfg = parse_json_text(text, path + ": model.config");
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
  if (act == "uint8_affine" || act == "uint8_dynamic_per_row") return "int8";
  throw Error(path + ": model.config quant.activations must be uint8_affine, uint8_dynamic_per_row or float, not '" + act +
              "'");
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

bool is_gpt_linear(const std::string& name) {
  auto ends = [&](const char* tail) {
    const size_t n = std::char_traits<char>::length(tail);
    return name.size() >= n && name.compare(name.size() - n, n, tail) == 0;
  };
  return name == "lm_head.weight" || (name.rfind("h.", 0) == 0 && (ends(".attn.c_attn.weight") || ends(".attn.c_proj.weight") ||
                                                                   ends(".mlp.c_fc.weight") || ends(".mlp.c_proj.weight")));
}

void save_quant_gpt(const std::string& path, Gpt& gpt, const std::string& float_config, bool weights_only) {
  auto cfg = parse_config(path, float_config);
  cfg["quant"] = {{"weights", "int8_per_channel_symmetric"},
                  {"activations", weights_only ? "float" : "uint8_dynamic_per_row"},
                  {"act_max", int8::kActMax}};
  std::vector<Param> floats;
  std::vector<QuantizedTensor> ints;
  for (const auto& p : gpt.params()) {
    if (!is_gpt_linear(p.name)) {
      floats.push_back({p.name, p.value, Tensor()});
      continue;
    }
    const int rows = static_cast<int>(p.value.dim(0)), cols = static_cast<int>(p.value.dim(1));
    QuantizedTensor q{p.name, Tensor::empty({rows, cols}, DType::kI8), int8::symmetric_scales(p.value.f32(), rows, cols), 0};
    int8::quantize_per_channel(p.value.f32(), rows, cols, q.scale.data(), q.q.data<int8_t>());
    ints.push_back(std::move(q));
  }
  save_model(path, cfg.dump(), floats, ints);
}

DecoderWeights gpt_decoder(const std::string& path, const ModelFile& f, Gpt& gpt) {
  DecoderWeights w = decoder_from_gpt(gpt);
  const std::string precision = model_precision(path, f);
  if (precision != "int8") return w;
  const auto cfg = parse_config(path, f.config_json);
  if (cfg["quant"].value("activations", "") != "uint8_dynamic_per_row")
    throw Error(path + ": a gpt's int8 activations are quantized per row as they come (uint8_dynamic_per_row)");
  auto int8_of = [&](const std::string& name, Tensor& dense) {
    auto it = std::find_if(f.params.begin(), f.params.end(), [&](const auto& p) { return p.first == name; });
    if (it->second.dtype() != DType::kI8) throw Error(path + ": /params/" + name + " must be int8 in an INT8 gpt");
    if (f.zero_points.at(name) != 0) throw Error(path + ": /params/" + name + " must be symmetric (zero_point 0)");
    const Tensor& q = it->second;
    try {
      auto lin = std::make_shared<const int8::DynamicLinear>(static_cast<int>(q.dim(0)), static_cast<int>(q.dim(1)), q.data<int8_t>(),
                                                             f.scales.at(name));
      dense = Tensor();  // the int8 weights serve; no float copy 4x their size
      return lin;
    } catch (const Error& e) {
      throw Error(path + ": /params/" + name + ": " + e.what());
    }
  };
  for (size_t l = 0; l < w.layers.size(); ++l) {
    DecoderLayer& L = w.layers[l];
    const std::string h = "h." + std::to_string(l) + ".";
    L.q_qkv = int8_of(h + "attn.c_attn.weight", L.w_qkv);
    L.q_o = int8_of(h + "attn.c_proj.weight", L.w_o);
    L.q_fc = int8_of(h + "mlp.c_fc.weight", L.w_fc);
    L.q_p = int8_of(h + "mlp.c_proj.weight", L.w_p);
  }
  w.q_lm_head = int8_of("lm_head.weight", w.lm_head);
  return w;
}

}  // namespace loom::rt

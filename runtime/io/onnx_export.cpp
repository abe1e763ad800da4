// onnx_export.cpp — HDF5 model file -> ONNX: each fcN layer's weight (float, or int8 with its
// per-channel scales), its bias, the INT8 model's input quantization, and the preprocessing.
#include "loom/rt/io/onnx_export.hpp"

#include <nlohmann/json.hpp>

#include "loom/rt/io/model_io.hpp"
#include "loom/rt/io/quant_model.hpp"

#ifdef LOOM_HAVE_ONNX
#include "loom/rt/graph/export.hpp"
#endif

namespace loom::rt {

#ifdef LOOM_HAVE_ONNX
bool onnx_export_available() { return true; }

namespace {

const Tensor& param(const ModelFile& f, const std::string& name, const std::string& path) {
  for (const auto& p : f.params)
    if (p.first == name) return p.second;
  throw Error(path + ": /params/" + name + " is missing");
}

void export_file(const std::string& h5_path, const std::string& onnx_path, const std::string& producer) {
  const ModelFile f = load_model(h5_path);
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(f.config_json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(h5_path + ": model.config is not valid JSON: " + e.what());
  }
  if (cfg.value("type", "") != "mlp")
    throw Error(h5_path + ": only mlp models export to ONNX (this is a '" + cfg.value("type", "") + "')");
  const std::string precision = model_precision(h5_path, f);
  std::vector<int8::QParams> inputs;
  if (precision == "int8") {
    const QuantMlp q = load_quant_mlp(h5_path, f);
    for (const auto& l : q.layers()) inputs.push_back(l.input);
  }
  graph::MlpGraph g;
  g.producer = producer;
  const size_t layers = cfg.at("layers").size() - 1;
  for (size_t l = 0; l < layers; ++l) {
    const std::string p = "fc" + std::to_string(l + 1);
    graph::MlpLayer L;
    L.weight = param(f, p + ".weight", h5_path);
    L.bias = param(f, p + ".bias", h5_path);
    if (L.weight.dtype() == DType::kI8) L.w_scale = f.scales.at(p + ".weight");
    if (!inputs.empty()) {
      L.quant_input = true;
      L.in_scale = inputs[l].scale;
      L.in_zero = inputs[l].zero_point;
      L.in_max = cfg.at("quant").value("act_max", int8::kActMax);
    }
    g.layers.push_back(L);
  }
  if (cfg.contains("preprocess")) {
    g.pixels = true;
    g.scale = cfg["preprocess"].value("scale", 1.0f);
    g.mean = cfg["preprocess"].value("mean", 0.0f);
    g.std = cfg["preprocess"].value("std", 1.0f);
  }
  graph::write_mlp_onnx(onnx_path, g);
}

}  // namespace

void export_onnx(const std::string& h5_path, const std::string& onnx_path, const std::string& producer) {
  try {
    export_file(h5_path, onnx_path, producer);
  } catch (const nlohmann::json::exception& e) {
    throw Error(h5_path + ": model.config does not describe an mlp: " + e.what());
  } catch (const std::out_of_range&) {
    throw Error(h5_path + ": an int8 weight has no scales");
  }
}

#else
bool onnx_export_available() { return false; }

void export_onnx(const std::string&, const std::string& onnx_path, const std::string&) {
  throw Error(onnx_path + ": this build writes no ONNX (configure found no libonnx-dev); nothing written");
}
#endif

}  // namespace loom::rt

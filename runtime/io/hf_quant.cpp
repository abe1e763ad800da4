// hf_quant.cpp — compressed-tensors' int8 scheme read from config.json, and int8 layers from the weights.
#include "loom/rt/io/hf_quant.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/rt/error.hpp"
#include "loom/rt/io/text.hpp"

namespace loom::rt {

namespace {

constexpr const char* kServed = "loom-serve runs compressed-tensors int8: int-quantized weights per channel or tensor, "
                                "activations per token, dynamic";

// `field` of a quantization argument object must equal `want` (absent counts as `fallback`).
void expect(const nlohmann::json& o, const char* field, const nlohmann::json& want, const nlohmann::json& fallback,
            const std::string& where) {
  const nlohmann::json v = o.contains(field) ? o[field] : fallback;
  if (v != want) throw Error(where + "." + field + " is " + visible_text(v.dump()) + ": " + kServed);
}

void check_weights(const nlohmann::json& w, const std::string& where) {
  if (!w.is_object()) throw Error(where + " must be an object");
  expect(w, "num_bits", 8, nullptr, where);
  expect(w, "type", "int", "int", where);
  expect(w, "symmetric", true, true, where);
  expect(w, "dynamic", false, false, where);
  const std::string s = w.value("strategy", "");
  if (s != "channel" && s != "tensor") throw Error(where + ".strategy is '" + visible_text(s) + "': " + kServed);
}

void check_inputs(const nlohmann::json& a, const std::string& where) {
  if (a.is_null())
    throw Error(where + " is null (int8 weights with 16-bit activations): " + kServed);
  if (!a.is_object()) throw Error(where + " must be an object");
  expect(a, "num_bits", 8, nullptr, where);
  expect(a, "type", "int", "int", where);
  expect(a, "strategy", "token", nullptr, where);
  expect(a, "dynamic", true, false, where);
}

}  // namespace

bool read_int8_scheme(const ConfigJson& j) {
  if (!j.has("quantization_config")) return false;
  const nlohmann::json& q = j.json()["quantization_config"];
  const std::string at = j.path() + ": quantization_config";
  if (!q.is_object()) throw Error(at + " must be an object");
  const std::string method = q.value("quant_method", "");
  if (method != "compressed-tensors") throw Error(at + ".quant_method is '" + visible_text(method) + "': " + kServed);
  if (q.contains("kv_cache_scheme") && !q["kv_cache_scheme"].is_null()) throw Error(at + ".kv_cache_scheme is set: the KV cache is kept in float32");
  if (q.contains("sparsity_config") && !q["sparsity_config"].is_null() && !q["sparsity_config"].empty())
    throw Error(at + ".sparsity_config is set: sparse weights are not read");
  const auto& groups = q.contains("config_groups") ? q["config_groups"] : nlohmann::json();
  if (!groups.is_object() || groups.empty()) throw Error(at + ".config_groups must name at least one group");
  for (auto g = groups.begin(); g != groups.end(); ++g) {
    const std::string where = at + ".config_groups." + visible_text(g.key());
    if (!g->is_object()) throw Error(where + " must be an object");
    const std::string format = g->value("format", q.value("format", ""));
    if (format != "int-quantized") throw Error(where + " format is '" + visible_text(format) + "': " + kServed);
    check_weights(g->contains("weights") ? (*g)["weights"] : nlohmann::json(), where + ".weights");
    check_inputs(g->contains("input_activations") ? (*g)["input_activations"] : nlohmann::json(), where + ".input_activations");
    if (g->contains("output_activations") && !(*g)["output_activations"].is_null())
      throw Error(where + ".output_activations is set: " + kServed);
  }
  return true;
}

nlohmann::json int8_quantization_config() {
  const nlohmann::json weights = {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "channel"},
                                  {"dynamic", false}, {"group_size", nullptr}, {"observer", "minmax"}};
  // Loom quantizes each input row affinely as it comes (asymmetric, 7 bits of range; int8.hpp).
  const nlohmann::json inputs = {{"num_bits", 8}, {"type", "int"}, {"symmetric", false}, {"strategy", "token"}, {"dynamic", true}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "int-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", inputs},
                                          {"output_activations", nullptr}}}}},
          {"ignore", {"lm_head"}},
          {"kv_cache_scheme", nullptr}};
}

Int8Linear read_int8_linear(HfWeights& r, const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts) {
  std::vector<int8_t> w;
  std::vector<float> scale;
  const int64_t in = parts[0].second[1];
  for (const auto& [name, shape] : parts) {
    const std::string file = r.file_of(name);
    if (r.entry(name).dtype != "I8")
      throw Error(file + ": tensor '" + name + "' is " + r.entry(name).dtype + " where the layer's other parts are I8");
    const std::vector<uint8_t> b = r.raw(name, shape);
    w.insert(w.end(), reinterpret_cast<const int8_t*>(b.data()), reinterpret_cast<const int8_t*>(b.data()) + b.size());
    const std::string s = name + "_scale", zp = name + "_zero_point";
    if (!r.has(s)) throw Error(file + ": int8 tensor '" + name + "' has no '" + s + "'");
    const auto& ss = r.entry(s).shape;
    const bool per_tensor = ss == std::vector<int64_t>{1} || ss.empty();
    if (!per_tensor && ss != std::vector<int64_t>{shape[0], 1} && ss != std::vector<int64_t>{shape[0]})
      throw Error(r.file_of(s) + ": tensor '" + s + "' has shape " + shape_text(ss) + ", not [" + std::to_string(shape[0]) + ", 1] or [1]");
    const Tensor t = r.get(s, ss);
    for (int64_t i = 0; i < shape[0]; ++i) {
      const float v = t.f32()[per_tensor ? 0 : i];
      if (!(v > 0) || !std::isfinite(v)) throw Error(r.file_of(s) + ": tensor '" + s + "' holds a scale that is not positive");
      scale.push_back(v);
    }
    if (r.has(zp)) {
      const std::vector<uint8_t> z = r.raw(zp, r.entry(zp).shape);
      if (std::any_of(z.begin(), z.end(), [](uint8_t v) { return v != 0; }))
        throw Error(r.file_of(zp) + ": tensor '" + zp + "' is not zero: int8 weights are read symmetric");
    }
  }
  const int rows = static_cast<int>(scale.size());
  try {
    return std::make_shared<const int8::DynamicLinear>(rows, static_cast<int>(in), w.data(), std::move(scale));
  } catch (const Error& e) {
    throw Error(r.file_of(parts[0].first) + ": tensor '" + parts[0].first + "': " + e.what());
  }
}

}  // namespace loom::rt

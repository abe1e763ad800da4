// model_io.cpp — the model file: parameters (float32 or int8 with their scales) and the model's
// config, written atomically and read with every checksum verified (HDF5 plumbing: h5.hpp).
#include "loom/rt/io/model_io.hpp"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "loom/rt/io/json.hpp"
#include "h5.hpp"

namespace loom::rt {

using namespace h5;

void save_model(const std::string& path, const std::string& config_json, const std::vector<Param>& params) {
  save_model(path, config_json, params, {});
}

void save_model(const std::string& path, const std::string& config_json, const std::vector<Param>& params,
                const std::vector<QuantizedTensor>& quantized) {
  std::vector<Blob> blobs;
  for (const auto& q : quantized) {
    LOOM_CHECK(q.q.dtype() == DType::kI8 && q.q.ndim() >= 1 && q.scale.size() == static_cast<size_t>(q.q.dim(0)),
               "int8 tensor " + q.name + " needs one scale per output channel");
    blobs.push_back({"params/" + q.name, q.q.shape(), q.q.data<int8_t>(), false, &q});
  }
  for (const auto& p : params) blobs.push_back({"params/" + p.name, p.value.shape(), p.value.f32(), false});
  write_h5_atomic(path, {{"loom.format", "model"}, {"model.config", config_json}}, blobs);
}

ModelFile load_model(const std::string& path) {
  ModelFile m;
  H5Handle file(open_loom_file(path, &m.format), H5Fclose);
  m.version = kFormatVersion;
  m.config_json = read_string_attr(file, "model.config", path);
  m.params = read_group(file, "params", path, true, &m.unchecked, &m);
  return m;
}

Tensor dequantize(const ModelFile& f, const std::string& name, const Tensor& q) {
  const auto& scale = f.scales.at(name);
  const int zp = f.zero_points.at(name);
  Tensor t = Tensor::empty(q.shape());
  const int64_t per = q.numel() / q.dim(0);
  for (int64_t i = 0; i < q.numel(); ++i)
    t.f32()[i] = static_cast<float>(q.data<int8_t>()[i] - zp) * scale[static_cast<size_t>(i / per)];
  return t;
}

namespace {

// Copies the file's tensors into `params`, by name, checking shapes and that nothing is left over.
void assign_params(const std::string& path, const ModelFile& f, std::vector<Param>& params) {
  for (auto& p : params) {
    auto it = std::find_if(f.params.begin(), f.params.end(), [&](const auto& q) { return q.first == p.name; });
    if (it == f.params.end()) throw Error(path + ": missing /params/" + p.name);
    if (it->second.shape() != p.value.shape())
      throw Error(path + ": /params/" + p.name + " has shape " + it->second.shape_str() + ", expected " +
                  p.value.shape_str());
    p.value = it->second.dtype() == DType::kI8 ? dequantize(f, it->first, it->second) : it->second;
  }
  if (f.params.size() != params.size()) throw Error(path + ": /params holds tensors the model does not have");
}

nlohmann::json config_of(const std::string& path, const ModelFile& f, const char* type) {
  try {
    auto cfg = parse_json_text(f.config_json, path + ": model.config");
    if (cfg.at("type") != type) throw Error(path + ": model type " + cfg.at("type").dump() + " is not " + type);
    return cfg;
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": model.config is not valid: " + e.what());
  }
}

}  // namespace

Mlp load_mlp(const std::string& path) { return load_mlp(path, load_model(path)); }

Mlp load_mlp(const std::string& path, const ModelFile& f) {
  auto cfg = config_of(path, f, "mlp");
  std::vector<int> widths;
  try {
    for (const auto& w : cfg.at("layers")) widths.push_back(w.get<int>());
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": model.config layers are not valid: " + e.what());
  }
  if (widths.size() < 2) throw Error(path + ": model.config has fewer than two layer widths");
  // The file's tensors (already read, so bounded by the file) must be the config's layers
  // before the model is built: a config of 5000 wide layers must not allocate gigabytes.
  if (f.params.size() != 2 * (widths.size() - 1))
    throw Error(path + ": model.config says " + std::to_string(widths.size() - 1) + " layers but /params holds " +
                std::to_string(f.params.size()) + " tensors");
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    if (widths[i] <= 0) throw Error(path + ": model.config layers must be positive widths");
    const std::string fc = "fc" + std::to_string(i + 1);
    const std::vector<std::vector<int64_t>> want{{widths[i + 1], widths[i]}, {widths[i + 1]}};
    const char* part[] = {".weight", ".bias"};
    for (int k = 0; k < 2; ++k) {
      auto it = std::find_if(f.params.begin(), f.params.end(), [&](const auto& q) { return q.first == fc + part[k]; });
      if (it == f.params.end()) throw Error(path + ": missing /params/" + fc + part[k]);
      if (it->second.shape() != want[static_cast<size_t>(k)])
        throw Error(path + ": /params/" + fc + part[k] + " has shape " + it->second.shape_str() +
                    ", but model.config's layers need [" + std::to_string(widths[i + 1]) +
                    (k == 0 ? "," + std::to_string(widths[i]) : std::string()) + "]");
    }
  }
  Mlp m(widths, 0);
  assign_params(path, f, m.params());
  return m;
}

Gpt load_gpt(const std::string& path) { return load_gpt(path, load_model(path)); }

Gpt load_gpt(const std::string& path, const ModelFile& f) {
  auto cfg = config_of(path, f, "gpt");
  GptConfig g;
  try {
    g.vocab = cfg.at("vocab").get<int>();
    g.context = cfg.at("context").get<int>();
    g.layers = cfg.at("layers").get<int>();
    g.heads = cfg.at("heads").get<int>();
    g.embd = cfg.at("embd").get<int>();
    g.dropout = cfg.value("dropout", 0.0f);
    g.head_size = cfg.value("head_size", 0);
    g.inner = cfg.value("inner", 0);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": model.config is not a valid gpt configuration: " + e.what());
  }
  // The model the config describes must be about the size of the tensors stored (already read,
  // bounded by the file) before it is built.
  if (g.vocab <= 0 || g.context <= 0 || g.layers <= 0 || g.heads <= 0 || g.embd <= 0 || g.head_size < 0 || g.inner < 0)
    throw Error(path + ": model.config's gpt sizes must be positive");
  if (!g.head_size && g.embd % g.heads)
    throw Error(path + ": model.config's embd " + std::to_string(g.embd) + " is not a multiple of heads " + std::to_string(g.heads));
  int64_t stored = 0;
  for (const auto& p : f.params) stored += p.second.numel();
  const double described = (static_cast<double>(g.vocab) + g.context) * g.embd +
                           g.layers * (4.0 * g.embd * g.heads * g.hs() + 2.0 * g.embd * g.ff());
  if (described > 2.0 * static_cast<double>(stored) + 1e6)
    throw Error(path + ": model.config describes a gpt of about " + std::to_string(static_cast<int64_t>(described)) +
                " parameters but /params holds " + std::to_string(stored));
  Gpt m(g, 0);
  assign_params(path, f, m.params());
  return m;
}

}  // namespace loom::rt

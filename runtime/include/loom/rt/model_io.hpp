// model_io.hpp — the HDF5 model file of Contract 4: root attributes loom.format, loom.version
// and model.config (JSON), /params/<name> float32 datasets with Fletcher32 checksums, written
// under a temporary name, fsync'd (file and folder) and renamed.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "loom/rt/gpt.hpp"
#include "loom/rt/mlp.hpp"

namespace loom::rt {

constexpr int kFormatVersion = 1;

void save_model(const std::string& path, const std::string& config_json, const std::vector<Param>& params);

struct ModelFile {
  std::string format;       // "model" or "checkpoint"
  int version = 0;
  std::string config_json;
  std::vector<std::pair<std::string, Tensor>> params;
};
// Throws Error for a missing, truncated or corrupt file (checksums verified), or a wrong version.
ModelFile load_model(const std::string& path);

// An MLP built from a model file: widths from model.config, weights by state_dict name.
// Throws Error when the file is not an MLP or a tensor is missing or of the wrong shape.
Mlp load_mlp(const std::string& path);
// A GPT built from a model file (type "gpt"); the same checks as load_mlp.
Gpt load_gpt(const std::string& path);

}  // namespace loom::rt

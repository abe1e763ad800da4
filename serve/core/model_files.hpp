// model_files.hpp — what kind of model file a path names, by its suffix: one test for the
// repository scan, the spec reader and the loader.
#pragma once

#include <string>

namespace loom::serve {

inline bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
inline bool is_onnx_file(const std::string& path) { return ends_with(path, ".onnx"); }
inline bool is_h5_file(const std::string& path) { return ends_with(path, ".h5"); }
// A Hugging Face folder's weights: model.safetensors or model.safetensors.index.json (its
// shards), with config.json (and a tokenizer) beside it.
inline bool is_safetensors_file(const std::string& path) {
  return ends_with(path, ".safetensors") || ends_with(path, "/model.safetensors.index.json") || path == "model.safetensors.index.json";
}

}  // namespace loom::serve

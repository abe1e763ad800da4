// hf_weights.hpp — a Hugging Face folder's weights: model.safetensors, or the shards that
// model.safetensors.index.json names (weight_map: tensor -> shard file). Every shard the index
// names must exist in the folder and hold the tensors the index gives it, and hold no tensor the
// index does not name; a tensor the model does not use, or a shape that disagrees with the
// config, is refused naming the file and the tensor.
#pragma once

#include <climits>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "loom/rt/io/safetensors.hpp"
#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt {

class HfWeights {
 public:
  // rename: a file's tensor name -> the name the model asks for, or "" for a buffer to ignore
  // (GPT-2's attention masks, rotary_emb.inv_freq).
  HfWeights(const std::string& folder, const std::function<std::string(const std::string&)>& rename);
  // The index file, or model.safetensors: the file a load line and an error name.
  const std::string& file() const { return file_; }
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  // The tensor as float32, checked against `want` and for NaN or infinite values.
  Tensor get(const std::string& name, const std::vector<int64_t>& want);
  // A 2-D BF16 or F16 tensor's raw values appended to *out, checked like get(); false (nothing
  // read) for F32.
  bool get16(const std::string& name, const std::vector<int64_t>& want, std::vector<uint16_t>* out, bool* bf16);
  // A tensor's dtype and shape as stored (throws for a name the folder lacks).
  const SafetensorsEntry& entry(const std::string& name) const;
  // A tensor's bytes as stored, checked against `want`; marks it used.
  std::vector<uint8_t> raw(const std::string& name, const std::vector<int64_t>& want);
  // Every tensor's name, in order.
  std::vector<std::string> names() const;
  // The shard file that holds a tensor: the file an error names.
  std::string file_of(const std::string& name) const;
  // Throws naming the first tensor no get() asked for.
  void check_all_used() const;
  uint64_t bytes() const { return bytes_; }  // of every tensor, as stored

 private:
  struct Place {
    size_t shard;
    std::string stored;  // its name in the file
  };
  std::string folder_, file_;
  std::vector<std::unique_ptr<Safetensors>> shards_;
  std::vector<std::string> shard_names_;
  std::map<std::string, Place> where_;
  std::set<std::string> used_;
  uint64_t bytes_ = 0;
};

std::string shape_text(const std::vector<int64_t>& s);

// A folder's config.json (at most 1 MiB), its fields read with their ranges checked: each
// getter throws Error naming the file, the field and what it must be.
class ConfigJson {
 public:
  explicit ConfigJson(const std::string& path);
  const std::string& path() const { return path_; }
  const nlohmann::json& json() const { return j_; }
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  // `key` (or `alt` where key is absent); `fallback` where both are absent and fallback >= lo.
  int integer(const char* key, int lo, int hi, int fallback = INT32_MIN, const char* alt = nullptr) const;
  double number(const char* key, double lo, double hi, double fallback) const;
  bool boolean(const char* key, bool fallback) const;
  std::string string(const char* key, const std::string& fallback) const;

 private:
  std::string path_;
  nlohmann::json j_;
};

}  // namespace loom::rt

// hf_weights.cpp — model.safetensors or its shards, read through the index and checked against it.
#include "loom/rt/io/hf_weights.hpp"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "loom/rt/error.hpp"
#include "loom/rt/io/json.hpp"
#include "loom/rt/io/text.hpp"
#include "loom/rt/tensor/finite.hpp"

namespace loom::rt {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

namespace {

std::string read_limited(const std::string& path, size_t most) {
  std::string text;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(path + ": cannot read");
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() <= most) text.append(buf, n);
  std::fclose(f);
  if (text.size() > most) throw Error(path + ": larger than " + std::to_string(most >> 20) + " MiB");
  return text;
}

}  // namespace

ConfigJson::ConfigJson(const std::string& path) : path_(path), j_(parse_json_text(read_limited(path, 1u << 20), path)) {
  if (!j_.is_object()) throw Error(path + ": must be a JSON object");
}

int ConfigJson::integer(const char* key, int lo, int hi, int fallback, const char* alt) const {
  const char* k = has(key) ? key : alt && has(alt) ? alt : nullptr;
  if (!k) {
    if (fallback >= lo) return fallback;
    throw Error(path_ + ": no " + key);
  }
  const auto& v = j_[k];
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    throw Error(path_ + ": " + k + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", not " + visible_text(v.dump()));
  return static_cast<int>(v.get<int64_t>());
}

double ConfigJson::number(const char* key, double lo, double hi, double fallback) const {
  if (!has(key)) return fallback;
  const auto& v = j_[key];
  if (!v.is_number() || !(v.get<double>() >= lo && v.get<double>() <= hi))
    throw Error(path_ + ": " + key + " must be a number from " + std::to_string(lo) + " to " + std::to_string(hi) + ", not " + visible_text(v.dump()));
  return v.get<double>();
}

bool ConfigJson::boolean(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!j_[key].is_boolean()) throw Error(path_ + ": " + key + " must be true or false, not " + visible_text(j_[key].dump()));
  return j_[key].get<bool>();
}

std::string ConfigJson::string(const char* key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  if (!j_[key].is_string()) throw Error(path_ + ": " + key + " must be a string, not " + visible_text(j_[key].dump()));
  return j_[key].get<std::string>();
}

namespace {

bool is_file(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A shard's name: a plain file name in the folder, never a path out of it.
bool plain_name(const std::string& n) {
  return !n.empty() && n.size() < 256 && n.find('/') == std::string::npos && n != "." && n != ".." && n.find('\0') == std::string::npos;
}

std::map<std::string, std::string> read_index(const std::string& path) {
  const nlohmann::json j = parse_json_text(read_limited(path, 64u << 20), path);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error(path + ": no weight_map (an object naming each tensor's shard)");
  std::map<std::string, std::string> m;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it->is_string() || !plain_name(it->get<std::string>()))
      throw Error(path + ": weight_map gives tensor '" + visible_text(it.key()) + "' the shard " + visible_text(it->dump()) +
                  ", not a file name in the folder");
    m[it.key()] = it->get<std::string>();
  }
  if (m.empty()) throw Error(path + ": weight_map names no tensor");
  return m;
}

}  // namespace

HfWeights::HfWeights(const std::string& folder, const std::function<std::string(const std::string&)>& rename) : folder_(folder) {
  const std::string index = folder + "/model.safetensors.index.json";
  std::map<std::string, std::string> map;  // stored name -> shard file
  if (is_file(index)) {
    file_ = index;
    map = read_index(index);
    std::map<std::string, size_t> shard_of;
    for (const auto& e : map) {
      if (shard_of.count(e.second)) continue;
      const std::string p = folder + "/" + e.second;
      if (!is_file(p)) throw Error(index + ": names the shard " + e.second + " (for '" + visible_text(e.first) + "'), which the folder does not hold");
      shard_of[e.second] = shards_.size();
      shards_.push_back(std::make_unique<Safetensors>(p));
      shard_names_.push_back(e.second);
    }
    for (size_t s = 0; s < shards_.size(); ++s)
      for (const auto& t : shards_[s]->entries()) {
        auto it = map.find(t.first);
        if (it == map.end() || it->second != shard_names_[s])
          throw Error(folder + "/" + shard_names_[s] + ": holds tensor '" + visible_text(t.first) + "', which " + index +
                      (it == map.end() ? " does not name" : " places in " + it->second));
      }
    for (const auto& e : map)
      if (!shards_[shard_of[e.second]]->has(e.first))
        throw Error(index + ": tensor '" + visible_text(e.first) + "' should be in " + e.second + ", which does not hold it");
  } else {
    file_ = folder + "/model.safetensors";
    if (!is_file(file_)) throw Error(folder + ": no model.safetensors or model.safetensors.index.json");
    shards_.push_back(std::make_unique<Safetensors>(file_));
    shard_names_.push_back("model.safetensors");
    for (const auto& t : shards_[0]->entries()) map[t.first] = "model.safetensors";
  }
  std::map<std::string, size_t> index_of;
  for (size_t s = 0; s < shard_names_.size(); ++s) index_of[shard_names_[s]] = s;
  for (const auto& e : map) {
    const size_t s = index_of.at(e.second);
    bytes_ += shards_[s]->entries().at(e.first).end - shards_[s]->entries().at(e.first).begin;
    const std::string n = rename(e.first);
    if (n.empty()) continue;
    if (!where_.emplace(n, Place{s, e.first}).second)
      throw Error(file_ + ": tensor '" + visible_text(n) + "' appears twice (as '" + visible_text(where_.at(n).stored) + "' and '" + visible_text(e.first) + "')");
  }
}

Tensor HfWeights::get(const std::string& name, const std::vector<int64_t>& want) {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error(file_ + ": no tensor '" + name + "'");
  used_.insert(name);
  const Safetensors& st = *shards_[it->second.shard];
  const std::string where = folder_ + "/" + shard_names_[it->second.shard];
  const auto& shape = st.entries().at(it->second.stored).shape;
  if (shape != want)
    throw Error(where + ": tensor '" + it->second.stored + "' has shape " + shape_text(shape) + " where config.json gives " + shape_text(want));
  Tensor t = st.tensor(it->second.stored);
  if (!cpu::all_finite(t.f32(), t.numel())) throw Error(where + ": tensor '" + it->second.stored + "' holds a NaN or infinite weight");
  return t;
}

bool HfWeights::get16(const std::string& name, const std::vector<int64_t>& want, std::vector<uint16_t>* out, bool* bf16) {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error(file_ + ": no tensor '" + name + "'");
  const Safetensors& st = *shards_[it->second.shard];
  const std::string& dt = st.entries().at(it->second.stored).dtype;
  if (dt != "BF16" && dt != "F16") return false;
  const std::string where = folder_ + "/" + shard_names_[it->second.shard];
  const auto& shape = st.entries().at(it->second.stored).shape;
  if (shape != want)
    throw Error(where + ": tensor '" + it->second.stored + "' has shape " + shape_text(shape) + " where config.json gives " + shape_text(want));
  used_.insert(name);
  const size_t from = out->size();
  st.raw16(it->second.stored, out, bf16);
  const uint16_t exp = *bf16 ? 0x7F80 : 0x7C00;  // all exponent bits set: an infinity or a NaN
  for (size_t i = from; i < out->size(); ++i)
    if (((*out)[i] & exp) == exp) throw Error(where + ": tensor '" + it->second.stored + "' holds a NaN or infinite weight");
  return true;
}

const SafetensorsEntry& HfWeights::entry(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error(file_ + ": no tensor '" + name + "'");
  return shards_[it->second.shard]->entries().at(it->second.stored);
}

std::string HfWeights::file_of(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? file_ : folder_ + "/" + shard_names_[it->second.shard];
}

std::vector<uint8_t> HfWeights::raw(const std::string& name, const std::vector<int64_t>& want) {
  const auto& shape = entry(name).shape;
  const auto& place = where_.at(name);
  if (shape != want)
    throw Error(file_of(name) + ": tensor '" + place.stored + "' has shape " + shape_text(shape) + " where config.json gives " + shape_text(want));
  used_.insert(name);
  return shards_[place.shard]->raw(place.stored);
}

std::vector<std::string> HfWeights::names() const {
  std::vector<std::string> n;
  for (const auto& e : where_) n.push_back(e.first);
  return n;
}

void HfWeights::check_all_used() const {
  for (const auto& n : where_)
    if (!used_.count(n.first))
      throw Error(folder_ + "/" + shard_names_[n.second.shard] + ": tensor '" + visible_text(n.second.stored) + "' is not a parameter of the model config.json describes");
}

}  // namespace loom::rt

// safetensors.cpp — the header checked field by field, tensors read on demand as float32.
#include "loom/rt/io/safetensors.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "loom/rt/io/json.hpp"
#include "loom/rt/io/text.hpp"
#include "loom/rt/error.hpp"

namespace loom::rt {

int safetensors_dtype_bytes(const std::string& d) {
  static const std::map<std::string, int> sizes = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                                   {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1},
                                                   {"U16", 2}, {"U32", 4}, {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  auto it = sizes.find(d);
  return it == sizes.end() ? 0 : it->second;
}

namespace {

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

File open(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) throw Error(path + ": cannot open: " + std::strerror(errno));
  return f;
}

void read_at(FILE* f, uint64_t at, void* out, size_t n, const std::string& path) {
  if (fseeko(f, static_cast<off_t>(at), SEEK_SET) != 0 || std::fread(out, 1, n, f) != n)
    throw Error(path + ": cannot read " + std::to_string(n) + " bytes at " + std::to_string(at));
}

SafetensorsEntry entry(const std::string& name, const nlohmann::json& v, uint64_t data_len, const std::string& path) {
  const std::string where = path + ": tensor '" + name + "'";
  if (!v.is_object()) throw Error(where + ": its header entry is not an object");
  SafetensorsEntry e;
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string() || safetensors_dtype_bytes(dt->get<std::string>()) == 0)
    throw Error(where + ": dtype missing or unknown");
  e.dtype = dt->get<std::string>();
  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array() || sh->size() > 8) throw Error(where + ": shape must be a list of at most 8 dims");
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 40)) throw Error(where + ": shape " + visible_text(sh->dump()) + " is not a list of sizes");
    e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    numel = d.get<uint64_t>() == 0 ? 0 : numel * d.get<uint64_t>();
    if (numel > (1ull << 40)) throw Error(where + ": shape " + visible_text(sh->dump()) + " is too large");
  }
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    throw Error(where + ": data_offsets must be [begin, end]");
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  if (e.begin > e.end || e.end > data_len)
    throw Error(where + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                "] lie outside the file's " + std::to_string(data_len) + " data bytes");
  if (e.end - e.begin != numel * static_cast<uint64_t>(safetensors_dtype_bytes(e.dtype)))
    throw Error(where + ": " + std::to_string(e.end - e.begin) + " bytes for shape " + visible_text(sh->dump()) + " of " + e.dtype);
  return e;
}

}  // namespace

Safetensors::Safetensors(const std::string& path) : path_(path) {
  File f = open(path);
  struct stat st;
  if (fstat(fileno(f.get()), &st) != 0 || !S_ISREG(st.st_mode)) throw Error(path + ": not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  unsigned char len8[8];
  if (size < 8) throw Error(path + ": " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  read_at(f.get(), 0, len8, 8, path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | len8[i];
  if (n > kSafetensorsMaxHeader || n > size - 8)
    throw Error(path + ": header length " + std::to_string(n) + " exceeds " +
                (n > size - 8 ? "the file (" + std::to_string(size) + " bytes)" : "the limit of 100 MiB"));
  std::string header(n, '\0');
  read_at(f.get(), 8, header.data(), n, path);
  nlohmann::json h;
  try {
    h = parse_json_text(header, path + ": the header");
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": the header is not JSON: " + e.what());
  }
  if (!h.is_object()) throw Error(path + ": the header must be a JSON object");
  data_start_ = 8 + n;
  const uint64_t data_len = size - data_start_;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) throw Error(path + ": __metadata__ must be an object of strings");
      for (auto m = it->begin(); m != it->end(); ++m)
        if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
      continue;
    }
    entries_[it.key()] = entry(it.key(), *it, data_len, path);
  }
  std::vector<const std::pair<const std::string, SafetensorsEntry>*> by_offset;
  for (const auto& e : entries_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->second.begin < b->second.begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->second.begin < by_offset[i - 1]->second.end)
      throw Error(path + ": tensors '" + by_offset[i - 1]->first + "' and '" + by_offset[i]->first + "' overlap");
}

bool Safetensors::raw16(const std::string& name, std::vector<uint16_t>* out, bool* bf16) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw Error(path_ + ": no tensor '" + name + "'");
  const SafetensorsEntry& e = it->second;
  if (e.dtype != "F16" && e.dtype != "BF16") return false;
  *bf16 = e.dtype == "BF16";
  const size_t at = out->size(), n = static_cast<size_t>(e.end - e.begin) / 2;
  out->resize(at + n);  // appended: a layer's parts read straight into one buffer
  File f = open(path_);
  read_at(f.get(), data_start_ + e.begin, out->data() + at, n * 2, path_);
  return true;
}

std::vector<uint8_t> Safetensors::raw(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw Error(path_ + ": no tensor '" + name + "'");
  std::vector<uint8_t> out(static_cast<size_t>(it->second.end - it->second.begin));
  File f = open(path_);
  read_at(f.get(), data_start_ + it->second.begin, out.data(), out.size(), path_);
  return out;
}

Tensor Safetensors::tensor(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw Error(path_ + ": no tensor '" + name + "'");
  const SafetensorsEntry& e = it->second;
  if (e.dtype != "F32" && e.dtype != "F16" && e.dtype != "BF16")
    throw Error(path_ + ": tensor '" + name + "' is " + e.dtype + "; floating-point weights (F32, F16, BF16) are read");
  Tensor t = Tensor::empty(e.shape);
  File f = open(path_);
  const size_t bytes = static_cast<size_t>(e.end - e.begin);
  if (e.dtype == "F32") {
    read_at(f.get(), data_start_ + e.begin, t.f32(), bytes, path_);
    return t;
  }
  std::vector<uint16_t> raw(bytes / 2);
  read_at(f.get(), data_start_ + e.begin, raw.data(), bytes, path_);
  float* out = t.f32();
  for (size_t i = 0; i < raw.size(); ++i) {
    out[i] = e.dtype == "F16" ? half_to_float(raw[i]) : bf16_to_float(raw[i]);
  }
  return t;
}

namespace {

void put(FILE* f, const void* p, size_t n, const std::string& part) {
  if (std::fwrite(p, 1, n, f) != n) throw Error(part + ": cannot write: " + std::strerror(errno));
}

// The 8-byte length, the header and every tensor's bytes, each checked against its entry.
void write_body(FILE* f, const nlohmann::json& head, const std::vector<SafetensorsOut>& tensors, const std::string& path,
                const std::string& part) {
  std::string text = head.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the library writes it
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  put(f, len, 8, part);
  put(f, text.data(), text.size(), part);
  for (const auto& t : tensors) {
    const std::vector<uint8_t> b = t.bytes();
    const auto& e = head[t.name]["data_offsets"];
    if (b.size() != e[1].get<uint64_t>() - e[0].get<uint64_t>())
      throw Error(path + ": tensor '" + t.name + "' came as " + std::to_string(b.size()) + " bytes, not its dtype and shape's");
    put(f, b.data(), b.size(), part);
  }
  if (std::fflush(f) != 0) throw Error(part + ": cannot write: " + std::strerror(errno));
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json head = nlohmann::json::object();
  if (!metadata.empty()) head["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const auto& t : tensors) {
    uint64_t n = static_cast<uint64_t>(safetensors_dtype_bytes(t.dtype));
    if (n == 0) throw Error(path + ": tensor '" + t.name + "' has no safetensors dtype '" + t.dtype + "'");
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    if (head.contains(t.name)) throw Error(path + ": tensor '" + t.name + "' given twice");
    head[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + n}}};
    at += n;
  }
  const std::string part = path + ".part";
  File f(std::fopen(part.c_str(), "wb"));
  if (!f) throw Error(part + ": cannot create: " + std::strerror(errno));
  try {
    write_body(f.get(), head, tensors, path, part);
  } catch (...) {
    f.reset();
    std::remove(part.c_str());
    throw;
  }
  if (std::fclose(f.release()) != 0 || std::rename(part.c_str(), path.c_str()) != 0) {
    std::remove(part.c_str());
    throw Error(path + ": cannot write: " + std::strerror(errno));
  }
}

}  // namespace loom::rt

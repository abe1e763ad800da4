// safetensors.hpp — reading a .safetensors file (Hugging Face's format: an 8-byte little-endian
// header length, a JSON header {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// "__metadata__": {...}}, then the raw tensors, row-major, little-endian). Nothing in the header
// is trusted: its length against the file and a limit, every dtype, shape and offset against the
// data that follows, and no two tensors sharing bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt {

constexpr uint64_t kSafetensorsMaxHeader = 100ull << 20;  // as the safetensors library's own limit

struct SafetensorsEntry {
  std::string dtype;  // "F32", "F16", "BF16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data after the header
};

class Safetensors {
 public:
  // Reads and checks the header; the data stays in the file until tensor() asks for it. Throws
  // Error naming the file and the fault.
  explicit Safetensors(const std::string& path);
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  // A tensor as float32 (F32, F16 and BF16 converted; other dtypes refused), with its shape.
  Tensor tensor(const std::string& name) const;
  // A BF16 or F16 tensor's raw values appended to *out (false, nothing read, for other dtypes);
  // *bf16 says which.
  bool raw16(const std::string& name, std::vector<uint16_t>* out, bool* bf16) const;
  // A tensor's bytes as stored, whatever its dtype.
  std::vector<uint8_t> raw(const std::string& name) const;

 private:
  std::string path_;
  uint64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// The bytes of one dtype ("F32", "BF16", "I8", ...): 0 for a name the format does not have.
int safetensors_dtype_bytes(const std::string& dtype);

// One tensor of a file being written: its bytes come from `bytes` when their turn comes, so a
// model larger than memory is written one tensor at a time.
struct SafetensorsOut {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::function<std::vector<uint8_t>()> bytes;
};
// Writes `path` (through path + ".part", renamed when whole) with the tensors in the order
// given. Throws Error naming the file: a tensor whose bytes disagree with its dtype and shape, a
// name given twice, a write that fails.
void write_safetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace loom::rt

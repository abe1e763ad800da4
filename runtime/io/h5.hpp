// h5.hpp — HDF5 plumbing shared by the model file (model_io.cpp) and checkpoints
// (checkpoint_io.cpp): handles that close themselves, checked calls, string attributes, the
// atomic writer (datasets chunked with Fletcher32, a temporary beside the file, synced, renamed)
// and the readers that check what a dataset declares is stored.
#pragma once

#include <hdf5.h>

#include <string>
#include <utility>
#include <vector>

#include "loom/rt/io/model_io.hpp"

namespace loom::rt::h5 {

struct H5Quiet {
  H5Quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};

// Closes an HDF5 handle with the right function when it leaves scope.
struct H5Handle {
  hid_t id = -1;
  herr_t (*close)(hid_t) = nullptr;
  H5Handle(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  ~H5Handle() {
    if (id >= 0) close(id);
  }
  operator hid_t() const { return id; }
};

struct Blob {  // one dataset: a path below the root ("params/fc1.weight"), float32 or bytes
  std::string name;
  std::vector<int64_t> shape;
  const void* data;
  bool bytes;
  const QuantizedTensor* int8 = nullptr;  // an int8 tensor: its integers, scales and zero point
};

// LOOM_CHECK_H5(call, what): throws Error (kind kIO) when an HDF5 call returned a negative id or
// status: `what` (the file and what was being done), HDF5's own words for it, and file:line.
void h5check_at(hid_t id_or_status, const std::string& what, const char* file, int line);
#define LOOM_CHECK_H5(call, what) ::loom::rt::h5::h5check_at((call), (what), __FILE__, __LINE__)
void write_string_attr(hid_t obj, const char* name, const std::string& value, const std::string& path);
std::string read_string_attr(hid_t obj, const char* name, const std::string& path);
// `attrs` and `blobs` as a Loom file at `path`, atomically.
void write_h5_atomic(const std::string& path, const std::vector<std::pair<std::string, std::string>>& attrs,
                     const std::vector<Blob>& blobs);
// The float32 (and, with `quant`, int8) datasets of a group, checksums verified; those without a
// checksum named in `unchecked`.
std::vector<std::pair<std::string, Tensor>> read_group(hid_t file, const std::string& group_path, const std::string& path,
                                                       bool required, std::vector<std::string>* unchecked = nullptr,
                                                       ModelFile* quant = nullptr);
std::string read_bytes(hid_t file, const std::string& ds_path, const std::string& path, bool required,
                       std::vector<std::string>* unchecked = nullptr);
// Opens a Loom file for reading, its format version checked; its "loom.format" into `format`.
hid_t open_loom_file(const std::string& path, std::string* format);

}  // namespace loom::rt::h5

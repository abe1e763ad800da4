// model_io.cpp — HDF5 reading and writing. Every HDF5 call is checked; HDF5's own error stack
// printing is silenced and its failures become one-line errors naming the file.
#include "loom/rt/io/model_io.hpp"
#include "loom/rt/proc/process.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

namespace loom::rt {

namespace {

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

void h5check(hid_t id_or_status, const std::string& what) {
  if (id_or_status < 0) throw Error(what);
}

void write_string_attr(hid_t obj, const char* name, const std::string& value, const std::string& path) {
  H5Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  h5check(type, path + ": H5Tcopy failed");
  h5check(H5Tset_size(type, value.size() + 1), path + ": H5Tset_size failed");
  H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Handle attr(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  h5check(attr, path + ": cannot create attribute " + name);
  h5check(H5Awrite(attr, type, value.c_str()), path + ": cannot write attribute " + name);
}

std::string read_string_attr(hid_t obj, const char* name, const std::string& path) {
  if (H5Aexists(obj, name) <= 0) throw Error(path + ": not a Loom model file (no attribute " + name + ")");
  H5Handle attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  h5check(attr, path + ": cannot open attribute " + name);
  H5Handle type(H5Aget_type(attr), H5Tclose);
  if (H5Tget_class(type) != H5T_STRING) throw Error(path + ": attribute " + std::string(name) + " is not a string");
  size_t size = H5Tget_size(type);
  if (H5Tis_variable_str(type) > 0) {
    char* s = nullptr;
    H5Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5Tget_cset(type));  // h5py writes str attributes as UTF-8; HDF5 converts no cset
    h5check(H5Aread(attr, mem, &s), path + ": cannot read attribute " + name);
    std::string out = s ? s : "";
    H5free_memory(s);
    return out;
  }
  std::string buf(size, '\0');
  h5check(H5Aread(attr, type, buf.data()), path + ": cannot read attribute " + name);
  return std::string(buf.c_str());
}

}  // namespace

namespace {

struct Blob {  // one dataset: a path below the root ("params/fc1.weight"), float32 or bytes
  std::string name;
  std::vector<int64_t> shape;
  const void* data;
  bool bytes;
  const QuantizedTensor* int8 = nullptr;  // an int8 tensor: its integers, scales and zero point
};

void write_float_array_attr(hid_t obj, const char* name, const std::vector<float>& v, const std::string& path) {
  const hsize_t n = v.size();
  H5Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  H5Handle attr(H5Acreate2(obj, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  h5check(attr, path + ": cannot create attribute " + name);
  h5check(H5Awrite(attr, H5T_NATIVE_FLOAT, v.data()), path + ": cannot write attribute " + name);
}

void write_int_attr(hid_t obj, const char* name, int v, const std::string& path) {
  H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Handle attr(H5Acreate2(obj, name, H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  h5check(attr, path + ": cannot create attribute " + name);
  h5check(H5Awrite(attr, H5T_NATIVE_INT, &v), path + ": cannot write attribute " + name);
}

hid_t open_or_create_group(hid_t parent, const std::string& name, const std::string& path) {
  if (H5Lexists(parent, name.c_str(), H5P_DEFAULT) > 0) return H5Gopen2(parent, name.c_str(), H5P_DEFAULT);
  hid_t g = H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  h5check(g, path + ": cannot create group " + name);
  return g;
}

// Writes the file under a temporary name in the same folder, fsyncs it, renames it into place
// and fsyncs the folder: a reader sees the old file or the whole new one, never half a file.
void write_atomic(const std::string& path, const std::vector<std::pair<std::string, std::string>>& attrs,
                  const std::vector<Blob>& blobs) {
  static H5Quiet quiet;
  // HDF5's filter pipeline mallocs and frees a buffer per chunk; above glibc's mmap threshold each
  // one is a fresh mmap whose pages fault in. Keeping such buffers on the heap made writing a
  // GiB 1.7x faster (loom-bench checkpoint).
  static const bool heap_tuned = [] {
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    return true;
  }();
  (void)heap_tuned;
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  // Created exclusively: a file or symlink someone planted at that name is removed (the link
  // itself, never what it points to), and one planted again in between makes the create fail.
  ::unlink(tmp.c_str());
  try {
    {
      H5Handle file(H5Fcreate(tmp.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
      h5check(file, tmp + ": cannot create (" + std::strerror(errno) + ")");
      for (const auto& a : attrs) write_string_attr(file, a.first.c_str(), a.second, path);
      {
        H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
        H5Handle attr(H5Acreate2(file, "loom.version", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
        int v = kFormatVersion;
        h5check(attr, path + ": cannot create loom.version");
        h5check(H5Awrite(attr, H5T_NATIVE_INT, &v), path + ": cannot write loom.version");
      }
      for (const auto& b : blobs) {
        // Parent groups ("optimizer/m") first, then the dataset, chunked so that it can carry
        // a Fletcher32 checksum.
        std::vector<std::unique_ptr<H5Handle>> groups;
        hid_t parent = file;
        size_t at = 0, slash;
        while ((slash = b.name.find('/', at)) != std::string::npos) {
          groups.push_back(std::make_unique<H5Handle>(open_or_create_group(parent, b.name.substr(at, slash - at), path),
                                                      H5Gclose));
          parent = *groups.back();
          at = slash + 1;
        }
        const std::string leaf = b.name.substr(at);
        std::vector<hsize_t> dims(b.shape.begin(), b.shape.end());
        if (dims.empty() || std::find(dims.begin(), dims.end(), hsize_t{0}) != dims.end())
          throw Error(path + ": dataset " + b.name + " is empty");
        H5Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
        H5Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
        std::vector<hsize_t> chunk(dims);
        // Chunks of about 1 MiB: the filter pipeline (Fletcher32) allocates and copies a buffer
        // per chunk, and 16 MiB chunks wrote a GiB 2.3x slower than 1 MiB ones.
        for (size_t d = 0; d < chunk.size(); ++d) {
          hsize_t rest = 1;
          for (size_t e = d + 1; e < chunk.size(); ++e) rest *= chunk[e];
          chunk[d] = std::max<hsize_t>(1, std::min<hsize_t>(chunk[d], (hsize_t{1} << 17) / std::max<hsize_t>(rest, 1)));
        }
        h5check(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()), path + ": H5Pset_chunk failed");
        h5check(H5Pset_fletcher32(dcpl), path + ": H5Pset_fletcher32 failed");
        hid_t ftype = b.bytes ? H5T_STD_U8LE : H5T_IEEE_F32LE, mtype = b.bytes ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT;
        if (b.int8) ftype = H5T_STD_I8LE, mtype = H5T_NATIVE_INT8;
        H5Handle ds(H5Dcreate2(parent, leaf.c_str(), ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose);
        h5check(ds, path + ": cannot create dataset " + b.name);
        h5check(H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, b.data), path + ": cannot write dataset " + b.name);
        if (b.int8) {
          write_float_array_attr(ds, "scale", b.int8->scale, path);
          write_int_attr(ds, "zero_point", b.int8->zero_point, path);
        }
      }
      h5check(H5Fflush(file, H5F_SCOPE_GLOBAL), path + ": flush failed");
    }
    commit_file(tmp, path);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

}  // namespace

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
  write_atomic(path, {{"loom.format", "model"}, {"model.config", config_json}}, blobs);
}

namespace {

// Whether "a/b/c" exists below `file`: H5Lexists needs every parent to exist, so each prefix is
// checked in turn.
bool path_exists(hid_t file, const std::string& p) {
  for (size_t slash = p.find('/');; slash = p.find('/', slash + 1)) {
    if (H5Lexists(file, p.substr(0, slash).c_str(), H5P_DEFAULT) <= 0) return false;
    if (slash == std::string::npos) return true;
  }
}

// Before a dataset is read: what it declares must be stored (an unwritten or truncated dataset
// would read as gigabytes of fill values), and whether it carries a Fletcher32 checksum.
void check_stored(hid_t ds, uint64_t bytes, const std::string& where, const std::string& path,
                  std::vector<std::string>* unchecked) {
  const uint64_t stored = H5Dget_storage_size(ds);
  if (stored < bytes)
    throw Error(path + ": " + where + " declares " + std::to_string(bytes) + " bytes but the file stores " +
                std::to_string(stored) + " (unwritten or truncated dataset)");
  H5Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
  unsigned flags = 0;
  size_t nvalues = 0;
  unsigned config = 0;
  const bool checksummed = dcpl >= 0 && H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &nvalues, nullptr, 0,
                                                              nullptr, &config) >= 0;
  if (!checksummed && unchecked) unchecked->push_back(where);
}

// Every float32 dataset of a group, by name (checksums verified by the read; datasets without
// one are named in `unchecked`).
std::vector<float> read_float_array_attr(hid_t ds, const char* attr_name, const std::string& where) {
  if (H5Aexists(ds, attr_name) <= 0) throw Error(where + " is int8 but has no '" + attr_name + "' attribute");
  H5Handle attr(H5Aopen(ds, attr_name, H5P_DEFAULT), H5Aclose);
  H5Handle space(H5Aget_space(attr), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n <= 0 || n > (1 << 24)) throw Error(where + ": attribute " + attr_name + " has a bad size");
  std::vector<float> v(static_cast<size_t>(n));
  if (H5Aread(attr, H5T_NATIVE_FLOAT, v.data()) < 0) throw Error(where + ": attribute " + attr_name + " is not numeric");
  return v;
}

// An int8 weight (Contract 7): its integers, `scale` (one positive float per output channel)
// and `zero_point` (one integer, or one per channel, all equal).
Tensor read_int8(hid_t ds, const std::vector<hsize_t>& dims, uint64_t n, const std::string& where, const std::string& path,
                 std::vector<std::string>* unchecked, ModelFile* quant) {
  H5Handle type(H5Dget_type(ds), H5Tclose);
  if (H5Tget_sign(type) != H5T_SGN_2) throw Error(path + ": " + where + " is uint8; int8 weights must be signed");
  check_stored(ds, n, where, path, unchecked);
  std::vector<float> scale = read_float_array_attr(ds, "scale", path + ": " + where);
  if (scale.size() != dims[0])
    throw Error(path + ": " + where + " has " + std::to_string(scale.size()) + " scales for " + std::to_string(dims[0]) +
                " output channels");
  for (float s : scale)
    if (!(s > 0) || !std::isfinite(s)) throw Error(path + ": " + where + " has a scale that is not positive and finite");
  std::vector<float> zp = read_float_array_attr(ds, "zero_point", path + ": " + where);
  for (float z : zp)
    if (z != zp[0] || z < -128 || z > 127 || z != std::floor(z))
      throw Error(path + ": " + where + " needs one integer zero_point in [-128, 127] for all channels");
  Tensor t = Tensor::empty(std::vector<int64_t>(dims.begin(), dims.end()), DType::kI8);
  if (H5Dread(ds, H5T_NATIVE_INT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data<int8_t>()) < 0)
    throw Error(path + ": " + where + " fails its checksum or cannot be read (corrupt file)");
  const std::string name = where.substr(where.find_last_of('/') + 1);
  quant->scales[name] = std::move(scale);
  quant->zero_points[name] = static_cast<int>(zp[0]);
  return t;
}

std::vector<std::pair<std::string, Tensor>> read_group(hid_t file, const std::string& group_path, const std::string& path,
                                                       bool required, std::vector<std::string>* unchecked = nullptr,
                                                       ModelFile* quant = nullptr) {
  std::vector<std::pair<std::string, Tensor>> out;
  if (!path_exists(file, group_path)) {
    if (required) throw Error(path + ": no /" + group_path + " group");
    return out;
  }
  H5Handle group(H5Gopen2(file, group_path.c_str(), H5P_DEFAULT), H5Gclose);
  h5check(group, path + ": cannot open /" + group_path);
  hsize_t n = 0;
  h5check(H5Gget_num_objs(group, &n), path + ": cannot list /" + group_path);
  for (hsize_t i = 0; i < n; ++i) {
    char name[256] = {0};
    if (H5Gget_objname_by_idx(group, i, name, sizeof name - 1) < 0) throw Error(path + ": cannot list /" + group_path);
    H5Handle ds(H5Dopen2(group, name, H5P_DEFAULT), H5Dclose);
    h5check(ds, path + ": cannot open /" + group_path + "/" + name);
    H5Handle space(H5Dget_space(ds), H5Sclose);
    int nd = H5Sget_simple_extent_ndims(space);
    if (nd < 1 || nd > 4) throw Error(path + ": /" + group_path + "/" + name + " has " + std::to_string(nd) + " dimensions");
    std::vector<hsize_t> dims(static_cast<size_t>(nd));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    uint64_t n = 1;
    for (hsize_t d : dims) n = d > 0 && n > (uint64_t{1} << 40) / d ? (uint64_t{1} << 40) : n * d;
    H5Handle type(H5Dget_type(ds), H5Tclose);
    if (H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) == 1) {
      if (!quant) throw Error(path + ": /" + group_path + "/" + name + " is an integer dataset (only model weights may be int8)");
      out.emplace_back(name, read_int8(ds, dims, n, "/" + group_path + "/" + name, path, unchecked, quant));
      continue;
    }
    check_stored(ds, n * sizeof(float), "/" + group_path + "/" + name, path, unchecked);
    Tensor t = Tensor::empty(std::vector<int64_t>(dims.begin(), dims.end()));
    if (H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.f32()) < 0)
      throw Error(path + ": /" + group_path + "/" + name + " fails its checksum or cannot be read (corrupt file)");
    out.emplace_back(name, t);
  }
  return out;
}

std::string read_bytes(hid_t file, const std::string& ds_path, const std::string& path, bool required,
                       std::vector<std::string>* unchecked = nullptr) {
  if (!path_exists(file, ds_path)) {
    if (required) throw Error(path + ": no /" + ds_path);
    return "";
  }
  H5Handle ds(H5Dopen2(file, ds_path.c_str(), H5P_DEFAULT), H5Dclose);
  h5check(ds, path + ": cannot open /" + ds_path);
  H5Handle space(H5Dget_space(ds), H5Sclose);
  hssize_t n = H5Sget_simple_extent_npoints(space);
  if (n <= 0 || n > (hssize_t{1} << 26)) throw Error(path + ": /" + ds_path + " has an unreasonable size");
  check_stored(ds, static_cast<uint64_t>(n), "/" + ds_path, path, unchecked);
  std::string out(static_cast<size_t>(n), '\0');
  if (H5Dread(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    throw Error(path + ": /" + ds_path + " fails its checksum or cannot be read (corrupt file)");
  return out;
}

// Opens a Loom HDF5 file for reading and checks its format version: missing, truncated,
// not HDF5 and unsupported versions are one-line errors naming the file.
hid_t open_loom_file(const std::string& path, std::string* format) {
  static H5Quiet quiet;
  if (access(path.c_str(), R_OK) != 0) throw Error(path + ": " + std::strerror(errno));
  if (H5Fis_hdf5(path.c_str()) <= 0) throw Error(path + ": not an HDF5 file (or truncated)");
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  h5check(id, path + ": cannot open as HDF5 (truncated or corrupt)");
  H5Handle file(id, H5Fclose);
  *format = read_string_attr(file, "loom.format", path);
  if (H5Aexists(file, "loom.version") <= 0) throw Error(path + ": not a Loom model file (no loom.version)");
  int version = 0;
  {
    H5Handle attr(H5Aopen(file, "loom.version", H5P_DEFAULT), H5Aclose);
    h5check(H5Aread(attr, H5T_NATIVE_INT, &version), path + ": cannot read loom.version");
  }
  if (version != kFormatVersion)
    throw Error(path + ": format version " + std::to_string(version) + " is not supported (this build reads " +
                std::to_string(kFormatVersion) + ")");
  file.id = -1;  // handed to the caller
  return id;
}

}  // namespace

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
    auto cfg = nlohmann::json::parse(f.config_json);
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
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": model.config is not a valid gpt configuration: " + e.what());
  }
  // The model the config describes must be about the size of the tensors stored (already read,
  // bounded by the file) before it is built.
  if (g.vocab <= 0 || g.context <= 0 || g.layers <= 0 || g.heads <= 0 || g.embd <= 0)
    throw Error(path + ": model.config's gpt sizes must be positive");
  int64_t stored = 0;
  for (const auto& p : f.params) stored += p.second.numel();
  const double described = (static_cast<double>(g.vocab) + g.context) * g.embd + 12.0 * g.layers * g.embd * g.embd;
  if (described > 2.0 * static_cast<double>(stored) + 1e6)
    throw Error(path + ": model.config describes a gpt of about " + std::to_string(static_cast<int64_t>(described)) +
                " parameters but /params holds " + std::to_string(stored));
  Gpt m(g, 0);
  assign_params(path, f, m.params());
  return m;
}

namespace {

void write_checkpoint(const std::string& path, const Checkpoint& c, bool with_tensors, const std::string& layout_json) {
  std::vector<Blob> blobs;
  auto add = [&](const std::string& group, const std::vector<std::pair<std::string, Tensor>>& ts) {
    for (const auto& t : ts) blobs.push_back({group + t.first, t.second.shape(), t.second.f32(), false});
  };
  if (with_tensors) {
    add("params/", c.params);
    add("optimizer/m/", c.opt_m);
    add("optimizer/v/", c.opt_v);
  }
  blobs.push_back({"state/json", {static_cast<int64_t>(c.state_json.size())}, c.state_json.data(), true});
  if (!c.rng.empty()) blobs.push_back({"state/rng", {static_cast<int64_t>(c.rng.size())}, c.rng.data(), true});
  if (!layout_json.empty())
    blobs.push_back({"state/shards", {static_cast<int64_t>(layout_json.size())}, layout_json.data(), true});
  write_atomic(path,
               {{"loom.format", "checkpoint"}, {"loom.magic", kCheckpointMagic}, {"model.config", c.model_config},
                {"train.config", c.train_config}},
               blobs);
}

// Reads the shards an index names and cuts the flat state back into tensors.
void load_shards(const std::string& path, const std::string& layout_text, Checkpoint& c) {
  nlohmann::json layout;
  int64_t total = 0;
  int world = 0;
  try {
    layout = nlohmann::json::parse(layout_text);
    total = layout.at("total").get<int64_t>();
    world = layout.at("world").get<int>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": /state/shards is not a valid shard layout: " + e.what());
  }
  if (world < 1 || world > 65536 || total < 0 || total > (int64_t{1} << 40))
    throw Error(path + ": /state/shards has an unreasonable world size or total");
  int64_t step = -1;
  try {
    step = nlohmann::json::parse(c.state_json).at("step").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": /state/json has no valid step: " + e.what());
  }
  std::vector<float> flat(static_cast<size_t>(total));
  c.shards = world;
  c.rank_state.assign(static_cast<size_t>(world), {});
  for (int r = 0; r < world; ++r) {
    // The shard's name is derived, not read from the file: an index never points elsewhere.
    const std::string sp = shard_path(path, r, world);
    std::string format;
    H5Handle file(open_loom_file(sp, &format), H5Fclose);
    if (format != kShardFormat) throw Error(sp + ": a Loom " + format + " file, not a checkpoint shard");
    nlohmann::json meta;
    try {
      meta = nlohmann::json::parse(read_string_attr(file, "shard.json", sp));
    } catch (const nlohmann::json::exception& e) {
      throw Error(sp + ": shard.json is not valid: " + e.what());
    }
    const auto want = shard_slice(total, r, world);
    if (meta.value("rank", -1) != r || meta.value("world", -1) != world || meta.value("offset", int64_t{-1}) != want.first ||
        meta.value("count", int64_t{-1}) != want.second || meta.value("total", int64_t{-1}) != total ||
        meta.value("step", int64_t{-1}) != step)
      throw Error(sp + ": the shard does not match its index " + path + " (another checkpoint's shard?)");
    if (want.second > 0) {
      auto data = read_group(file, "shard", sp, true);
      if (data.size() != 1 || data[0].first != "data" || data[0].second.numel() != want.second)
        throw Error(sp + ": /shard/data is missing or of the wrong size");
      std::memcpy(flat.data() + want.first, data[0].second.f32(), static_cast<size_t>(want.second) * sizeof(float));
    }
    c.rank_state[static_cast<size_t>(r)] = read_group(file, "rank", sp, false);
  }
  int64_t at = 0;
  try {
    for (const auto& t : layout.at("tensors")) {
      const std::string group = t.at(0).get<std::string>(), name = t.at(1).get<std::string>();
      std::vector<int64_t> shape = t.at(2).get<std::vector<int64_t>>();
      int64_t n = 1;
      for (int64_t d : shape) {
        if (d <= 0 || d > (int64_t{1} << 32)) throw Error(path + ": /state/shards: tensor " + name + " has a bad shape");
        n *= d;
      }
      if (n > total - at) throw Error(path + ": /state/shards: the tensors add up to more than the shards hold");
      Tensor x = Tensor::empty(shape);
      std::memcpy(x.f32(), flat.data() + at, static_cast<size_t>(n) * sizeof(float));
      at += n;
      if (group == "params") c.params.emplace_back(name, x);
      else if (group == "optimizer/m") c.opt_m.emplace_back(name, x);
      else if (group == "optimizer/v") c.opt_v.emplace_back(name, x);
      else throw Error(path + ": /state/shards: unknown group " + group);
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": /state/shards is not a valid shard layout: " + e.what());
  }
  if (at != total) throw Error(path + ": /state/shards: the tensors do not cover the shards");
  if (c.params.empty()) throw Error(path + ": no parameters in the shards");
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& c) { write_checkpoint(path, c, true, ""); }

void save_checkpoint_index(const std::string& path, const Checkpoint& c, const std::string& layout_json) {
  write_checkpoint(path, c, false, layout_json);
}

std::pair<int64_t, int64_t> shard_slice(int64_t total, int rank, int world) {
  const int64_t begin = total * rank / world, end = total * (rank + 1) / world;
  return {begin, end - begin};
}

std::string shard_path(const std::string& index_path, int rank, int world) {
  std::string stem = index_path;
  if (stem.size() > 3 && stem.compare(stem.size() - 3, 3, ".h5") == 0) stem.resize(stem.size() - 3);
  return stem + ".shard-" + std::to_string(rank) + "-of-" + std::to_string(world) + ".h5";
}

void save_checkpoint_shard(const std::string& path, const CheckpointShard& s) {
  nlohmann::json meta = {{"step", s.step}, {"rank", s.rank}, {"world", s.world}, {"offset", s.offset},
                         {"count", s.data.defined() ? s.data.numel() : 0}, {"total", s.total}};
  std::vector<Blob> blobs;
  if (s.data.defined() && s.data.numel() > 0) blobs.push_back({"shard/data", s.data.shape(), s.data.f32(), false});
  for (const auto& t : s.rank_state) blobs.push_back({"rank/" + t.first, t.second.shape(), t.second.f32(), false});
  write_atomic(path, {{"loom.format", kShardFormat}, {"loom.magic", kCheckpointMagic}, {"shard.json", meta.dump()}}, blobs);
}

Checkpoint load_checkpoint(const std::string& path) {
  std::string format;
  H5Handle file(open_loom_file(path, &format), H5Fclose);
  if (format == kShardFormat)
    throw Error(path + ": a shard of a checkpoint; load its index (the file without .shard-R-of-N)");
  if (format != "checkpoint") throw Error(path + ": a Loom " + format + " file, not a checkpoint");
  if (H5Aexists(file, "loom.magic") <= 0 || read_string_attr(file, "loom.magic", path) != kCheckpointMagic)
    throw Error(path + ": not a Loom checkpoint (loom.magic missing or wrong)");
  Checkpoint c;
  c.model_config = read_string_attr(file, "model.config", path);
  c.train_config = read_string_attr(file, "train.config", path);
  c.state_json = read_bytes(file, "state/json", path, true, &c.unchecked);
  c.rng = read_bytes(file, "state/rng", path, false, &c.unchecked);
  const std::string layout = read_bytes(file, "state/shards", path, false, &c.unchecked);
  if (!layout.empty()) {
    load_shards(path, layout, c);
    return c;
  }
  c.params = read_group(file, "params", path, true, &c.unchecked);
  c.opt_m = read_group(file, "optimizer/m", path, false, &c.unchecked);
  c.opt_v = read_group(file, "optimizer/v", path, false, &c.unchecked);
  return c;
}

}  // namespace loom::rt

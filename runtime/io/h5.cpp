// h5.cpp — HDF5 plumbing for Loom's files (h5.hpp): every call checked, HDF5's own error stack
// printing silenced and its failures one-line errors naming the file.
#include "h5.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "loom/rt/proc/process.hpp"
#include "loom/rt/tensor/kernels.hpp"

namespace loom::rt::h5 {

namespace {
herr_t innermost(unsigned, const H5E_error2_t* e, void* out) {  // the first error walked upward
  auto* why = static_cast<std::string*>(out);
  if (why->empty() && e && e->desc) *why = e->desc;
  return 0;
}
}  // namespace

void h5check_at(hid_t id_or_status, const std::string& what, const char* file, int line) {
  if (id_or_status >= 0) return;
  std::string why;  // HDF5's own words for it, from its error stack (printing is silenced)
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost, &why);
  H5Eclear2(H5E_DEFAULT);
  const char* base = std::strrchr(file, '/');
  throw Error(what + " (" + (why.empty() ? "" : "HDF5: " + why + "; ") + "at " + (base ? base + 1 : file) + ":" +
              std::to_string(line) + ")");
}

void write_string_attr(hid_t obj, const char* name, const std::string& value, const std::string& path) {
  H5Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  LOOM_CHECK_H5(type, path + ": H5Tcopy failed");
  LOOM_CHECK_H5(H5Tset_size(type, value.size() + 1), path + ": H5Tset_size failed");
  H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Handle attr(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  LOOM_CHECK_H5(attr, path + ": cannot create attribute " + name);
  LOOM_CHECK_H5(H5Awrite(attr, type, value.c_str()), path + ": cannot write attribute " + name);
}

std::string read_string_attr(hid_t obj, const char* name, const std::string& path) {
  if (H5Aexists(obj, name) <= 0) throw Error(path + ": not a Loom model file (no attribute " + name + ")");
  H5Handle attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  LOOM_CHECK_H5(attr, path + ": cannot open attribute " + name);
  H5Handle type(H5Aget_type(attr), H5Tclose);
  if (H5Tget_class(type) != H5T_STRING) throw Error(path + ": attribute " + std::string(name) + " is not a string");
  size_t size = H5Tget_size(type);
  if (H5Tis_variable_str(type) > 0) {
    char* s = nullptr;
    H5Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5Tget_cset(type));  // h5py writes str attributes as UTF-8; HDF5 converts no cset
    LOOM_CHECK_H5(H5Aread(attr, mem, &s), path + ": cannot read attribute " + name);
    std::string out = s ? s : "";
    H5free_memory(s);
    return out;
  }
  std::string buf(size, '\0');
  LOOM_CHECK_H5(H5Aread(attr, type, buf.data()), path + ": cannot read attribute " + name);
  return std::string(buf.c_str());
}




void write_float_array_attr(hid_t obj, const char* name, const std::vector<float>& v, const std::string& path) {
  const hsize_t n = v.size();
  H5Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  H5Handle attr(H5Acreate2(obj, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  LOOM_CHECK_H5(attr, path + ": cannot create attribute " + name);
  LOOM_CHECK_H5(H5Awrite(attr, H5T_NATIVE_FLOAT, v.data()), path + ": cannot write attribute " + name);
}

void write_int_attr(hid_t obj, const char* name, int v, const std::string& path) {
  H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  H5Handle attr(H5Acreate2(obj, name, H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  LOOM_CHECK_H5(attr, path + ": cannot create attribute " + name);
  LOOM_CHECK_H5(H5Awrite(attr, H5T_NATIVE_INT, &v), path + ": cannot write attribute " + name);
}

hid_t open_or_create_group(hid_t parent, const std::string& name, const std::string& path) {
  if (H5Lexists(parent, name.c_str(), H5P_DEFAULT) > 0) return H5Gopen2(parent, name.c_str(), H5P_DEFAULT);
  hid_t g = H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  LOOM_CHECK_H5(g, path + ": cannot create group " + name);
  return g;
}

// Writes the file under a temporary name in the same folder, fsyncs it, renames it into place
// and fsyncs the folder: a reader sees the old file or the whole new one, never half a file.
void write_h5_atomic(const std::string& path, const std::vector<std::pair<std::string, std::string>>& attrs,
                  const std::vector<Blob>& blobs) {
  static H5Quiet quiet;
  // HDF5's filter pipeline mallocs and frees a buffer per chunk; above glibc's mmap threshold each
  // one is a fresh mmap whose pages fault in. Keeping such buffers on the heap made writing a
  // GiB 1.7x faster (loom-bench checkpoint).
  static const bool heap_tuned = (cpu::keep_buffers_on_heap(64 << 20), true);
  (void)heap_tuned;
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  // Created exclusively: a file or symlink someone planted at that name is removed (the link
  // itself, never what it points to), and one planted again in between makes the create fail.
  ::unlink(tmp.c_str());
  try {
    {
      H5Handle file(H5Fcreate(tmp.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
      LOOM_CHECK_H5(file, tmp + ": cannot create (" + std::strerror(errno) + ")");
      for (const auto& a : attrs) write_string_attr(file, a.first.c_str(), a.second, path);
      {
        H5Handle space(H5Screate(H5S_SCALAR), H5Sclose);
        H5Handle attr(H5Acreate2(file, "loom.version", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
        int v = kFormatVersion;
        LOOM_CHECK_H5(attr, path + ": cannot create loom.version");
        LOOM_CHECK_H5(H5Awrite(attr, H5T_NATIVE_INT, &v), path + ": cannot write loom.version");
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
        LOOM_CHECK_H5(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()), path + ": H5Pset_chunk failed");
        LOOM_CHECK_H5(H5Pset_fletcher32(dcpl), path + ": H5Pset_fletcher32 failed");
        hid_t ftype = b.bytes ? H5T_STD_U8LE : H5T_IEEE_F32LE, mtype = b.bytes ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT;
        if (b.int8) ftype = H5T_STD_I8LE, mtype = H5T_NATIVE_INT8;
        H5Handle ds(H5Dcreate2(parent, leaf.c_str(), ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose);
        LOOM_CHECK_H5(ds, path + ": cannot create dataset " + b.name);
        LOOM_CHECK_H5(H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, b.data), path + ": cannot write dataset " + b.name);
        if (b.int8) {
          write_float_array_attr(ds, "scale", b.int8->scale, path);
          write_int_attr(ds, "zero_point", b.int8->zero_point, path);
        }
      }
      LOOM_CHECK_H5(H5Fflush(file, H5F_SCOPE_GLOBAL), path + ": flush failed");
    }
    commit_file(tmp, path);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}



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
                                                       bool required, std::vector<std::string>* unchecked,
                                                       ModelFile* quant) {
  std::vector<std::pair<std::string, Tensor>> out;
  if (!path_exists(file, group_path)) {
    if (required) throw Error(path + ": no /" + group_path + " group");
    return out;
  }
  H5Handle group(H5Gopen2(file, group_path.c_str(), H5P_DEFAULT), H5Gclose);
  LOOM_CHECK_H5(group, path + ": cannot open /" + group_path);
  hsize_t n = 0;
  LOOM_CHECK_H5(H5Gget_num_objs(group, &n), path + ": cannot list /" + group_path);
  for (hsize_t i = 0; i < n; ++i) {
    char name[256] = {0};
    if (H5Gget_objname_by_idx(group, i, name, sizeof name - 1) < 0) throw Error(path + ": cannot list /" + group_path);
    H5Handle ds(H5Dopen2(group, name, H5P_DEFAULT), H5Dclose);
    LOOM_CHECK_H5(ds, path + ": cannot open /" + group_path + "/" + name);
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
                       std::vector<std::string>* unchecked) {
  if (!path_exists(file, ds_path)) {
    if (required) throw Error(path + ": no /" + ds_path);
    return "";
  }
  H5Handle ds(H5Dopen2(file, ds_path.c_str(), H5P_DEFAULT), H5Dclose);
  LOOM_CHECK_H5(ds, path + ": cannot open /" + ds_path);
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
  LOOM_CHECK_H5(id, path + ": cannot open as HDF5 (truncated or corrupt)");
  H5Handle file(id, H5Fclose);
  *format = read_string_attr(file, "loom.format", path);
  if (H5Aexists(file, "loom.version") <= 0) throw Error(path + ": not a Loom model file (no loom.version)");
  int version = 0;
  {
    H5Handle attr(H5Aopen(file, "loom.version", H5P_DEFAULT), H5Aclose);
    LOOM_CHECK_H5(H5Aread(attr, H5T_NATIVE_INT, &version), path + ": cannot read loom.version");
  }
  if (version != kFormatVersion)
    throw Error(path + ": format version " + std::to_string(version) + " is not supported (this build reads " +
                std::to_string(kFormatVersion) + ")");
  file.id = -1;  // handed to the caller
  return id;
}

}  // namespace loom::rt::h5

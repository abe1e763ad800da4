// fuzz_model_file.cpp — libFuzzer target for the model and checkpoint loaders: the input picks
// what an HDF5 file holds (loom.format and loom.version, model.config as text or as an mlp/gpt
// configuration with any widths, datasets with any names, shapes and values, written or only
// declared, with or without checksums), the file is written through HDF5 itself, and
// load_model, load_mlp, load_gpt, load_quant_mlp (int8 weights with any scale and zero_point
// attributes, any model.config.quant) and load_checkpoint read it. Every file must load or be refused
// with an Error; none may crash or allocate beyond what it stores (-rss_limit_mb, -malloc_limit_mb).
// The bytes drive the contents rather than HDF5's own on-disk parser: that parser is HDF5's code,
// not Loom's, and mutating its binary format finds HDF5's bugs, not the loaders'.
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/rt/error.hpp"
#include "loom/rt/io/model_io.hpp"
#include "loom/rt/io/quant_model.hpp"

namespace {

const char* kNames[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias",
                        "wte", "wpe", "h0.ln1.weight", "lm_head.weight", "x"};

void string_attr(hid_t obj, const char* name, const std::string& v) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, v.empty() ? 1 : v.size());
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, type, v.empty() ? "" : v.data());
  H5Aclose(a);
  H5Sclose(space);
  H5Tclose(type);
}

std::string config(FuzzedDataProvider& p) {
  switch (p.ConsumeIntegralInRange(0, 4)) {
    case 0: return p.ConsumeRandomLengthString(256);
    case 1: {
      std::string layers;
      const int n = p.ConsumeIntegralInRange(0, 8);
      for (int i = 0; i < n; ++i) layers += (i ? "," : "") + std::to_string(p.ConsumeIntegralInRange(-2, 70000));
      return "{\"type\":\"mlp\",\"layers\":[" + layers + "],\"activation\":\"relu\"}";
    }
    case 2: {
      auto v = [&] { return std::to_string(p.ConsumeIntegralInRange(-1, 1 << 16)); };
      return "{\"type\":\"gpt\",\"vocab\":" + v() + ",\"context\":" + v() + ",\"layers\":" + v() + ",\"heads\":" + v() +
             ",\"embd\":" + v() + "}";
    }
    case 3: {  // an INT8 mlp (Contract 7) with any quantization parameters
      auto f = [&] { return std::to_string(p.ConsumeFloatingPoint<float>()); };
      std::string inputs;
      const int n = p.ConsumeIntegralInRange(0, 4);
      for (int i = 0; i < n; ++i)
        inputs += std::string(i ? "," : "") + "{\"scale\":" + f() + ",\"zero_point\":" +
                  std::to_string(p.ConsumeIntegralInRange(-300, 300)) + "}";
      const char* acts[] = {"uint8_affine", "float", "int4"};
      return "{\"type\":\"mlp\",\"layers\":[8,4,3],\"activation\":\"relu\",\"quant\":{\"activations\":\"" +
             std::string(acts[p.ConsumeIntegralInRange(0, 2)]) + "\",\"act_max\":" +
             std::to_string(p.ConsumeBool() ? 127 : p.ConsumeIntegral<int>()) + ",\"inputs\":[" + inputs + "]}}";
    }
    default: return "{\"type\":\"mlp\",\"layers\":[784,16,10],\"activation\":\"relu\"}";
  }
}

void dataset(FuzzedDataProvider& p, hid_t group) {
  const std::string name = p.ConsumeBool() ? kNames[p.ConsumeIntegralInRange<size_t>(0, 10)] : p.ConsumeRandomLengthString(16);
  if (name.empty() || name.find('/') != std::string::npos || name == ".") return;
  const int nd = p.ConsumeIntegralInRange(1, 3);
  hsize_t dims[3], chunk[3];
  uint64_t n = 1;
  for (int i = 0; i < nd; ++i) {
    dims[i] = p.ConsumeBool() ? p.ConsumeIntegralInRange<hsize_t>(1, 32) : p.ConsumeIntegralInRange<hsize_t>(1, 1 << 17);
    chunk[i] = std::min<hsize_t>(dims[i], 64);
    n *= dims[i];
  }
  hid_t space = H5Screate_simple(nd, dims, nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, nd, chunk);
  if (p.ConsumeBool()) H5Pset_fletcher32(dcpl);
  const bool int8 = p.ConsumeIntegralInRange(0, 3) == 0;
  hid_t ds = H5Dcreate2(group, name.c_str(), int8 ? H5T_STD_I8LE : H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (ds >= 0 && int8) {  // int8 weights: their scale and zero_point attributes, of any size and value
    if (p.ConsumeBool()) {
      const hsize_t k = p.ConsumeIntegralInRange<hsize_t>(1, 40);
      std::vector<float> s(k);
      for (auto& x : s) x = p.ConsumeFloatingPoint<float>();
      hid_t as = H5Screate_simple(1, &k, nullptr);
      hid_t a = H5Acreate2(ds, "scale", H5T_IEEE_F32LE, as, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(a, H5T_NATIVE_FLOAT, s.data());
      H5Aclose(a);
      H5Sclose(as);
    }
    if (p.ConsumeBool()) {
      const int z = p.ConsumeIntegralInRange(-300, 300);
      hid_t as = H5Screate(H5S_SCALAR);
      hid_t a = H5Acreate2(ds, "zero_point", H5T_STD_I32LE, as, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(a, H5T_NATIVE_INT, &z);
      H5Aclose(a);
      H5Sclose(as);
    }
    if (n <= (1u << 16) && p.ConsumeBool()) {
      const std::vector<uint8_t> v = p.ConsumeBytes<uint8_t>(n);
      std::vector<int8_t> q(n, 0);
      for (size_t i = 0; i < v.size(); ++i) q[i] = static_cast<int8_t>(v[i]);
      H5Dwrite(ds, H5T_NATIVE_INT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, q.data());
    }
  } else if (ds >= 0 && n <= (1u << 16) && p.ConsumeBool()) {  // written (small ones only), else only declared
    std::vector<float> v(n);
    for (auto& x : v) x = p.ConsumeFloatingPoint<float>();
    H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  }
  if (ds >= 0) H5Dclose(ds);
  H5Pclose(dcpl);
  H5Sclose(space);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/dev/shm/loom-fuzz-model-" + std::to_string(getpid()) + ".h5";
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  FuzzedDataProvider p(data, size);
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) return 0;
  string_attr(f, "loom.format", p.ConsumeBool() ? "model" : p.ConsumeBool() ? "checkpoint" : p.ConsumeRandomLengthString(12));
  if (p.ConsumeIntegralInRange(0, 7) != 0) {
    const int version = p.ConsumeIntegralInRange(0, 8) == 0 ? p.ConsumeIntegral<int>() : 1;
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "loom.version", H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT, &version);
    H5Aclose(a);
    H5Sclose(space);
  }
  string_attr(f, "model.config", config(p));
  if (p.ConsumeBool()) string_attr(f, "loom.magic", "loom-checkpoint");
  if (p.ConsumeBool()) string_attr(f, "train.config", p.ConsumeRandomLengthString(64));
  hid_t g = H5Gcreate2(f, "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  for (int i = 0, n = p.ConsumeIntegralInRange(0, 8); i < n && p.remaining_bytes() > 0; ++i) dataset(p, g);
  H5Gclose(g);
  H5Fclose(f);
  using namespace loom::rt;
  try {
    ModelFile m = load_model(path);
    try {
      load_mlp(path, m);
    } catch (const Error&) {
    }
    try {
      load_gpt(path);
    } catch (const Error&) {
    }
    try {  // an INT8 file: its precision, then the INT8 MLP built and run on one row
      if (model_precision(path, m) == "int8") {
        const QuantMlp q = load_quant_mlp(path, m);
        Tensor x = Tensor::zeros({1, q.widths().front()});
        q.forward(x);
      }
    } catch (const Error&) {
    }
  } catch (const Error&) {
  }
  try {
    load_checkpoint(path);
  } catch (const Error&) {
  }
  unlink(path.c_str());
  return 0;
}

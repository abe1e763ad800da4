// onnx_run.cpp — runs an ONNX model through the runtime's executor on raw little-endian input
// files and writes each output as raw bytes, for the parity tests' direct check beside serving.
//   onnx_run MODEL.onnx OUT_DIR NAME:DTYPE:D0xD1x...:FILE ...   (DTYPE float32|int64|int32|uint8|bool)
// Prints one line per output: NAME DTYPE D0xD1...
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "loom/rt/graph/graph.hpp"

using loom::rt::DType;
using loom::rt::Tensor;

namespace {

DType parse_dtype(const std::string& s) {
  if (s == "float32") return DType::kF32;
  if (s == "int64") return DType::kI64;
  if (s == "int32") return DType::kI32;
  if (s == "uint8") return DType::kU8;
  if (s == "bool") return DType::kBool;
  throw loom::rt::Error("unknown dtype " + s);
}

Tensor read_input(const std::string& spec, std::string* name) {
  std::vector<std::string> f;
  std::stringstream ss(spec);
  for (std::string p; std::getline(ss, p, ':');) f.push_back(p);
  if (f.size() != 4) throw loom::rt::Error("input spec NAME:DTYPE:SHAPE:FILE, got " + spec);
  *name = f[0];
  std::vector<int64_t> shape;
  std::stringstream ds(f[2]);
  for (std::string d; std::getline(ds, d, 'x');)
    if (!d.empty()) shape.push_back(std::stoll(d));
  Tensor t = Tensor::empty(shape, parse_dtype(f[1]));
  std::ifstream in(f[3], std::ios::binary);
  in.read(t.data<char>(), static_cast<std::streamsize>(t.bytes()));
  if (!in) throw loom::rt::Error("cannot read " + std::to_string(t.bytes()) + " bytes from " + f[3]);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: onnx_run MODEL.onnx OUT_DIR NAME:DTYPE:SHAPE:FILE ...\n");
    return 2;
  }
  try {
    const auto model = loom::rt::graph::Model::load(argv[1]);
    std::vector<Tensor> ins(model.inputs().size());
    for (int i = 3; i < argc; ++i) {
      std::string name;
      Tensor t = read_input(argv[i], &name);
      size_t k = 0;
      while (k < model.inputs().size() && model.inputs()[k].name != name) ++k;
      if (k == model.inputs().size()) throw loom::rt::Error("the model has no input " + name);
      ins[k] = t;
    }
    const auto outs = model.run(ins);
    for (size_t k = 0; k < outs.size(); ++k) {
      const auto& name = model.outputs()[k].name;
      std::ofstream(std::string(argv[2]) + "/" + name + ".bin", std::ios::binary)
          .write(outs[k].data<char>(), static_cast<std::streamsize>(outs[k].bytes()));
      std::printf("%s %s %s\n", name.c_str(), loom::rt::dtype_name(outs[k].dtype()), outs[k].shape_str().c_str());
    }
    std::fprintf(stderr, "nodes %zu folded %d fused %d\n", model.node_count(), model.folded(), model.fused());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "onnx_run: %s\n", e.what());
    return 1;
  }
}

// onnx_run.cpp — runs an ONNX model through the runtime's executor on raw little-endian input
// files and writes each output as raw bytes, for the parity tests' direct check beside serving.
//   onnx_run MODEL.onnx OUT_DIR NAME:DTYPE:D0xD1x...:FILE ...   (DTYPE float32|float16|int64|int32|int8|uint8|bool)
// Prints one line per output: NAME DTYPE D0xD1...
//   onnx_run --batch MANIFEST   each line: DIR MODEL.onnx NAME:DTYPE:SHAPE:FILE ...; every model in
//     one process (ONNX's node tests, onnx_node_tests.py). Prints one line per model:
//     DIR<TAB>ok<TAB>DTYPE SHAPE;DTYPE SHAPE;...  (output k written to DIR/out_k.bin), or
//     DIR<TAB>load|run<TAB>the error.
//   onnx_run --operators        the operators the executor runs, one per line
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
  if (s == "float16") return DType::kF16;
  if (s == "int8") return DType::kI8;
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

// Loads a model and binds named inputs to their places.
std::vector<Tensor> bind_inputs(const loom::rt::graph::Model& model, const std::vector<std::string>& specs) {
  std::vector<Tensor> ins(model.inputs().size());
  for (const auto& spec : specs) {
    std::string name;
    Tensor t = read_input(spec, &name);
    size_t k = 0;
    while (k < model.inputs().size() && model.inputs()[k].name != name) ++k;
    if (k == model.inputs().size()) throw loom::rt::Error("the model has no input " + name);
    ins[k] = t;
  }
  return ins;
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\t') c = ' ';
  return s;
}

int batch(const char* manifest) {
  std::ifstream in(manifest);
  if (!in) throw loom::rt::Error(std::string("cannot read ") + manifest);
  for (std::string line; std::getline(in, line);) {
    std::stringstream ss(line);
    std::string dir, path;
    if (!(ss >> dir >> path)) continue;
    std::vector<std::string> specs;
    for (std::string spec; ss >> spec;) specs.push_back(spec);
    std::string stage = "load";
    try {
      const auto model = loom::rt::graph::Model::load(path);
      stage = "run";
      const auto outs = model.run(bind_inputs(model, specs));
      std::string shapes;
      for (size_t k = 0; k < outs.size(); ++k) {
        std::ofstream(dir + "/out_" + std::to_string(k) + ".bin", std::ios::binary)
            .write(outs[k].data<char>(), static_cast<std::streamsize>(outs[k].bytes()));
        std::string dims;
        for (int64_t d : outs[k].shape()) dims += (dims.empty() ? "" : "x") + std::to_string(d);
        shapes += std::string(loom::rt::dtype_name(outs[k].dtype())) + " " + dims + ";";
      }
      std::printf("%s\tok\t%s\n", dir.c_str(), shapes.c_str());
    } catch (const std::exception& e) {
      std::printf("%s\t%s\t%s\n", dir.c_str(), stage.c_str(), one_line(e.what()).c_str());
    }
    std::fflush(stdout);  // a case that takes the process down leaves the ones before it reported
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--operators") {
    for (const auto& op : loom::rt::graph::operators()) std::printf("%s\n", op.c_str());
    return 0;
  }
  if (argc == 3 && std::string(argv[1]) == "--batch") {
    try {
      return batch(argv[2]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "onnx_run: %s\n", e.what());
      return 2;
    }
  }
  if (argc < 3) {
    std::fprintf(stderr, "usage: onnx_run MODEL.onnx OUT_DIR NAME:DTYPE:SHAPE:FILE ...\n");
    return 2;
  }
  try {
    const auto model = loom::rt::graph::Model::load(argv[1]);
    const auto outs = model.run(bind_inputs(model, std::vector<std::string>(argv + 3, argv + argc)));
    for (size_t k = 0; k < outs.size(); ++k) {
      const auto& name = model.outputs()[k].name;
      std::ofstream(std::string(argv[2]) + "/" + name + ".bin", std::ios::binary)
          .write(outs[k].data<char>(), static_cast<std::streamsize>(outs[k].bytes()));
      std::printf("%s %s %s\n", name.c_str(), loom::rt::dtype_name(outs[k].dtype()), outs[k].shape_str().c_str());
    }
    std::fprintf(stderr, "nodes %zu folded %d fused %d; rows: %s\n", model.node_count(), model.folded(), model.fused(),
                 model.row_independent() ? "independent" : model.why_not_row_independent().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "onnx_run: %s\n", e.what());
    return 1;
  }
}

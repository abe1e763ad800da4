// model_eval.hpp — what loom-compress reports of a model file: test accuracy on Fashion-MNIST
// (run by the same kernels loom-serve uses: the INT8 MLP for INT8 files), parameters, file size
// and weight type.
#pragma once

#include <cstdint>
#include <string>

#include "loom/rt/io/model_io.hpp"

namespace loom::compress {

struct ModelReport {
  double test_accuracy = 0;
  int64_t params = 0, file_bytes = 0;
  std::string weights_dtype;  // float32 | int8
  std::string precision;      // fp32 | int8 | int8-weights
  std::string layers;         // "784,512,512,10"
};

// A Loom model file, read and verified (rt::load_model); a GPT-2 folder's model.safetensors or an
// ONNX file is refused by name: loom-compress works on Loom's HDF5 models.
rt::ModelFile read_model(const std::string& path);

// Throws rt::Error for a file that is not a Loom MLP model, or data that does not fit it.
ModelReport evaluate_model(const std::string& path, const std::string& data_dir);
// The file's precision after checking it is a Loom MLP model file (not a checkpoint, not gpt).
std::string mlp_precision(const std::string& path, const rt::ModelFile& f);

}  // namespace loom::compress

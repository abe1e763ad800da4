// model_eval.cpp — evaluating a float, weights-only or INT8 MLP file on the test set.
#include "model_eval.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "loom/rt/io/data.hpp"
#include "loom/rt/io/quant_model.hpp"
#include "loom/rt/tensor/kernels.hpp"

namespace loom::compress {

rt::ModelFile read_model(const std::string& path) {
  auto ends = [&](const std::string& tail) {
    return path.size() >= tail.size() && path.compare(path.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (ends(".safetensors") || ends(".onnx"))
    throw rt::Error(path + ": loom-compress works on Loom's HDF5 model files (loom-train --export), not " +
                    (ends(".onnx") ? std::string("ONNX") : std::string("safetensors (a GPT-2 download is served, not compressed, in this version)")));
  return rt::load_model(path);
}

std::string mlp_precision(const std::string& path, const rt::ModelFile& f) {
  if (f.format != "model")
    throw rt::Error(path + ": a Loom " + f.format + ", not a model file (export one with loom-train --export)");
  const std::string precision = rt::model_precision(path, f);
  const auto cfg = nlohmann::json::parse(f.config_json);
  if (cfg.value("type", "") != "mlp")
    throw rt::Error(path + ": model type '" + cfg.value("type", "") + "' (loom-compress works on mlp models)");
  return precision;
}

ModelReport evaluate_model(const std::string& path, const std::string& data_dir) {
  const rt::ModelFile f = read_model(path);
  ModelReport r;
  r.precision = mlp_precision(path, f);
  r.weights_dtype = r.precision == "fp32" ? "float32" : "int8";
  const rt::Mlp shape = rt::load_mlp(path, f);
  for (size_t i = 0; i < shape.widths().size(); ++i) r.layers += (i ? "," : "") + std::to_string(shape.widths()[i]);
  r.params = shape.num_params();
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) r.file_bytes = st.st_size;
  const rt::Dataset test = rt::load_fashion_mnist(data_dir, "t10k");
  if (test.images.dim(1) != shape.widths().front())
    throw rt::Error(path + ": the model takes " + std::to_string(shape.widths().front()) + " inputs, the data has " +
                    std::to_string(test.images.dim(1)));
  std::unique_ptr<rt::QuantMlp> q;
  if (r.precision == "int8") q = std::make_unique<rt::QuantMlp>(rt::load_quant_mlp(path, f));
  rt::Mlp m = shape;
  int64_t correct = 0;
  std::vector<int32_t> pred;
  for (int64_t b = 0; b < test.size(); b += 1000) {
    const int64_t e = std::min(test.size(), b + 1000);
    const rt::Tensor x = test.images.rows(b, e);
    const rt::Tensor logits = q ? q->forward(x) : m.forward(x);
    const int rows = static_cast<int>(e - b);
    pred.resize(static_cast<size_t>(rows));
    rt::cpu::argmax_rows(logits.f32(), rows, static_cast<int>(logits.dim(1)), pred.data());
    for (int i = 0; i < rows; ++i) correct += pred[static_cast<size_t>(i)] == test.labels[static_cast<size_t>(b + i)];
  }
  r.test_accuracy = static_cast<double>(correct) / static_cast<double>(test.size());
  return r;
}

}  // namespace loom::compress

// tensor_in.cpp — checks of request tensors against a model's input, and their decoding.
#include "tensor_in.hpp"

#include <cctype>
#include <cmath>
#include <cstring>

#include "status.hpp"

namespace loom::serve {

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 128 || s[0] == '.') return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

std::vector<float> decode_input(const InputSpec& m, const std::vector<TensorIn>& inputs, int max_rows, int* rows) {
  if (inputs.empty()) throw ServeError(Status::kBadRequest, "missing input: the model takes one tensor named 'input'");
  if (inputs.size() > 1) throw ServeError(Status::kBadRequest, "the model takes one input ('input'), not " + std::to_string(inputs.size()));
  const TensorIn& t = inputs[0];
  if (t.name != "input") throw ServeError(Status::kBadRequest, "unexpected input '" + t.name + "': the model's input is 'input'");
  const std::string want = "[N, " + std::to_string(m.features) + "]";
  if (t.shape.size() < 2 || t.shape.size() > 8) throw ServeError(Status::kBadRequest, "input shape must be " + want);
  // Every product stays below the model's features (or fails), so nothing here can overflow.
  int64_t features = 1;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] <= 0) throw ServeError(Status::kBadRequest, "input shape has a bad dimension " + std::to_string(t.shape[i]));
    if (i == 0) continue;
    if (t.shape[i] > m.features || features * t.shape[i] > m.features)
      throw ServeError(Status::kBadRequest, "input shape: each row must hold " + std::to_string(m.features) + " values (" +
                                                want + ")");
    features *= t.shape[i];
  }
  if (features != m.features)
    throw ServeError(Status::kBadRequest, "input shape: each row must hold " + std::to_string(m.features) +
                                              " values, not " + std::to_string(features));
  if (t.shape[0] > max_rows)
    throw ServeError(Status::kBadRequest, "the request has " + std::to_string(t.shape[0]) + " rows; --max-batch-size is " +
                                              std::to_string(max_rows));
  const int64_t n = t.shape[0];
  const size_t count = static_cast<size_t>(n * features);
  const size_t width = t.datatype == "FP32" ? 4 : t.datatype == "UINT8" ? 1 : 0;
  if (width == 0) throw ServeError(Status::kBadRequest, "input datatype " + t.datatype + " is not supported (FP32 or UINT8)");
  if (t.data.size() != count * width)
    throw ServeError(Status::kBadRequest, "input holds " + std::to_string(t.data.size()) + " bytes, shape and " + t.datatype +
                                              " need " + std::to_string(count * width));
  std::vector<float> x(count);
  if (width == 4) {
    std::memcpy(x.data(), t.data.data(), count * 4);
    for (float v : x)
      if (!std::isfinite(v)) throw ServeError(Status::kBadRequest, "input holds a NaN or infinite value");
  } else {
    const float scale = m.scale, mean = m.mean, inv_std = 1.0f / m.std;
    for (size_t i = 0; i < count; ++i)
      x[i] = (static_cast<float>(static_cast<unsigned char>(t.data[i])) * scale - mean) * inv_std;
  }
  *rows = static_cast<int>(n);
  return x;
}

}  // namespace loom::serve

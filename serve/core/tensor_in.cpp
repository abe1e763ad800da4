// tensor_in.cpp — checks of request tensors against a model's input, and their decoding.
#include "core/tensor_in.hpp"

#include <cctype>
#include <cstdint>
#include <algorithm>
#include <climits>
#include <cstring>

#include "core/status.hpp"
#include "loom/rt/tensor/finite.hpp"

namespace loom::serve {

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 128 || s[0] == '.') return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

void decode_input(const InputSpec& m, const std::vector<TensorIn>& inputs, int max_rows, int* rows,
                  const std::function<float*(int64_t rows, int64_t features)>& alloc) {
  if (inputs.empty()) throw ServeError(Status::kInput, "missing input: the model takes one tensor named 'input'");
  if (inputs.size() > 1) throw ServeError(Status::kInput, "the model takes one input ('input'), not " + std::to_string(inputs.size()));
  const TensorIn& t = inputs[0];
  if (t.name != "input") throw ServeError(Status::kInput, "unexpected input '" + t.name + "': the model's input is 'input'");
  auto want = [&m] { return "[N, " + std::to_string(m.features) + "]"; };  // for the errors only
  if (t.shape.size() < 2 || t.shape.size() > 8) throw ServeError(Status::kInput, "input shape must be " + want());
  // Every product stays below the model's features (or fails), so nothing here can overflow.
  int64_t features = 1;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] <= 0) throw ServeError(Status::kInput, "input shape has a bad dimension " + std::to_string(t.shape[i]));
    if (i == 0) continue;
    if (t.shape[i] > m.features || features * t.shape[i] > m.features)
      throw ServeError(Status::kInput, "input shape: each row must hold " + std::to_string(m.features) + " values (" +
                                                want() + ")");
    features *= t.shape[i];
  }
  if (features != m.features)
    throw ServeError(Status::kInput, "input shape: each row must hold " + std::to_string(m.features) +
                                              " values, not " + std::to_string(features));
  if (t.shape[0] > max_rows)
    throw ServeError(Status::kInput, too_many_rows(t.shape[0], max_rows));
  const int64_t n = t.shape[0];
  const size_t count = static_cast<size_t>(n * features);
  const size_t width = t.datatype == "FP32" ? 4 : t.datatype == "UINT8" ? 1 : 0;
  if (width == 0) throw ServeError(Status::kInput, "input datatype " + t.datatype + " is not supported (FP32 or UINT8)");
  if (t.data.size() != count * width)
    throw ServeError(Status::kInput, "input holds " + std::to_string(t.data.size()) + " bytes, shape and " + t.datatype +
                                              " need " + std::to_string(count * width));
  float* x = alloc(n, features);
  if (width == 4) {
    std::memcpy(x, t.data.data(), count * 4);
    if (!rt::cpu::all_finite(x, static_cast<int64_t>(count))) throw ServeError(Status::kInput, "input holds a NaN or infinite value");
  } else {
    const float scale = m.scale, mean = m.mean, inv_std = 1.0f / m.std;
    for (size_t i = 0; i < count; ++i)
      x[i] = (static_cast<float>(static_cast<unsigned char>(t.data[i])) * scale - mean) * inv_std;
  }
  *rows = static_cast<int>(n);
}

std::vector<float> decode_input(const InputSpec& m, const std::vector<TensorIn>& inputs, int max_rows, int* rows) {
  std::vector<float> x;
  decode_input(m, inputs, max_rows, rows, [&x](int64_t n, int64_t features) {
    x.resize(static_cast<size_t>(n * features));
    return x.data();
  });
  return x;
}

std::string too_many_rows(int64_t rows, int64_t max_rows) {
  return "the request has " + std::to_string(rows) + " rows; the model takes at most " + std::to_string(max_rows) +
         " (max_batch_size; the server's --max-batch-size)";
}

size_t datatype_width(const std::string& d) {
  if (d == "FP32" || d == "INT32") return 4;
  if (d == "INT64") return 8;
  if (d == "UINT8" || d == "INT8" || d == "BOOL") return 1;
  return 0;
}

namespace {

std::string names_of(const std::vector<TensorDesc>& want) {
  std::string s;
  for (const auto& w : want) s += (s.empty() ? "'" : ", '") + w.name + "'";
  return s;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + (s[i] < 0 ? std::string("-1") : std::to_string(s[i]));
  return t + "]";
}

// One tensor against its description; returns its element count.
int64_t check_one(const TensorDesc& w, const TensorIn& t) {
  const std::string where = "input '" + w.name + "'";
  if (t.datatype != w.datatype)
    throw ServeError(Status::kInput, where + " must be " + w.datatype + ", not " + t.datatype);
  if (t.shape.size() != w.shape.size())
    throw ServeError(Status::kInput, where + " must have shape " + shape_text(w.shape) + " (rank " +
                                              std::to_string(w.shape.size()) + "), not " + shape_text(t.shape));
  int64_t n = 1;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    const int64_t d = t.shape[i];
    if (d <= 0 || (w.shape[i] >= 0 && d != w.shape[i]))
      throw ServeError(Status::kInput, where + " must have shape " + shape_text(w.shape) + ", not " + shape_text(t.shape));
    if (d > (int64_t{1} << 31) / n) throw ServeError(Status::kInput, where + " claims more than 2^31 elements");
    n *= d;
  }
  const size_t width = datatype_width(w.datatype);
  if (t.data.size() != static_cast<size_t>(n) * width)
    throw ServeError(Status::kInput, where + " holds " + std::to_string(t.data.size()) + " bytes; shape " +
                                              shape_text(t.shape) + " of " + t.datatype + " needs " +
                                              std::to_string(static_cast<size_t>(n) * width));
  if (w.datatype == "BOOL")
    for (char c : t.data)
      if (c != 0 && c != 1) throw ServeError(Status::kInput, where + ": BOOL data must be 0 or 1");
  if (w.datatype == "FP32" && !rt::cpu::all_finite(t.data.data(), static_cast<int64_t>(t.data.size() / 4)))
    throw ServeError(Status::kInput, where + " holds a NaN or infinite value");
  return n;
}

}  // namespace

size_t kserve_type_width(const std::string& t) {
  if (t == "BOOL" || t == "UINT8" || t == "INT8") return 1;
  if (t == "UINT16" || t == "INT16" || t == "FP16" || t == "BF16") return 2;
  if (t == "UINT32" || t == "INT32" || t == "FP32") return 4;
  if (t == "UINT64" || t == "INT64" || t == "FP64") return 8;
  return 0;
}

void check_answer(const TensorDesc& want, const TensorIn& got, const std::string& what) {
  auto bad = [&](const std::string& why) { throw ServeError(Status::kInternal, what + " " + why); };
  auto as_given = [](const std::vector<int64_t>& s) {  // every dimension as it came, negative ones too
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
  };
  if (got.datatype != want.datatype) bad("is " + got.datatype + ", but its model's metadata says " + want.datatype);
  if (got.shape.size() != want.shape.size())
    bad("has shape " + as_given(got.shape) + ", but its model's metadata says " + shape_text(want.shape));
  int64_t n = 1;
  for (size_t i = 0; i < got.shape.size(); ++i) {
    const int64_t d = got.shape[i];
    if (d < 0 || (want.shape[i] >= 0 && d != want.shape[i]))
      bad("has shape " + as_given(got.shape) + ", but its model's metadata says " + shape_text(want.shape));
    if (d > 0 && n > (int64_t{1} << 31) / d) bad("claims more than 2^31 elements");
    n *= d;
  }
  const size_t width = kserve_type_width(got.datatype);
  if (width && got.data.size() != static_cast<size_t>(n) * width)
    bad("holds " + std::to_string(got.data.size()) + " bytes; shape " + as_given(got.shape) + " of " + got.datatype +
        " needs " + std::to_string(static_cast<size_t>(n) * width));
}

std::vector<size_t> output_indices(const std::vector<TensorDesc>& outputs, const std::vector<std::string>& names) {
  std::vector<size_t> idx;
  for (const auto& n : names) {
    size_t k = 0;
    while (k < outputs.size() && outputs[k].name != n) ++k;
    if (k == outputs.size()) {
      std::string all;
      for (const auto& o : outputs) all += (all.empty() ? "'" : ", '") + o.name + "'";
      throw ServeError(Status::kInput, "unknown output '" + n + "': the outputs are " + all);
    }
    idx.push_back(k);
  }
  if (names.empty())
    for (size_t k = 0; k < outputs.size(); ++k) idx.push_back(k);
  return idx;
}

std::vector<const TensorIn*> check_named(const std::vector<TensorDesc>& want, const std::vector<TensorIn>& inputs,
                                         int max_rows, bool batched, int* rows) {
  std::vector<const TensorIn*> out(want.size(), nullptr);
  for (const auto& t : inputs) {
    size_t k = 0;
    while (k < want.size() && want[k].name != t.name) ++k;
    if (k == want.size())
      throw ServeError(Status::kInput, "unexpected input '" + t.name + "': the model's inputs are " + names_of(want));
    if (out[k]) throw ServeError(Status::kInput, "input '" + t.name + "' is given twice");
    out[k] = &t;
  }
  for (size_t k = 0; k < want.size(); ++k)
    if (!out[k]) throw ServeError(Status::kInput, "missing input '" + want[k].name + "': the model's inputs are " + names_of(want));
  *rows = 1;
  for (size_t k = 0; k < want.size(); ++k) {
    check_one(want[k], *out[k]);
    if (!batched) continue;
    const int64_t r = out[k]->shape.empty() ? 1 : out[k]->shape[0];
    if (k == 0) *rows = static_cast<int>(std::min<int64_t>(r, INT32_MAX));
    else if (r != *rows)
      throw ServeError(Status::kInput, "input '" + want[k].name + "' has " + std::to_string(r) + " rows, input '" +
                                                want[0].name + "' " + std::to_string(*rows));
  }
  if (batched && *rows > max_rows)
    throw ServeError(Status::kInput, too_many_rows(*rows, max_rows));
  return out;
}

}  // namespace loom::serve

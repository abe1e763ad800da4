// ops_signal.cpp — the window functions of ONNX's signal operators: HannWindow, HammingWindow and
// BlackmanWindow (periodic or symmetric), in the output_datatype asked for.
#include <cmath>

#include "ops.hpp"

namespace loom::rt::graph {

void op_window(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const std::vector<int64_t> size = ints_of(n, need(n, in, 0));
  if (size.size() != 1 || size[0] < 0) op_error(n, "size must be one value, not negative");
  DType to = DType::kF32;
  if (!dtype_from_onnx(static_cast<int32_t>(attr_i(n, "output_datatype", 1)), &to))
    op_error(n, "output_datatype " + std::to_string(attr_i(n, "output_datatype", 1)) + " is not supported");
  const int64_t len = size[0];
  const double span = static_cast<double>(attr_i(n, "periodic", 1) ? len : len - 1), pi = std::acos(-1.0);
  Tensor w = Tensor::empty({len}, to);
  for (int64_t i = 0; i < len; ++i) {
    const double x = span > 0 ? 2 * pi * static_cast<double>(i) / span : 0;
    double v = 0;
    if (n.op == "HannWindow") v = 0.5 - 0.5 * std::cos(x);
    else if (n.op == "HammingWindow") v = 25.0 / 46 - 21.0 / 46 * std::cos(x);
    else v = 0.42 - 0.5 * std::cos(x) + 0.08 * std::cos(2 * x);  // BlackmanWindow
    store_from_double(w, i, v);
  }
  out[0] = w;
}

}  // namespace loom::rt::graph

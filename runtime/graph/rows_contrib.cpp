// rows_contrib.cpp — the row-independence pass (rows.cpp) through ONNX Runtime's com.microsoft
// operators (ops_contrib.cpp): the GELUs element-wise, the skip normalizations over
// their last axis, FusedMatMul as the MatMul it is, and the batch operators (Attention,
// MultiHeadAttention, EmbedLayerNormalization) whose every operand holding rows holds them, whole,
// on its batch dimension, and whose others are the same for every row.
#include <algorithm>
#include <cstring>
#include <map>

#include "rows_pass.hpp"

namespace loom::rt::graph::rows_pass {

namespace {

bool plain(const Fact& f) { return f.any_layout || (f.outer == 1 && f.inner == 1); }

}  // namespace

// Input i of a batch operator: rows whole on dimension 0, or absent; `broadcast` also takes a
// value without rows whose dimension 0 is 1 (an attention bias, position ids shared by all).
void Pass::batch_operand(const Node& n, size_t i, bool broadcast) {
  if (i >= n.in.size() || n.in[i] < 0) return;
  const Fact& f = in(n, i);
  if (f.kind == Fact::kRows && f.ranked && f.at == 0 && plain(f)) return;
  if (broadcast && f.kind == Fact::kUniform && f.ranked && f.rank() > 0 && f.dims[0] == 1) return;
  throw Refused{"input " + std::to_string(i) + " does not hold the rows on its batch dimension"};
}

// A quantized operator as the float one it stands for, over its data operands; its scales and
// zero points the same for every row, and an activation's one value each.
void Pass::quantized(const Node& n) {
  static const std::map<std::string, std::pair<const char*, std::vector<size_t>>> as_float = {
      {"QLinearConv", {"Conv", {0, 3}}}, {"ConvInteger", {"Conv", {0, 1}}}, {"com.microsoft:QLinearAdd", {"Add", {0, 3}}},
      {"com.microsoft:QLinearMul", {"Mul", {0, 3}}}, {"com.microsoft:QLinearAveragePool", {"AveragePool", {0}}},
      {"com.microsoft:QLinearGlobalAveragePool", {"GlobalAveragePool", {0}}}, {"com.microsoft:QGemm", {"Gemm", {0, 3}}},
      {"com.microsoft:QLinearSoftmax", {"Softmax", {0}}}, {"com.microsoft:QLinearSigmoid", {"Sigmoid", {0}}},
      {"com.microsoft:QLinearLeakyRelu", {"LeakyRelu", {0}}}};
  std::vector<size_t> data;
  const char* op = "Concat";
  if (n.op == "com.microsoft:QLinearConcat") {
    for (size_t i = 2; i < n.in.size(); i += 3) data.push_back(i);
  } else {
    const auto& f = as_float.at(n.op);
    op = f.first, data = f.second;
  }
  for (size_t i = 0; i < n.in.size(); ++i) {
    if (n.in[i] < 0 || std::find(data.begin(), data.end(), i) != data.end()) continue;
    const Fact& f = in(n, i);
    if (f.kind != Fact::kUniform) throw Refused{"input " + std::to_string(i) + " depends on the rows"};
    const bool weight = (n.op == "QLinearConv" || n.op == "com.microsoft:QGemm") && (i == 4 || i == 5);  // per output channel
    const bool bias = (n.op == "QLinearConv" && i == 8) || (n.op == "com.microsoft:QGemm" && i == 6) || (n.op == "ConvInteger" && i == 3);
    if (!weight && !bias && (!f.ranked || std::any_of(f.dims.begin(), f.dims.end(), [](int64_t d) { return d != 1; })))
      throw Refused{"input " + std::to_string(i) + " (a scale or zero point) is not one value"};
  }
  Node m = n;
  m.op = op, m.in.clear();
  for (size_t i : data) m.in.push_back(i < n.in.size() ? n.in[i] : -1);
  rows_node(m);
}

void Pass::contrib(const Node& n) {
  const std::string op = n.op.substr(std::strlen(kContribDomain) + 1);
  if (op.rfind("QLinear", 0) == 0 || op == "QGemm") return quantized(n);
  auto dim = [&](size_t i, int d) {
    const Fact& f = in(n, i);
    return f.ranked && d < f.rank() ? f.dims[static_cast<size_t>(d)] : kAnyDim;
  };
  auto uniform_in = [&](std::initializer_list<size_t> slots) {
    for (size_t i : slots)
      if (i < n.in.size() && n.in[i] >= 0 && in(n, i).kind != Fact::kUniform)
        throw Refused{"input " + std::to_string(i) + " depends on the rows"};
  };
  if (op == "Gelu" || op == "BiasGelu" || op == "FastGelu" || op == "QuickGelu") return elementwise(n);
  if (op == "FusedMatMul") {
    if (attr_i(n, "transA", 0) || attr_i(n, "transB", 0) || attr_i(n, "transBatchA", 0) || attr_i(n, "transBatchB", 0))
      throw Refused{"the pass does not follow rows through its transposes"};
    return matmul(n);
  }
  if (op == "SkipLayerNormalization" || op == "SkipSimplifiedLayerNormalization") {
    uniform_in({2, 3, 4});
    Node sum = n;
    sum.in.resize(2);
    elementwise(sum);
    const Fact y = fact(n.out[0]);
    if (!y.ranked || y.at == y.rank() - 1) throw Refused{"it normalizes over the rows"};
    Fact stat = y;
    stat.dims.back() = 1;
    set(n, 1, stat), set(n, 2, stat);
    return;
  }
  if (op == "Attention") {
    uniform_in({1, 2});
    batch_operand(n, 0, false), batch_operand(n, 3, false), batch_operand(n, 5, true);
    const int64_t v = dim(1, 1) >= 0 ? dim(1, 1) / 3 : kAnyDim;
    set(n, 0, rows({kRowsDim, dim(0, 1), has_attr(n, "qkv_hidden_sizes") ? kAnyDim : v}, 0));
    set(n, 1, rows({2, kRowsDim, attr_i(n, "num_heads", kAnyDim), dim(0, 1), kAnyDim}, 1));
    return;
  }
  if (op == "MultiHeadAttention") {
    uniform_in({3});
    for (size_t i : {0, 1, 2, 4}) batch_operand(n, i, false);
    batch_operand(n, 5, true);
    set(n, 0, rows({kRowsDim, dim(0, 1), dim(2, 2)}, 0));
    for (size_t k : {1, 2}) set(n, k, rows({kRowsDim, attr_i(n, "num_heads", kAnyDim), dim(1, 1), kAnyDim}, 0));
    return;
  }
  if (op == "EmbedLayerNormalization") {
    uniform_in({2, 3, 4, 5, 6});
    for (size_t i : {0, 1, 7}) batch_operand(n, i, false);
    batch_operand(n, 8, true);
    const Fact y = rows({kRowsDim, dim(0, 1), dim(2, 1)}, 0);
    set(n, 0, y), set(n, 2, y), set(n, 1, rows({kRowsDim}, 0));
    return;
  }
  throw Refused{"the pass does not follow rows through " + n.op};
}

}  // namespace loom::rt::graph::rows_pass

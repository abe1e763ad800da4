// rows_shapes.cpp — the row-independence pass (rows.cpp) over values that hold no rows: uniform
// values (constants, shapes of the dimensions past the rows) and the exporter's shape arithmetic
// on N (Shape -> Gather -> Mul -> Unsqueeze -> Concat, rows_sizes.cpp), followed as int values
// whose elements the pass names.
#include <algorithm>

#include "rows_pass.hpp"

namespace loom::rt::graph::rows_pass {

// Every input uniform: so are the outputs; their shape where cheap to know (what a later node
// beside the rows needs: the rank, whether dimension `at` is 1, the sizes before the rows).
void Pass::uniform_node(const Node& n) {
  if (int_node(n)) return;
  const Fact& x = in(n, 0);
  const std::string& op = n.op;
  Fact f = uniform_unranked();
  static const char* same[] = {"Cast", "Identity", "Relu", "Sqrt", "Erf", "Tanh", "Gelu", "Sigmoid", "Neg", "Exp", "Log",
                               "Reciprocal", "Abs", "Not", "Clip", "Softmax", "LogSoftmax", "Trilu", "QuantizeLinear",
                               "DequantizeLinear", "Sin", "Cos", "Floor", "Ceil", "Round", "Sign", "CumSum"};
  if (std::find(std::begin(same), std::end(same), op) != std::end(same)) {
    f = x;
  } else if (op == "Unsqueeze" && x.ranked) {
    std::vector<int64_t> axes;
    if (axes_of(n, "axes", 1, &axes)) {
      const int r = x.rank() + static_cast<int>(axes.size());
      std::vector<bool> added(static_cast<size_t>(r), false);
      for (int64_t a : axes) added[static_cast<size_t>(norm(a, r))] = true;
      std::vector<int64_t> d;
      for (int i = 0, k = 0; i < r; ++i) d.push_back(added[static_cast<size_t>(i)] ? 1 : x.dims[static_cast<size_t>(k++)]);
      f = uniform(d);
    }
  } else if (op == "Slice" && x.ranked) {
    std::vector<int64_t> axes;
    if (!const_ints(n, 3, &axes)) {
      axes.clear();
      if (in(n, 1).ranked && in(n, 1).rank() == 1 && in(n, 1).dims[0] >= 0)
        for (int64_t i = 0; i < in(n, 1).dims[0]; ++i) axes.push_back(i);
      else
        for (int i = 0; i < x.rank(); ++i) axes.push_back(i);
    }
    f = x;
    for (int64_t a : axes) f.dims[static_cast<size_t>(norm(a, x.rank()))] = kAnyDim;
  } else if (op == "Gather" && x.ranked && in(n, 1).ranked) {
    const int g = norm(attr_i(n, "axis", 0), x.rank());
    std::vector<int64_t> d(x.dims.begin(), x.dims.begin() + g);
    d.insert(d.end(), in(n, 1).dims.begin(), in(n, 1).dims.end());
    d.insert(d.end(), x.dims.begin() + g + 1, x.dims.end());
    f = uniform(d);
  } else if (op == "Concat" && x.ranked && x.rank() > 0) {  // the lengths along the axis added (RoPE's cos/sin tables)
    const int axis = norm(attr_i(n, "axis", 0), x.rank());
    f = uniform(x.dims);
    f.dims[static_cast<size_t>(axis)] = concat_length(n, axis);
  } else if (op == "GatherElements" && in(n, 1).ranked) {  // the indices' shape (BERT's token types)
    f = uniform(in(n, 1).dims);
  } else if (op == "Transpose" && x.ranked) {
    std::vector<int64_t> perm = attr_ints(n, "perm"), d;
    if (perm.empty())
      for (int i = x.rank() - 1; i >= 0; --i) perm.push_back(i);
    for (int64_t p : perm) d.push_back(x.dims[static_cast<size_t>(norm(p, x.rank()))]);
    if (perm.size() == x.dims.size()) f = uniform(d);
  } else if (op == "Range") {  // Range(0, S, 1) holds S elements
    const Fact& b = in(n, 1);
    const bool counts = single(in(n, 0), 0) && single(in(n, 2), 1) && b.valued && b.vals.size() == 1;
    f = uniform({counts ? Sizes::to_dim(b.vals[0]) : kAnyDim});
  } else if (op == "ConstantOfShape" && x.valued) {
    std::vector<int64_t> d;
    for (int64_t v : x.vals) d.push_back(Sizes::to_dim(v));
    f = uniform(d);
  } else if (op == "Expand" && x.ranked && in(n, 1).valued) {
    const std::vector<int64_t>& shape = in(n, 1).vals;
    const size_t r = std::max(x.dims.size(), shape.size());
    std::vector<int64_t> d(r, 1);
    for (size_t k = 0; k < x.dims.size(); ++k) d[r - x.dims.size() + k] = x.dims[k];
    for (size_t k = 0; k < shape.size(); ++k) d[r - shape.size() + k] = broadcast(d[r - shape.size() + k], Sizes::to_dim(shape[k]));
    f = uniform(d);
  } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" || op == "Where" || op == "Mod" ||
             op == "Equal" || op == "Less" || op == "Greater" || op == "GreaterOrEqual" || op == "LessOrEqual" ||
             op == "And" || op == "Or" || op == "Xor" || op == "Max" || op == "Min") {
    size_t r = 0;
    for (size_t i = 0; i < n.in.size(); ++i) r = std::max(r, in(n, i).dims.size());
    std::vector<int64_t> d(r, 1);
    bool ranked = true;
    for (size_t i = 0; i < n.in.size(); ++i) {
      const Fact& a = in(n, i);
      ranked = ranked && a.ranked;
      for (size_t k = 0; ranked && k < a.dims.size(); ++k) d[r - a.dims.size() + k] = broadcast(d[r - a.dims.size() + k], a.dims[k]);
    }
    if (ranked) f = uniform(d);
  }
  f.kind = Fact::kUniform;
  f.at = -1;
  f.valued = false, f.vals.clear();
  set_all(n, f);
}

// A value that holds N, and no rows: the exporter's shape arithmetic, and the values it shapes.
void Pass::sizes_node(const Node& n) {
  const Fact& x = in(n, 0);
  const std::string& op = n.op;
  if (int_node(n) || row_numbers(n)) return;
  if (op == "ConstantOfShape" && x.kind == Fact::kSizes) {  // every element the same: any blocks
    std::vector<int64_t> d;
    for (int64_t v : x.vals) d.push_back(Sizes::to_dim(v));
    Fact f = rows(d, x.at);
    f.any_layout = true, f.inner = sz_.div(x.vals[static_cast<size_t>(x.at)], sz_.n());
    set(n, 0, f);
  } else if (op == "Expand" && in(n, 1).kind == Fact::kSizes) {
    expand(n);
  } else {
    throw Refused{"it computes with the number of rows"};
  }
}

}  // namespace loom::rt::graph::rows_pass

// rows_shapes.cpp — the row-independence pass (rows.cpp) over values that hold no rows: uniform
// values (constants, shapes of the dimensions past the rows) and the exporter's shape arithmetic
// on N (Shape -> Gather -> Unsqueeze -> Concat), followed as a vector holding N at a known place.
#include <algorithm>

#include "rows_pass.hpp"

namespace loom::rt::graph::rows_pass {

// Every input uniform: so are the outputs; their shape where cheap to know (what a later node
// beside the rows needs: the rank, and whether dimension `at` is 1).
void Pass::uniform_node(const Node& n) {
  const Fact& x = in(n, 0);
  const std::string& op = n.op;
  Fact f = uniform_unranked();
  static const char* same[] = {"Cast", "Identity", "Relu", "Sqrt", "Erf", "Tanh", "Sigmoid", "Neg", "Exp", "Log",
                               "Reciprocal", "Abs", "Not", "Clip", "Softmax", "LogSoftmax", "Trilu"};
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
    std::vector<int64_t> axes, starts;
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
  } else if (op == "Range") {
    f = uniform({kAnyDim});
  } else if (op == "Shape" && x.ranked) {
    f = uniform({kAnyDim});
  } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" || op == "Where" ||
             op == "Equal" || op == "Less" || op == "Greater") {
    size_t r = 0;
    for (size_t i = 0; i < n.in.size(); ++i) r = std::max(r, in(n, i).dims.size());
    std::vector<int64_t> d(r, 1);
    bool ranked = true;
    for (size_t i = 0; i < n.in.size(); ++i) {
      const Fact& a = in(n, i);
      ranked = ranked && a.ranked;
      for (size_t k = 0; ranked && k < a.dims.size(); ++k) {
        int64_t& o = d[r - a.dims.size() + k];
        o = o == 1 ? a.dims[k] : a.dims[k] == 1 || a.dims[k] == o ? o : kAnyDim;
      }
    }
    if (ranked) f = uniform(d);
  }
  f.kind = Fact::kUniform;
  f.at = -1;
  set_all(n, f);
}

// A value that holds N, and no rows: the exporter's shape arithmetic.
void Pass::sizes_node(const Node& n) {
  const Fact& x = in(n, 0);
  const std::string& op = n.op;
  std::vector<int64_t> idx;
  if ((op == "Cast" || op == "Identity") && n.in.size() == 1) {
    set_all(n, x);
  } else if (op == "Gather" && x.kind == Fact::kSizes && const_ints(n, 1, &idx) && attr_i(n, "axis", 0) == 0) {
    const int len = static_cast<int>(x.dims[0]);
    int found = -1, count = 0;
    for (size_t j = 0; j < idx.size(); ++j)
      if (norm(idx[j], len) == x.at) found = static_cast<int>(j), ++count;
    const bool scalar = constants_[static_cast<size_t>(n.in[1])].ndim() == 0;
    if (count > 1) throw Refused{"N is taken twice"};
    if (count == 0) set(n, 0, uniform(scalar ? std::vector<int64_t>{} : std::vector<int64_t>{static_cast<int64_t>(idx.size())}));
    else if (scalar) set(n, 0, [] { Fact f; f.kind = Fact::kSize, f.ranked = true; return f; }());
    else set(n, 0, sizes(static_cast<int64_t>(idx.size()), found));
  } else if (op == "Unsqueeze" && x.kind == Fact::kSize && x.rank() == 0) {
    set(n, 0, sizes(1, 0));
  } else if (op == "Squeeze" && x.kind == Fact::kSizes && x.dims[0] == 1) {
    Fact f;
    f.kind = Fact::kSize, f.ranked = true;
    set(n, 0, f);
  } else if (op == "Concat" && norm(attr_i(n, "axis", 0), 1) == 0) {
    int64_t offset = 0;
    int at = -1;
    for (size_t i = 0; i < n.in.size(); ++i) {
      const Fact& p = in(n, i);
      if (!p.ranked || p.rank() != 1 || p.dims[0] < 0) throw Refused{"a piece of the shape has no known length"};
      if (p.kind == Fact::kSizes) {
        if (at >= 0) throw Refused{"N appears twice in a shape"};
        at = static_cast<int>(offset + p.at);
      }
      offset += p.dims[0];
    }
    set(n, 0, sizes(offset, at));
  } else if (op == "ConstantOfShape" && x.kind == Fact::kSizes) {
    set(n, 0, rows_of_rank(static_cast<int>(x.dims[0]), x.at));
  } else if (op == "Expand" && in(n, 1).kind == Fact::kSizes) {
    expand(n);
  } else {
    throw Refused{"it computes with the number of rows"};
  }
}


}  // namespace loom::rt::graph::rows_pass

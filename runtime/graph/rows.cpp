// rows.cpp — whether several requests may share one run: a pass over the folded graph that
// follows dimension 0 of every input ("the rows") through each node and proves that row i of
// every output depends on row i of the inputs alone. The shape arithmetic PyTorch's exporter
// writes (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, ConstantOfShape, Expand) is
// followed as such: a vector holding the number of rows at a known place. Whatever the pass
// cannot follow (an axis op over the rows, a Reshape that merges them, an operator it does not
// know) makes the model run one request at a time, and the reason is kept for the log.
#include <algorithm>

#include "ops.hpp"

namespace loom::rt::graph {
namespace {

constexpr int64_t kRowsDim = -2;  // the dimension that is the rows (N)
constexpr int64_t kAnyDim = -1;   // a dimension the pass does not know

// What the pass knows of one value.
struct Fact {
  enum Kind {
    kUnknown,  // not followed: nothing may depend on it
    kUniform,  // the same whether the request runs alone or beside others (constants, shapes
               // computed from dimensions past the rows, which joined requests share)
    kRows,     // row `at` of it depends on that row of the inputs alone
    kSize,     // a scalar equal to N
    kSizes,    // a 1-D int vector whose element `at` is N, the others uniform
  } kind = kUnknown;
  bool ranked = false;         // dims is the value's shape (kAnyDim where unknown)
  std::vector<int64_t> dims;   // kRowsDim at the rows' axis
  int at = -1;
  int rank() const { return static_cast<int>(dims.size()); }
};

Fact uniform_unranked() {
  Fact f;
  f.kind = Fact::kUniform;
  return f;
}

Fact uniform(std::vector<int64_t> dims) {
  Fact f;
  f.kind = Fact::kUniform, f.ranked = true, f.dims = std::move(dims);
  return f;
}

Fact rows(std::vector<int64_t> dims, int at) {
  Fact f;
  f.kind = Fact::kRows, f.ranked = true, f.dims = std::move(dims), f.at = at;
  f.dims[static_cast<size_t>(at)] = kRowsDim;
  return f;
}

Fact rows_of_rank(int rank, int at) { return rows(std::vector<int64_t>(static_cast<size_t>(rank), kAnyDim), at); }

Fact sizes(int64_t length, int at) {
  Fact f;
  f.kind = Fact::kSizes, f.ranked = true, f.dims = {length}, f.at = at;
  return f;
}

// The refusal a handler returns: the reason for the log.
struct Refused {
  std::string why;
};

class Pass {
 public:
  Pass(const std::vector<Tensor>& constants, size_t values) : constants_(constants), facts_(values) {
    for (size_t v = 0; v < values; ++v)
      if (constants_[v].defined()) facts_[v] = uniform(constants_[v].shape());
  }
  Fact& fact(int v) { return facts_[static_cast<size_t>(v)]; }
  // Follows one node; the reason when it cannot.
  std::string follow(const Node& n);

 private:
  const std::vector<Tensor>& constants_;
  std::vector<Fact> facts_;

  const Fact& in(const Node& n, size_t i) {
    static const Fact absent = uniform_unranked();
    return i < n.in.size() && n.in[i] >= 0 ? fact(n.in[i]) : absent;
  }
  // The values of constant input i (false when it is not a constant int tensor).
  bool const_ints(const Node& n, size_t i, std::vector<int64_t>* out) const {
    if (i >= n.in.size() || n.in[i] < 0) return false;
    const Tensor& t = constants_[static_cast<size_t>(n.in[i])];
    if (!t.defined() || (t.dtype() != DType::kI64 && t.dtype() != DType::kI32)) return false;
    *out = ints_of(n, t);
    return true;
  }
  // Axes from attribute `name` or else constant input `input` (opset 13's move); false when
  // neither says (the op's own default then applies).
  bool axes_of(const Node& n, const char* name, size_t input, std::vector<int64_t>* axes) const {
    if (has_attr(n, name)) {
      *axes = attr_ints(n, name);
      return true;
    }
    if (input < n.in.size() && n.in[input] >= 0) {
      if (!const_ints(n, input, axes)) throw Refused{"its axes are computed at run time"};
      return true;
    }
    return false;
  }
  void set(const Node& n, size_t i, Fact f) {
    if (i < n.out.size() && n.out[i] >= 0) fact(n.out[i]) = std::move(f);
  }
  void set_all(const Node& n, const Fact& f) {
    for (size_t i = 0; i < n.out.size(); ++i) set(n, i, f);
  }
  void uniform_node(const Node& n);
  void sizes_node(const Node& n);
  void rows_node(const Node& n);
  void elementwise(const Node& n);
  void matmul(const Node& n);
  void reshape(const Node& n, const Fact& x);
  void expand(const Node& n);
  void gather(const Node& n);
  void unsqueeze(const Node& n, const Fact& x);
};

int norm(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) throw Refused{"axis " + std::to_string(axis) + " is outside rank " + std::to_string(rank)};
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

const Fact& need_ranked(const Fact& f) {
  if (!f.ranked) throw Refused{"the rank of an input is not known here"};
  return f;
}

// Rows only along `at`, and nowhere in `axes` (normalized for `rank`).
void not_over_rows(const std::vector<int64_t>& axes, int rank, int at, const char* what) {
  for (int64_t a : axes)
    if (norm(a, rank) == at) throw Refused{std::string(what) + " runs over the rows (dimension " + std::to_string(at) + ")"};
}

std::string Pass::follow(const Node& n) {
  bool any_rows = false, any_size = false;
  for (int v : n.in) {
    if (v < 0) continue;
    const Fact& f = fact(v);
    if (f.kind == Fact::kUnknown) {
      set_all(n, Fact());
      return "";  // the first refusal already said why
    }
    any_rows = any_rows || f.kind == Fact::kRows;
    any_size = any_size || f.kind == Fact::kSize || f.kind == Fact::kSizes;
  }
  try {
    if (any_rows) rows_node(n);
    else if (any_size) sizes_node(n);
    else uniform_node(n);
    return "";
  } catch (const Refused& r) {
    set_all(n, Fact());
    return n.label() + ": " + r.why;
  } catch (const Error& e) {  // an attribute or constant the node's kernel would refuse too
    set_all(n, Fact());
    return e.what();
  }
}

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

void Pass::rows_node(const Node& n) {
  const std::string& op = n.op;
  const Fact& x = in(n, 0);
  static const char* elementwise_ops[] = {"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "Where",
                                          "Not", "Cast", "Relu", "Sqrt", "Erf", "Tanh", "Sigmoid", "Neg", "Exp",
                                          "Log", "Reciprocal", "Abs", "Identity", "Dropout", "Clip"};
  if (std::find(std::begin(elementwise_ops), std::end(elementwise_ops), op) != std::end(elementwise_ops))
    return elementwise(n);
  if (op == "MatMul") return matmul(n);
  if (op == "Gather") return gather(n);
  if (op == "Expand") return expand(n);
  for (size_t i = 1; i < n.in.size(); ++i)  // below: the rows come in as input 0 only
    if (in(n, i).kind != Fact::kUniform && !(op == "Reshape" && i == 1) && !(op == "Concat"))
      throw Refused{"input " + std::to_string(i) + " depends on the rows"};
  if (x.kind != Fact::kRows) throw Refused{"its first input is not the rows"};
  const int r = need_ranked(x).rank();
  std::vector<int64_t> axes;
  if (op == "Shape") {  // opset 15's start and end clamp to the rank
    auto clamp = [r](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
    const int64_t s = clamp(attr_i(n, "start", 0)), e = has_attr(n, "end") ? clamp(attr_i(n, "end", r)) : r;
    const int64_t len = std::max<int64_t>(0, e - s);
    return set(n, 0, x.at >= s && x.at < e ? sizes(len, static_cast<int>(x.at - s)) : uniform({len}));
  }
  if (op == "Reshape") return reshape(n, x);
  if (op == "Unsqueeze") return unsqueeze(n, x);
  if (op == "Transpose") {
    std::vector<int64_t> perm = attr_ints(n, "perm");
    if (perm.empty())
      for (int i = r - 1; i >= 0; --i) perm.push_back(i);
    std::vector<int64_t> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < static_cast<int>(sorted.size()); ++i)
      if (sorted[static_cast<size_t>(i)] != i || static_cast<int>(perm.size()) != r) throw Refused{"perm is not a permutation of its dimensions"};
    std::vector<int64_t> d;
    int at = -1;
    for (int i = 0; i < r; ++i) {
      d.push_back(x.dims[static_cast<size_t>(norm(perm[static_cast<size_t>(i)], r))]);
      if (norm(perm[static_cast<size_t>(i)], r) == x.at) at = i;
    }
    return set(n, 0, rows(d, at));
  }
  if (op == "Squeeze") {
    if (!axes_of(n, "axes", 1, &axes)) throw Refused{"it squeezes every dimension of 1, the rows' too when N is 1"};
    not_over_rows(axes, r, x.at, "it");
    std::vector<int64_t> d;
    int at = -1;
    for (int i = 0; i < r; ++i) {
      bool gone = false;
      for (int64_t a : axes) gone = gone || norm(a, r) == i;
      if (i == x.at) at = static_cast<int>(d.size());
      if (!gone) d.push_back(x.dims[static_cast<size_t>(i)]);
    }
    return set(n, 0, rows(d, at));
  }
  if (op == "Flatten") {
    if (x.at != 0 || norm(attr_i(n, "axis", 1), r + 1) != 1) throw Refused{"it merges the rows with another dimension"};
    return set(n, 0, rows_of_rank(2, 0));
  }
  if (op == "Concat") {
    for (size_t i = 0; i < n.in.size(); ++i)
      if (in(n, i).kind != Fact::kRows || in(n, i).at != x.at || in(n, i).rank() != r)
        throw Refused{"it joins the rows with a value that has none"};
    not_over_rows({attr_i(n, "axis", 0)}, r, x.at, "it");
    return set(n, 0, rows_of_rank(r, x.at));
  }
  if (op == "Split") {
    not_over_rows({attr_i(n, "axis", 0)}, r, x.at, "it");
    return set_all(n, rows_of_rank(r, x.at));
  }
  if (op == "Slice") {
    if (!const_ints(n, 3, &axes)) {
      const Fact& s = in(n, 1);
      if (!s.ranked || s.rank() != 1 || s.dims[0] < 0) throw Refused{"its axes are not known"};
      for (int64_t i = 0; i < s.dims[0]; ++i) axes.push_back(i);
    }
    not_over_rows(axes, r, x.at, "it");
    Fact f = x;
    for (int64_t a : axes) f.dims[static_cast<size_t>(norm(a, r))] = kAnyDim;
    return set(n, 0, f);
  }
  if (op == "Softmax" || op == "LogSoftmax") {
    not_over_rows({attr_i(n, "axis", -1)}, r, x.at, "it");
    return set(n, 0, x);
  }
  if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax") {
    if (!axes_of(n, "axes", 1, &axes) || axes.empty()) {
      if (attr_i(n, "noop_with_empty_axes", 0)) return set(n, 0, x);
      throw Refused{"it reduces over every dimension, the rows' included"};
    }
    not_over_rows(axes, r, x.at, "it");
    if (attr_i(n, "keepdims", 1)) return set(n, 0, rows_of_rank(r, x.at));
    int at = x.at;
    for (int64_t a : axes) at -= norm(a, r) < x.at ? 1 : 0;
    return set(n, 0, rows_of_rank(r - static_cast<int>(axes.size()), at));
  }
  if (op == "LayerNormalization") {
    if (x.at >= norm(attr_i(n, "axis", -1), r)) throw Refused{"it normalizes over the rows"};
    return set_all(n, x);
  }
  if (op == "Trilu") {
    if (x.at >= r - 2) throw Refused{"its matrix dimensions hold the rows"};
    return set(n, 0, x);
  }
  if (op == "Pad") {
    std::vector<int64_t> pads;
    if (!const_ints(n, 1, &pads) && !(pads = attr_ints(n, "pads")).size()) throw Refused{"its pads are not constant"};
    if (static_cast<int>(pads.size()) != 2 * r) throw Refused{"its pads do not match the rank"};
    if (pads[static_cast<size_t>(x.at)] || pads[static_cast<size_t>(x.at + r)]) throw Refused{"it pads the rows"};
    return set(n, 0, rows_of_rank(r, x.at));
  }
  if (op == "Gemm") {
    if (x.at != (attr_i(n, "transA", 0) ? 1 : 0) || r != 2) throw Refused{"the rows are its contracted dimension"};
    const Fact& c = in(n, 2);
    if (n.in.size() > 2 && n.in[2] >= 0 && (!c.ranked || (c.rank() == 2 && c.dims[0] != 1)))
      throw Refused{"its C has rows of its own"};
    return set(n, 0, rows_of_rank(2, 0));
  }
  if (op == "Conv" || op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool" || op == "BatchNormalization") {
    if (x.at != 0) throw Refused{"the rows are not its batch dimension"};
    return set_all(n, rows_of_rank(r, 0));
  }
  if (op == "QuantizeLinear" || op == "DequantizeLinear") {
    const Fact& s = in(n, 1);
    const bool per_axis = !s.ranked || (s.rank() > 0 && s.dims[0] != 1);
    if (per_axis && norm(attr_i(n, "axis", 1), r) == x.at) throw Refused{"its scales run along the rows"};
    return set(n, 0, rows_of_rank(r, x.at));
  }
  throw Refused{"the pass does not follow rows through " + op};
}

// numpy broadcasting: every rows input meets the others at one axis, and no uniform input has
// more than one element there (which would make a row's answer depend on its place).
void Pass::elementwise(const Node& n) {
  int r = 0;
  for (size_t i = 0; i < n.in.size(); ++i)
    if (n.in[i] >= 0) r = std::max(r, need_ranked(in(n, i)).rank());
  int at = -1;
  for (size_t i = 0; i < n.in.size(); ++i) {
    const Fact& a = in(n, i);
    if (n.in[i] < 0 || a.kind != Fact::kRows) continue;
    const int here = a.at + r - a.rank();
    if (at >= 0 && here != at) throw Refused{"its inputs hold the rows on different dimensions"};
    at = here;
  }
  for (size_t i = 0; i < n.in.size(); ++i) {
    const Fact& a = in(n, i);
    if (n.in[i] < 0 || a.kind == Fact::kRows) continue;
    if (a.kind != Fact::kUniform) throw Refused{"it mixes the rows with the number of rows"};
    const int pos = at - (r - a.rank());
    if (pos >= 0 && a.dims[static_cast<size_t>(pos)] != 1)
      throw Refused{"input " + std::to_string(i) + " may have several elements along the rows"};
  }
  set_all(n, rows_of_rank(r, at));
}

void Pass::matmul(const Node& n) {
  const Fact &a = need_ranked(in(n, 0)), &b = need_ranked(in(n, 1));
  if (a.rank() < 2 || b.rank() < 2) throw Refused{"a 1-D MatMul operand"};
  const int r = std::max(a.rank(), b.rank());
  int at = -1;
  if (a.kind == Fact::kRows) {
    if (a.at == a.rank() - 1) throw Refused{"the rows are its contracted dimension"};
    at = a.at == a.rank() - 2 ? r - 2 : a.at + r - a.rank();
  }
  if (b.kind == Fact::kRows) {
    if (b.at == b.rank() - 2) throw Refused{"the rows are its contracted dimension"};
    const int here = b.at == b.rank() - 1 ? r - 1 : b.at + r - b.rank();
    if (at >= 0 && here != at) throw Refused{"its operands hold the rows on different dimensions"};
    at = here;
  }
  for (const Fact* u : {&a, &b}) {
    if (u->kind == Fact::kRows) continue;
    if (u->kind != Fact::kUniform) throw Refused{"it mixes the rows with the number of rows"};
    const int pos = at - (r - u->rank());
    if (at < r - 2 && pos >= 0 && u->dims[static_cast<size_t>(pos)] != 1)
      throw Refused{"an operand may have several elements along the rows"};
  }
  set(n, 0, rows_of_rank(r, at));
}

// Reshape keeps the rows when they lead and the new shape's first element is N: the shape the
// exporter computes, 0 (copy), or -1 with every other dimension known to match.
void Pass::reshape(const Node& n, const Fact& x) {
  if (x.at != 0) throw Refused{"the rows are not its leading dimension"};
  const Fact& s = in(n, 1);
  std::vector<int64_t> shape;
  if (s.kind == Fact::kSizes) {
    if (s.at != 0) throw Refused{"N moves away from the first dimension"};
    return set(n, 0, rows_of_rank(static_cast<int>(s.dims[0]), 0));
  }
  if (s.kind != Fact::kUniform || !const_ints(n, 1, &shape) || shape.empty())
    throw Refused{"its shape is computed from the rows, or not known"};
  if (shape[0] == 0 && !attr_i(n, "allowzero", 0)) return set(n, 0, rows_of_rank(static_cast<int>(shape.size()), 0));
  int64_t before = 1, after = 1;
  for (size_t i = 1; i < x.dims.size(); ++i) before = x.dims[i] > 0 && before > 0 ? before * x.dims[i] : -1;
  for (size_t i = 1; i < shape.size(); ++i) after = shape[i] > 0 && after > 0 ? after * shape[i] : -1;
  if (shape[0] != -1 || before <= 0 || before != after) throw Refused{"it may merge the rows with another dimension"};
  return set(n, 0, rows_of_rank(static_cast<int>(shape.size()), 0));
}

// Expand(x, shape): the rows of x, or N in the shape (a uniform x repeated for every row).
void Pass::expand(const Node& n) {
  const Fact &x = need_ranked(in(n, 0)), &s = in(n, 1);
  if (!s.ranked || s.rank() != 1 || s.dims[0] < 0) throw Refused{"its shape has no known length"};
  const int r = std::max(x.rank(), static_cast<int>(s.dims[0]));
  const int off = r - static_cast<int>(s.dims[0]);
  std::vector<int64_t> shape;
  int at = x.kind == Fact::kRows ? x.at + r - x.rank() : -1;
  if (s.kind == Fact::kSizes) {
    if (at >= 0 && at != s.at + off) throw Refused{"the rows and N sit on different dimensions"};
    at = s.at + off;
    const int pos = at - (r - x.rank());
    if (x.kind == Fact::kUniform && pos >= 0 && x.dims[static_cast<size_t>(pos)] != 1)
      throw Refused{"its input may have several elements along the rows"};
  } else if (s.kind != Fact::kUniform || !const_ints(n, 1, &shape) ||
             (at - off >= 0 && shape[static_cast<size_t>(at - off)] != 1)) {
    throw Refused{"its shape may repeat the rows"};
  }
  set(n, 0, rows_of_rank(r, at));
}

void Pass::gather(const Node& n) {
  const Fact &d = need_ranked(in(n, 0)), &i = need_ranked(in(n, 1));
  const int g = norm(attr_i(n, "axis", 0), d.rank());
  if (d.kind == Fact::kRows && i.kind == Fact::kUniform) {
    if (g == d.at) throw Refused{"it picks rows"};
    return set(n, 0, rows_of_rank(d.rank() - 1 + i.rank(), d.at < g ? d.at : d.at - 1 + i.rank()));
  }
  if (d.kind == Fact::kUniform && i.kind == Fact::kRows) return set(n, 0, rows_of_rank(d.rank() - 1 + i.rank(), g + i.at));
  throw Refused{"its data and indices both depend on the rows"};
}

void Pass::unsqueeze(const Node& n, const Fact& x) {
  std::vector<int64_t> axes;
  if (!axes_of(n, "axes", 1, &axes)) throw Refused{"it has no axes"};
  const int r = x.rank() + static_cast<int>(axes.size());
  std::vector<bool> added(static_cast<size_t>(r), false);
  for (int64_t a : axes) added[static_cast<size_t>(norm(a, r))] = true;
  std::vector<int64_t> d;
  int at = -1;
  for (int i = 0, k = 0; i < r; ++i) {
    if (added[static_cast<size_t>(i)]) {
      d.push_back(1);
      continue;
    }
    if (k == x.at) at = i;
    d.push_back(x.dims[static_cast<size_t>(k++)]);
  }
  set(n, 0, rows(d, at));
}

}  // namespace

std::string rows_independent(const std::vector<Node>& nodes, const std::vector<Tensor>& constants,
                             const std::vector<int>& input_ids, const std::vector<TensorInfo>& inputs,
                             const std::vector<int>& output_ids, const std::vector<std::string>& names) {
  Pass pass(constants, constants.size());
  for (size_t k = 0; k < input_ids.size(); ++k) {
    std::vector<int64_t> dims = inputs[k].shape;
    if (dims.empty()) return "input '" + inputs[k].name + "' is a scalar";
    for (auto& d : dims) d = d < 0 ? kAnyDim : d;
    pass.fact(input_ids[k]) = rows(dims, 0);
  }
  std::string why;
  for (const Node& n : nodes) {
    std::string w = pass.follow(n);
    if (why.empty()) why = w;
  }
  if (!why.empty()) return why;
  for (int v : output_ids) {
    const Fact& f = pass.fact(v);
    if (f.kind != Fact::kRows || f.at != 0)
      return "output '" + names[static_cast<size_t>(v)] + "' does not keep the rows as its first dimension";
  }
  return "";
}

}  // namespace loom::rt::graph

// rows_pass.hpp — what the row-independence pass (rows.cpp, rows_shapes.cpp) shares: what it
// knows of each value, and the pass itself.
#pragma once

#include <string>
#include <vector>

#include "ops.hpp"

namespace loom::rt::graph::rows_pass {

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

inline Fact uniform_unranked() {
  Fact f;
  f.kind = Fact::kUniform;
  return f;
}

inline Fact uniform(std::vector<int64_t> dims) {
  Fact f;
  f.kind = Fact::kUniform, f.ranked = true, f.dims = std::move(dims);
  return f;
}

inline Fact rows(std::vector<int64_t> dims, int at) {
  Fact f;
  f.kind = Fact::kRows, f.ranked = true, f.dims = std::move(dims), f.at = at;
  f.dims[static_cast<size_t>(at)] = kRowsDim;
  return f;
}

inline Fact rows_of_rank(int rank, int at) { return rows(std::vector<int64_t>(static_cast<size_t>(rank), kAnyDim), at); }

inline Fact sizes(int64_t length, int at) {
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
  explicit Pass(const std::vector<Tensor>& constants) : constants_(constants), facts_(constants.size()) {
    for (size_t v = 0; v < constants.size(); ++v)
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
  void layout_op(const Node& n, const Fact& x);  // Reshape, Transpose, Squeeze, Flatten, Concat, ...
  void axis_op(const Node& n, const Fact& x);    // Softmax, reductions, norms, Pad, Gemm, Conv, ...
  void elementwise(const Node& n);
  void matmul(const Node& n);
  void reshape(const Node& n, const Fact& x);
  void expand(const Node& n);
  void gather(const Node& n);
  void unsqueeze(const Node& n, const Fact& x);
};

inline int norm(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) throw Refused{"axis " + std::to_string(axis) + " is outside rank " + std::to_string(rank)};
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

inline const Fact& need_ranked(const Fact& f) {
  if (!f.ranked) throw Refused{"the rank of an input is not known here"};
  return f;
}

// Rows only along `at`, and nowhere in `axes` (normalized for `rank`).
inline void not_over_rows(const std::vector<int64_t>& axes, int rank, int at, const char* what) {
  for (int64_t a : axes)
    if (norm(a, rank) == at) throw Refused{std::string(what) + " runs over the rows (dimension " + std::to_string(at) + ")"};
}

}  // namespace loom::rt::graph::rows_pass

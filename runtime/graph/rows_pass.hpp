// rows_pass.hpp — what the row-independence pass (rows.cpp, rows_shapes.cpp, rows_sizes.cpp)
// shares: the sizes it can name, what it knows of each value, and the pass itself.
#pragma once

#include <climits>
#include <map>
#include <cstdint>
#include <string>
#include <vector>

#include "ops.hpp"

namespace loom::rt::graph::rows_pass {

constexpr int64_t kRowsDim = -2;  // in Fact::dims: the dimension that holds the rows
constexpr int64_t kAnyDim = -1;   // in Fact::dims: a dimension the pass does not know
// In Fact::vals: an element the pass does not know (beside the symbols, far from any number a
// graph writes: INT64_MIN and INT64_MAX, Slice's open ends, stay numbers).
constexpr int64_t kUnknown = -(int64_t{1} << 40) + 1;

// The sizes the pass names: c · s1 · s2 ..., a product of symbols, N the first of them and the
// others the sizes past the rows that the model's inputs leave open (joined requests share
// them). Each is kept as one int64: a plain number, or an entry of this table.
class Sizes {
 public:
  static bool symbolic(int64_t v) { return v <= kSym0 && v > kSym0 - (int64_t{1} << 24); }
  int64_t n() { return put({1, {0}}); }
  int64_t fresh() { return put({1, {next_++}}); }
  int64_t mul(int64_t a, int64_t b);
  int64_t div(int64_t a, int64_t b);  // kUnknown unless b divides a
  int n_power(int64_t v) const;       // how many times N is a factor of v
  // Whether a == b holds for one value of one open size (32·N·S = 192·N gives S = 6: a sequence
  // length an exporter fixed inside the graph), and v with that value put in.
  bool solve(int64_t a, int64_t b, int* sym, int64_t* value) const;
  int64_t put_in(int64_t v, int sym, int64_t value);
  // A dimension (kAnyDim where unknown) as a size, and back.
  static int64_t of_dim(int64_t d) { return d == kAnyDim || d == kRowsDim ? kUnknown : d; }
  static int64_t to_dim(int64_t v) { return v >= 0 || symbolic(v) ? v : kAnyDim; }

 private:
  static constexpr int64_t kSym0 = -(int64_t{1} << 40);
  struct Mono {
    int64_t c;
    std::vector<int> syms;  // sorted, with repeats
  };
  std::vector<Mono> table_;
  int next_ = 1;
  Mono get(int64_t v) const { return symbolic(v) ? table_[static_cast<size_t>(kSym0 - v)] : Mono{v, {}}; }
  int64_t put(Mono m);
};

// What the pass knows of one value.
struct Fact {
  enum Kind {
    kUnknown,  // not followed: nothing may depend on it
    kUniform,  // the same whether the request runs alone or beside others (constants, shapes
               // computed from dimensions past the rows, which joined requests share)
    kRows,     // row `at` of it depends on that row of the inputs alone
    kSize,     // an int scalar whose size holds N once (vals)
    kSizes,    // a 1-D int vector whose element `at` holds N once, the others not
  } kind = kUnknown;
  bool ranked = false;         // dims is the value's shape (kAnyDim where unknown)
  std::vector<int64_t> dims;   // kRowsDim at the rows' axis, Sizes' symbols where named
  int at = -1;
  // kRows: dimension `at` holds outer · N · inner elements, element i of row (i / inner) % N
  // (the rows in blocks of `inner`, as attention's [N·heads, T, d] holds them); any_layout: every
  // element along it is the same (ConstantOfShape, Expand of a value without rows), so it fits
  // whatever blocks the other operands have.
  int64_t outer = 1, inner = 1;
  bool any_layout = false;
  bool valued = false;         // vals holds the elements
  std::vector<int64_t> vals;   // an int scalar's or vector's elements as sizes, when known
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

// The rows of `like` (their blocks) on dimension `at` of a value of these dims.
inline Fact rows_like(const Fact& like, std::vector<int64_t> dims, int at) {
  Fact f = rows(std::move(dims), at);
  f.outer = like.outer, f.inner = like.inner, f.any_layout = like.any_layout;
  return f;
}

// Whether f is known to hold the one value v (a scalar or a 1-element vector).
inline bool single(const Fact& f, int64_t v) { return f.valued && f.vals.size() == 1 && f.vals[0] == v; }

inline Fact int_values(std::vector<int64_t> vals, bool scalar) {
  Fact f = uniform(scalar ? std::vector<int64_t>{} : std::vector<int64_t>{static_cast<int64_t>(vals.size())});
  f.valued = true, f.vals = std::move(vals);
  return f;
}

// The refusal a handler returns: the reason for the log.
struct Refused {
  std::string why;
};

class Pass {
 public:
  explicit Pass(const std::vector<Tensor>& constants);
  Fact& fact(int v) { return facts_[static_cast<size_t>(v)]; }
  Sizes& sizes() { return sz_; }
  // Follows one node; the reason when it cannot.
  std::string follow(const Node& n);

 private:
  const std::vector<Tensor>& constants_;
  std::vector<Fact> facts_;
  Sizes sz_;
  // Values whose elements are their own row's number (rows_index.cpp): every element
  // (kEveryElement), or element k of the last dimension.
  static constexpr int64_t kEveryElement = -1;
  std::map<int, int64_t> numbers_;

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
  // The elements of input i as sizes (false when the pass does not know them).
  bool vals_of(const Node& n, size_t i, std::vector<int64_t>* out) const {
    if (i >= n.in.size() || n.in[i] < 0 || !facts_[static_cast<size_t>(n.in[i])].valued) return false;
    *out = facts_[static_cast<size_t>(n.in[i])].vals;
    return true;
  }
  // A value of these elements: kSize(s) where one holds N.
  Fact with_vals(std::vector<int64_t> vals, bool scalar);
  // The size of a rows value's rows dimension: outer · N · inner.
  int64_t full(const Fact& x) { return sz_.mul(sz_.mul(x.outer, sz_.n()), x.inner); }
  // The rows of a and b (one of them may be a value without rows) in one layout.
  void same_blocks(Fact* acc, const Fact& a) const;
  bool int_node(const Node& n);  // Shape and the int arithmetic on its elements
  bool slice_vals(const Node& n, const std::vector<int64_t>& a, std::vector<int64_t>* out) const;
  void uniform_node(const Node& n);
  void sizes_node(const Node& n);
  void rows_node(const Node& n);
  std::vector<int64_t> image_dims(const Node& n, const Fact& x) const;
  std::vector<int64_t> split_parts(const Node& n, int64_t len) const;
  int64_t concat_length(const Node& n, int axis) const;  // the inputs' lengths along `axis` added
  void layout_op(const Node& n, const Fact& x);  // Reshape, Transpose, Squeeze, Flatten, Concat, ...
  void axis_op(const Node& n, const Fact& x);    // Softmax, reductions, norms, Pad, Gemm, Conv, ...
  void elementwise(const Node& n);
  void matmul(const Node& n);
  void recurrent(const Node& n);  // RNN, GRU, LSTM
  void matmul_integer(const Node& n);
  void reshape(const Node& n, const Fact& x);
  void reshape_tail(const Node& n, const Fact& x, const std::vector<int64_t>& shape);
  void expand(const Node& n);
  void gather(const Node& n);
  void unsqueeze(const Node& n, const Fact& x);
  bool row_numbers(const Node& n);  // Range(0, N, 1)
  void carry_numbers(const Node& n);
  void gather_nd(const Node& n);
  void contrib(const Node& n);  // ONNX Runtime's com.microsoft operators (rows_contrib.cpp)
  void batch_operand(const Node& n, size_t i, bool broadcast);
  void quantized(const Node& n);  // QLinearConv, ConvInteger and ORT's QOperator operators, as their float ones
};

inline int norm(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) throw Refused{"axis " + std::to_string(axis) + " is outside rank " + std::to_string(rank)};
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// One dimension of a broadcast: 1 gives way to the other, and so does an unknown one (a run
// that passes has it 1 or equal); sizes the pass names differently make it unknown.
inline int64_t broadcast(int64_t a, int64_t b) {
  if (a == kRowsDim || b == kRowsDim) return kRowsDim;
  if (a == 1 || a == kAnyDim) return b == 1 ? a : b;
  return b == 1 || b == kAnyDim || a == b ? a : kAnyDim;
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

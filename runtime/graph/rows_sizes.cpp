// rows_sizes.cpp — the sizes the row-independence pass names (products of N and the dimensions
// the inputs leave open), the int arithmetic the exporter writes on them (Shape -> Gather ->
// Mul -> Unsqueeze -> Concat), and Reshape, proven with them: a shape may merge the rows with
// other dimensions ([T·N, d], [N·heads, T, d]) and split them again, and the pass knows in which
// dimension they land and in what blocks.
#include <algorithm>

#include "rows_pass.hpp"

namespace loom::rt::graph::rows_pass {

namespace {
bool plain(int64_t v) { return v != kUnknown && !Sizes::symbolic(v); }
}  // namespace

int64_t Sizes::put(Mono m) {
  if (m.syms.empty()) return plain(m.c) ? m.c : kUnknown;
  for (size_t i = 0; i < table_.size(); ++i)
    if (table_[i].c == m.c && table_[i].syms == m.syms) return kSym0 - static_cast<int64_t>(i);
  if (table_.size() >= (size_t{1} << 20)) return kUnknown;
  table_.push_back(std::move(m));
  return kSym0 - static_cast<int64_t>(table_.size() - 1);
}

int64_t Sizes::mul(int64_t a, int64_t b) {
  if (a == kUnknown || b == kUnknown) return kUnknown;
  Mono x = get(a), y = get(b);
  int64_t c = 0;
  if (__builtin_mul_overflow(x.c, y.c, &c)) return kUnknown;
  if (!x.syms.empty() || !y.syms.empty()) {
    if (x.c < 0 || y.c < 0) return kUnknown;
    if (c == 0) return 0;
  }
  x.syms.insert(x.syms.end(), y.syms.begin(), y.syms.end());
  std::sort(x.syms.begin(), x.syms.end());
  return put({c, std::move(x.syms)});
}

int64_t Sizes::div(int64_t a, int64_t b) {
  if (a == kUnknown || b == kUnknown) return kUnknown;
  Mono x = get(a), y = get(b);
  if (y.c == 0) return kUnknown;
  if (x.syms.empty() && y.syms.empty()) return x.c / y.c;  // ONNX's int Div: truncated
  if (x.c % y.c) return kUnknown;
  for (int s : y.syms) {
    auto it = std::find(x.syms.begin(), x.syms.end(), s);
    if (it == x.syms.end()) return kUnknown;
    x.syms.erase(it);
  }
  return put({x.c / y.c, std::move(x.syms)});
}

int Sizes::n_power(int64_t v) const {
  if (!symbolic(v)) return 0;
  const Mono& m = table_[static_cast<size_t>(kSym0 - v)];
  return static_cast<int>(std::count(m.syms.begin(), m.syms.end(), 0));
}

bool Sizes::solve(int64_t a, int64_t b, int* sym, int64_t* value) const {
  if (a == kUnknown || b == kUnknown || a == b) return false;
  Mono x = get(a), y = get(b);
  std::vector<int> common, left, right;
  std::set_intersection(x.syms.begin(), x.syms.end(), y.syms.begin(), y.syms.end(), std::back_inserter(common));
  std::set_difference(x.syms.begin(), x.syms.end(), common.begin(), common.end(), std::back_inserter(left));
  std::set_difference(y.syms.begin(), y.syms.end(), common.begin(), common.end(), std::back_inserter(right));
  if (!right.empty()) std::swap(left, right), std::swap(x.c, y.c);
  if (left.size() != 1 || !right.empty() || left[0] == 0 || x.c <= 0 || y.c % x.c) return false;
  *sym = left[0], *value = y.c / x.c;
  return true;
}

int64_t Sizes::put_in(int64_t v, int sym, int64_t value) {
  Mono m = get(v);
  int64_t c = m.c;
  for (auto it = std::find(m.syms.begin(), m.syms.end(), sym); it != m.syms.end(); it = std::find(m.syms.begin(), m.syms.end(), sym)) {
    if (__builtin_mul_overflow(c, value, &c)) return kUnknown;
    m.syms.erase(it);
  }
  return put({c, std::move(m.syms)});
}

Pass::Pass(const std::vector<Tensor>& constants) : constants_(constants), facts_(constants.size()) {
  for (size_t v = 0; v < constants.size(); ++v) {
    const Tensor& t = constants_[v];
    if (!t.defined()) continue;
    facts_[v] = uniform(t.shape());
    if ((t.dtype() != DType::kI64 && t.dtype() != DType::kI32) || t.ndim() > 1 || t.numel() > 64) continue;
    facts_[v].valued = true;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const int64_t e = t.dtype() == DType::kI64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
      facts_[v].vals.push_back(plain(e) ? e : kUnknown);
    }
  }
}

Fact Pass::with_vals(std::vector<int64_t> vals, bool scalar) {
  int at = -1;
  for (size_t e = 0; e < vals.size(); ++e) {
    const int p = sz_.n_power(vals[e]);
    if (p == 0) continue;
    if (p > 1 || at >= 0) throw Refused{"N appears twice in a shape"};
    at = static_cast<int>(e);
  }
  Fact f = int_values(std::move(vals), scalar);
  if (at >= 0) f.kind = scalar ? Fact::kSize : Fact::kSizes, f.at = at;
  return f;
}

namespace {
int64_t arith(Sizes& sz, const std::string& op, int64_t a, int64_t b) {
  if (op == "Mul") return sz.mul(a, b);
  if (op == "Div") return sz.div(a, b);
  if (!plain(a) || !plain(b)) return kUnknown;
  int64_t r = 0;
  const bool over = op == "Add" ? __builtin_add_overflow(a, b, &r) : __builtin_sub_overflow(a, b, &r);
  return over || !plain(r) ? kUnknown : r;
}
}  // namespace

// Slice of a 1-D int value (shape[1:], shape[-1:]): the elements it keeps, when its starts,
// ends and steps are known numbers.
bool Pass::slice_vals(const Node& n, const std::vector<int64_t>& a, std::vector<int64_t>* out) const {
  std::vector<int64_t> starts, ends, axes{0}, steps{1};
  if (!vals_of(n, 1, &starts) || !vals_of(n, 2, &ends) || starts.size() != 1 || ends.size() != 1) return false;
  if (n.in.size() > 3 && n.in[3] >= 0 && (!vals_of(n, 3, &axes) || axes.size() != 1 || (axes[0] != 0 && axes[0] != -1)))
    return false;
  if (n.in.size() > 4 && n.in[4] >= 0 && (!vals_of(n, 4, &steps) || steps.size() != 1 || steps[0] != 1)) return false;
  if (!plain(starts[0]) || !plain(ends[0])) return false;
  const auto len = static_cast<int64_t>(a.size());
  auto clamp = [len](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + len : v, 0, len); };
  for (int64_t i = clamp(starts[0]); i < clamp(ends[0]); ++i) out->push_back(a[static_cast<size_t>(i)]);
  return true;
}

// Shape, and the int arithmetic on its elements: output 0 when followed, false otherwise. N
// may move between elements, never be computed away (N + 1, N / N): that is refused.
bool Pass::int_node(const Node& n) {
  const std::string& op = n.op;
  const Fact& x = in(n, 0);
  std::vector<int64_t> a, b, r;
  bool scalar = x.ranked && x.rank() == 0;
  if (op == "Shape") {
    if (!x.ranked) return false;
    const int rk = x.rank();  // opset 15's start and end clamp to the rank
    auto clamp = [rk](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rk : v, 0, rk); };
    const int64_t s = clamp(attr_i(n, "start", 0)), e = has_attr(n, "end") ? clamp(attr_i(n, "end", rk)) : rk;
    for (int64_t i = s; i < e; ++i)
      r.push_back(x.kind == Fact::kRows && i == x.at ? full(x) : Sizes::of_dim(x.dims[static_cast<size_t>(i)]));
    scalar = false;
  } else if (!vals_of(n, 0, &a)) {
    return false;
  } else if (op == "Cast" || op == "Identity" || (op == "Unsqueeze" && scalar) || (op == "Squeeze" && a.size() == 1)) {
    r = a;
    scalar = op == "Squeeze" || (scalar && op != "Unsqueeze");
  } else if (op == "Gather" && !scalar && attr_i(n, "axis", 0) == 0) {
    if (!vals_of(n, 1, &b) || !in(n, 1).ranked || in(n, 1).rank() > 1) return false;
    const auto len = static_cast<int64_t>(a.size());
    for (int64_t k : b) {
      if (!plain(k) || k < -len || k >= len) return false;
      r.push_back(a[static_cast<size_t>(k < 0 ? k + len : k)]);
    }
    scalar = in(n, 1).rank() == 0;
  } else if (op == "Concat" && !scalar) {
    for (size_t i = 0; i < n.in.size(); ++i) {
      if (!vals_of(n, i, &b) || !in(n, i).ranked || in(n, i).rank() != 1) return false;
      r.insert(r.end(), b.begin(), b.end());
    }
  } else if (op == "Slice" && !scalar) {
    if (!slice_vals(n, a, &r)) return false;
  } else if (op == "Reshape") {  // a scalar to [1] or [-1], a vector to [-1] or to a scalar
    if (!vals_of(n, 1, &b) || b.size() > 1 || (b.size() == 1 && b[0] != -1 && b[0] != static_cast<int64_t>(a.size())) ||
        (b.empty() && a.size() != 1))
      return false;
    r = a;
    scalar = b.empty();
  } else if (op == "Mul" || op == "Div" || op == "Add" || op == "Sub") {
    if (!vals_of(n, 1, &b) || (a.size() != b.size() && a.size() != 1 && b.size() != 1)) return false;
    for (size_t e = 0; e < std::max(a.size(), b.size()); ++e) {
      const int64_t av = a[a.size() == 1 ? 0 : e], bv = b[b.size() == 1 ? 0 : e];
      r.push_back(arith(sz_, op, av, bv));
      if ((sz_.n_power(av) || sz_.n_power(bv)) && sz_.n_power(r.back()) != 1)
        throw Refused{"it computes with the number of rows"};
    }
    scalar = scalar && in(n, 1).ranked && in(n, 1).rank() == 0;
  } else {
    return false;
  }
  set(n, 0, with_vals(std::move(r), scalar));
  return true;
}

void Pass::same_blocks(Fact* acc, const Fact& a) const {
  if (a.kind != Fact::kRows || a.any_layout) return;
  if (acc->any_layout) {
    acc->outer = a.outer, acc->inner = a.inner, acc->any_layout = false;
  } else if (acc->outer != a.outer || acc->inner != a.inner) {
    throw Refused{"its inputs hold the rows in different blocks"};
  }
}

// Reshape: with P the elements before the rows' (the dimensions before them, and their outer
// blocks), the rows land in the first dimension of the new shape whose size holds N, and stay
// whole there when the dimensions before it multiply to a divisor A of P: that dimension is then
// (P / A) · N · k, its element i of row (i / k) % N — whatever the dimensions after them are.
// A Reshape that copies every dimension up to the rows' (0s there) reshapes only what follows
// them within each row: the rows stay as they were, whatever the sizes before them.
void Pass::reshape_tail(const Node& n, const Fact& x, const std::vector<int64_t>& shape) {
  std::vector<int64_t> dims;
  for (size_t i = 0; i < shape.size(); ++i) {
    const bool copy = shape[i] == 0 && i < x.dims.size();
    if (static_cast<int>(i) > x.at && !copy && sz_.n_power(shape[i])) throw Refused{"N appears twice in its shape"};
    dims.push_back(copy ? x.dims[i] : Sizes::to_dim(shape[i] < 0 ? kUnknown : shape[i]));
  }
  set(n, 0, rows_like(x, dims, x.at));
}

void Pass::reshape(const Node& n, const Fact& x) {
  std::vector<int64_t> shape;
  if (!vals_of(n, 1, &shape)) throw Refused{"its shape is not known"};
  const bool allowzero = attr_i(n, "allowzero", 0) != 0;
  if (!allowzero && static_cast<int>(shape.size()) > x.at &&
      std::all_of(shape.begin(), shape.begin() + x.at + 1, [](int64_t v) { return v == 0; }))
    return reshape_tail(n, x, shape);
  const int64_t rows_size = full(x);
  auto in_dim = [&](size_t i) { return static_cast<int>(i) == x.at ? rows_size : Sizes::of_dim(x.dims[i]); };
  int64_t before = x.outer, whole = 1;
  for (size_t i = 0; i < x.dims.size(); ++i) {
    if (static_cast<int>(i) < x.at) before = sz_.mul(before, in_dim(i));
    whole = sz_.mul(whole, in_dim(i));
  }
  int j = -1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allowzero) {
      if (i >= x.dims.size()) throw Refused{"it copies a dimension its input does not have"};
      shape[i] = in_dim(i);
    }
    if (shape[i] == -1) infer = static_cast<int>(i);
    if (sz_.n_power(shape[i]) && j < 0) j = static_cast<int>(i);
  }
  if (infer >= 0) {
    int64_t others = 1;
    for (size_t i = 0; i < shape.size(); ++i)
      if (static_cast<int>(i) != infer) others = sz_.mul(others, shape[i]);
    shape[static_cast<size_t>(infer)] = sz_.div(whole, others);
    if (sz_.n_power(shape[static_cast<size_t>(infer)]) && (j < 0 || infer < j)) j = infer;
  }
  int64_t total = 1;  // all its elements known: an open size the shape fixes gets its value
  for (int64_t v : shape) total = sz_.mul(total, v);
  int sym = 0;
  int64_t value = 0;
  if (infer < 0 && sz_.solve(whole, total, &sym, &value)) before = sz_.put_in(before, sym, value);
  if (j < 0) throw Refused{"it may merge the rows with another dimension"};
  int64_t a = 1;
  for (int i = 0; i < j; ++i) a = sz_.mul(a, shape[static_cast<size_t>(i)]);
  const int64_t outer = sz_.div(before, a);
  const int64_t inner = sz_.div(shape[static_cast<size_t>(j)], sz_.mul(sz_.n(), outer));
  if (before == kUnknown || a == kUnknown || outer == kUnknown || inner == kUnknown || sz_.n_power(inner) ||
      sz_.mul(a, outer) != before)
    throw Refused{"it may merge the rows with another dimension"};
  for (size_t i = static_cast<size_t>(j) + 1; i < shape.size(); ++i)
    if (sz_.n_power(shape[i])) throw Refused{"N appears twice in its shape"};
  std::vector<int64_t> dims;
  for (int64_t s : shape) dims.push_back(Sizes::to_dim(s));
  Fact f = rows(dims, j);
  f.outer = outer, f.inner = inner;
  set(n, 0, f);
}

}  // namespace loom::rt::graph::rows_pass

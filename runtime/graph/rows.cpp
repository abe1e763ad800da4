// rows.cpp — whether several requests may share one run: a pass over the folded graph that
// follows dimension 0 of every input ("the rows") through each node and proves that row i of
// every output depends on row i of the inputs alone. The shape arithmetic PyTorch's exporter
// writes (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, ConstantOfShape, Expand) is
// followed as such: a vector holding the number of rows at a known place. Whatever the pass
// cannot follow (an axis op over the rows, a Reshape that merges them, an operator it does not
// know) makes the model run one request at a time, and the reason is kept for the log.
#include <algorithm>
#include <cstring>

#include "rows_pass.hpp"

namespace loom::rt::graph {
namespace rows_pass {

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
    if (any_rows) rows_node(n), carry_numbers(n);
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

// At least one input holds the rows: where they go, or the reason they may mix.
void Pass::rows_node(const Node& n) {
  const std::string& op = n.op;
  const Fact& x = in(n, 0);
  static const char* elementwise_ops[] = {
      "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Equal", "Less", "Greater", "GreaterOrEqual", "LessOrEqual", "Where",
      "Not", "And", "Or", "Xor", "Max", "Min", "Sum", "Mean", "PRelu", "Cast", "Relu", "Sqrt", "Erf", "Tanh", "Gelu",
      "Sigmoid", "Neg", "Exp", "Log", "Reciprocal", "Abs", "Identity", "Dropout", "Clip", "Sin", "Cos", "Tan",
      "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Floor", "Ceil", "Round", "Sign",
      "Softplus", "Softsign", "LeakyRelu", "Elu", "Celu", "Selu", "ThresholdedRelu", "HardSigmoid", "HardSwish",
      "Shrink", "IsNaN", "IsInf"};
  if (std::find(std::begin(elementwise_ops), std::end(elementwise_ops), op) != std::end(elementwise_ops))
    return elementwise(n);
  if (op == "MatMul") return matmul(n);
  if (op == "MatMulInteger" || op == "QLinearMatMul") return matmul_integer(n);
  if (op == "DynamicQuantizeLinear") throw Refused{"its scale and zero point are computed over all the rows"};
  if (op == "CastLike") return set(n, 0, x);  // input 1 gives its type only
  if (op == "Gather") return gather(n);
  if (op == "GatherND") return gather_nd(n);
  if (op == "Expand") return expand(n);
  if (op == "RNN" || op == "GRU" || op == "LSTM") return recurrent(n);
  if (op.compare(0, std::strlen(kContribDomain), kContribDomain) == 0) return contrib(n);
  if (op == "QLinearConv" || op == "ConvInteger") return quantized(n);
  for (size_t i = 1; i < n.in.size(); ++i)  // below: the rows come in as input 0 only
    if (in(n, i).kind != Fact::kUniform && !(op == "Reshape" && i == 1) && !(op == "Concat"))
      throw Refused{"input " + std::to_string(i) + " depends on the rows"};
  if (x.kind != Fact::kRows) throw Refused{"its first input is not the rows"};
  need_ranked(x);
  if (op == "Shape") {
    if (!int_node(n)) throw Refused{"its start or end is not known"};
    return;
  }
  static const char* layout_ops[] = {"Reshape", "Unsqueeze", "Transpose", "Squeeze", "Flatten", "Concat", "Split", "Slice"};
  if (std::find(std::begin(layout_ops), std::end(layout_ops), op) != std::end(layout_ops)) return layout_op(n, x);
  return axis_op(n, x);
}

// Operators that move dimensions about: where the rows go, and whether they stay whole.
void Pass::layout_op(const Node& n, const Fact& x) {
  const std::string& op = n.op;
  const int r = x.rank();
  std::vector<int64_t> axes;
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
    return set(n, 0, rows_like(x, d, at));
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
    return set(n, 0, rows_like(x, d, at));
  }
  if (op == "Flatten") {
    if (x.at != 0 || norm(attr_i(n, "axis", 1), r + 1) != 1) throw Refused{"it merges the rows with another dimension"};
    return set(n, 0, rows_like(x, {kRowsDim, kAnyDim}, 0));
  }
  if (op == "Concat" || op == "Split") {
    Fact f = x;
    for (size_t i = 0; op == "Concat" && i < n.in.size(); ++i) {
      if (in(n, i).kind != Fact::kRows || in(n, i).at != x.at || in(n, i).rank() != r)
        throw Refused{"it joins the rows with a value that has none"};
      same_blocks(&f, in(n, i));
    }
    const int axis = norm(attr_i(n, "axis", 0), r);
    not_over_rows({axis}, r, x.at, "it");
    const std::vector<int64_t> parts =
        op == "Concat" ? std::vector<int64_t>{concat_length(n, axis)} : split_parts(n, x.dims[static_cast<size_t>(axis)]);
    for (size_t i = 0; i < n.out.size(); ++i) {
      f.dims[static_cast<size_t>(axis)] = parts.size() == n.out.size() ? parts[i] : kAnyDim;
      set(n, i, f);
    }
    return;
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
}

// Operators along an axis or over a batch: never along the rows.
void Pass::axis_op(const Node& n, const Fact& x) {
  const std::string& op = n.op;
  const int r = x.rank();
  std::vector<int64_t> axes;
  if (op == "Softmax" || op == "LogSoftmax") {
    not_over_rows({attr_i(n, "axis", -1)}, r, x.at, "it");
    return set(n, 0, x);
  }
  if (op == "CumSum") {
    if (!const_ints(n, 1, &axes) || axes.size() != 1) throw Refused{"its axis is not constant"};
    not_over_rows(axes, r, x.at, "it sums");
    return set(n, 0, x);
  }
  if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax") {
    if (!axes_of(n, "axes", 1, &axes) || axes.empty()) {
      if (attr_i(n, "noop_with_empty_axes", 0)) return set(n, 0, x);
      throw Refused{"it reduces over every dimension, the rows' included"};
    }
    not_over_rows(axes, r, x.at, "it");
    std::vector<int64_t> d;
    int at = -1;
    for (int i = 0; i < r; ++i) {
      const bool reduced = std::any_of(axes.begin(), axes.end(), [&](int64_t a) { return norm(a, r) == i; });
      if (i == x.at) at = static_cast<int>(d.size());
      if (!reduced || attr_i(n, "keepdims", 1)) d.push_back(reduced ? 1 : x.dims[static_cast<size_t>(i)]);
    }
    return set(n, 0, rows_like(x, d, at));
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
    std::vector<int64_t> pads, pad_axes;
    if (!const_ints(n, 1, &pads) && !(pads = attr_ints(n, "pads")).size()) throw Refused{"its pads are not constant"};
    if (n.in.size() > 3 && n.in[3] >= 0 && !const_ints(n, 3, &pad_axes)) throw Refused{"its axes are not constant"};
    pads = pads_of(n, pads, pad_axes, r);
    if (static_cast<int>(pads.size()) != 2 * r) throw Refused{"its pads do not match the rank"};
    if (pads[static_cast<size_t>(x.at)] || pads[static_cast<size_t>(x.at + r)]) throw Refused{"it pads the rows"};
    Fact f = x;
    for (int i = 0; i < r; ++i)
      if (pads[static_cast<size_t>(i)] || pads[static_cast<size_t>(i + r)]) f.dims[static_cast<size_t>(i)] = kAnyDim;
    return set(n, 0, f);
  }
  if (op == "Gemm") {
    if (x.at != (attr_i(n, "transA", 0) ? 1 : 0) || r != 2) throw Refused{"the rows are its contracted dimension"};
    const Fact& c = in(n, 2);
    if (n.in.size() > 2 && n.in[2] >= 0 && (!c.ranked || (c.rank() == 2 && c.dims[0] != 1)))
      throw Refused{"its C has rows of its own"};
    const Fact& b = in(n, 1);
    const int64_t cols = b.ranked && b.rank() == 2 ? b.dims[attr_i(n, "transB", 0) ? 0 : 1] : kAnyDim;
    return set(n, 0, rows_like(x, {kRowsDim, cols}, 0));
  }
  if (op == "Resize") {  // constant scales that keep the rows; sizes would have to name N
    const Tensor* sc = n.in.size() > 2 && n.in[2] >= 0 ? &constants_[static_cast<size_t>(n.in[2])] : nullptr;
    if (!sc || !sc->defined() || sc->dtype() != DType::kF32 || sc->numel() != r || sc->f32()[x.at] != 1 || has_attr(n, "axes"))
      throw Refused{"its output size is not constant scales that keep the rows"};
    return set(n, 0, rows_like(x, std::vector<int64_t>(static_cast<size_t>(r), kAnyDim), x.at));
  }
  if (op == "MeanVarianceNormalization") {
    not_over_rows(attr_ints(n, "axes", {0, 2, 3}), r, x.at, "it");
    return set(n, 0, x);
  }
  if (op == "Conv" || op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool" || op == "BatchNormalization" ||
      op == "GlobalMaxPool" || op == "InstanceNormalization" || op == "LRN" || op == "ConvTranspose" ||
      op == "DepthToSpace" || op == "SpaceToDepth") {
    if (x.at != 0) throw Refused{"the rows are not its batch dimension"};
    return set_all(n, rows_like(x, image_dims(n, x), 0));
  }
  if (op == "QuantizeLinear" || op == "DequantizeLinear") {
    const Fact& s = in(n, 1);
    const bool per_axis = !s.ranked || (s.rank() > 0 && s.dims[0] != 1);
    if (per_axis && norm(attr_i(n, "axis", 1), r) == x.at) throw Refused{"its scales run along the rows"};
    return set(n, 0, x);
  }
  throw Refused{"the pass does not follow rows through " + op};
}

// A Concat's length along `axis`: its inputs' added, where each is a number (kAnyDim else).
int64_t Pass::concat_length(const Node& n, int axis) const {
  int64_t sum = 0;
  for (int v : n.in) {
    const Fact& f = facts_[static_cast<size_t>(v)];
    const int64_t d = f.ranked && axis < f.rank() ? f.dims[static_cast<size_t>(axis)] : kAnyDim;
    if (d < 0) return kAnyDim;
    sum += d;
  }
  return sum;
}

// A Split's parts along its axis of length `len` where the pass knows them: its constant split
// input (or attribute), else opset 18's num_outputs chunks of ceil(len / k), else k equal parts.
std::vector<int64_t> Pass::split_parts(const Node& n, int64_t len) const {
  std::vector<int64_t> parts;
  if (const_ints(n, 1, &parts) || !(parts = attr_ints(n, "split", {})).empty()) return parts;
  const int64_t k = static_cast<int64_t>(n.out.size());
  if (len < 0 || k < 1 || (!has_attr(n, "num_outputs") && len % k != 0)) return parts;
  const int64_t each = (len + k - 1) / k;
  for (int64_t i = 0; i < k; ++i) parts.push_back(std::max<int64_t>(0, std::min(each, len - i * each)));
  return parts;
}

// An image operator's output dimensions where the pass can name them (a Reshape to [-1, C] or
// [T, -1, H] after them then keeps the rows): the channels (a convolution's weight gives them,
// the others keep their input's), the spatial sizes of a convolution or pooling with explicit
// pads, a global pool's 1s, a normalization's input sizes; kAnyDim elsewhere.
std::vector<int64_t> Pass::image_dims(const Node& n, const Fact& x) const {
  std::vector<int64_t> d(static_cast<size_t>(x.rank()), kAnyDim);
  if (d.size() < 2) return d;
  const std::string& op = n.op;
  const Tensor none;
  const Tensor& w = n.in.size() > 1 && n.in[1] >= 0 ? constants_[static_cast<size_t>(n.in[1])] : none;
  const bool conv = op == "Conv" || op == "MaxPool" || op == "AveragePool";
  if (op == "Conv" && w.defined() && w.ndim() >= 1) d[1] = w.dim(0);
  if (op == "ConvTranspose" && w.defined() && w.ndim() >= 2) d[1] = w.dim(1) * attr_i(n, "group", 1);
  if (op != "Conv" && op != "ConvTranspose" && op != "DepthToSpace" && op != "SpaceToDepth") d[1] = x.dims[1];
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool") std::fill(d.begin() + 2, d.end(), 1);
  if (op == "BatchNormalization" || op == "InstanceNormalization" || op == "LRN") std::copy(x.dims.begin() + 2, x.dims.end(), d.begin() + 2);
  if (!conv || attr_s(n, "auto_pad", "NOTSET") != "NOTSET") return d;
  const size_t sp = d.size() - 2;
  std::vector<int64_t> k = attr_ints(n, "kernel_shape", {});
  if (k.empty() && w.defined() && w.ndim() == x.rank()) k.assign(w.shape().begin() + 2, w.shape().end());
  const auto st = attr_ints(n, "strides", std::vector<int64_t>(sp, 1)), dl = attr_ints(n, "dilations", std::vector<int64_t>(sp, 1));
  const auto pads = attr_ints(n, "pads", std::vector<int64_t>(2 * sp, 0));
  if (k.size() != sp || st.size() != sp || dl.size() != sp || pads.size() != 2 * sp) return d;
  if (attr_i(n, "ceil_mode", 0) != 0) return d;  // where the last window may start is the kernel's to say
  for (size_t i = 0; i < sp; ++i) {
    const int64_t in = x.dims[i + 2], span = in + pads[i] + pads[i + sp] - dl[i] * (k[i] - 1) - 1;
    if (in < 0 || st[i] < 1 || span < 0 || k[i] < 1 || dl[i] < 1) continue;  // unknown, symbolic, or the kernel's error
    d[i + 2] = span / st[i] + 1;
  }
  return d;
}

// MatMulInteger (a, b, a_zero_point, b_zero_point) and QLinearMatMul (a, a_scale, a_zero_point,
// b, b_scale, b_zero_point, y_scale, y_zero_point): a MatMul of a and b, whose other inputs are
// constants; a's (which may run along its rows) must be one value each.
void Pass::matmul_integer(const Node& n) {
  const bool qlinear = n.op == "QLinearMatMul";
  const size_t b = qlinear ? 3 : 1;
  for (size_t i = 1; i < n.in.size(); ++i) {
    if (i == b || n.in[i] < 0) continue;
    const Fact& f = in(n, i);
    if (f.kind != Fact::kUniform) throw Refused{"input " + std::to_string(i) + " depends on the rows"};
    const bool a_side = qlinear ? i < 3 : i == 2;
    if (a_side && (!f.ranked || std::any_of(f.dims.begin(), f.dims.end(), [](int64_t d) { return d != 1; })))
      throw Refused{"a's scale or zero point is not one value"};
  }
  Node mm = n;
  mm.in = {n.in[0], n.in[b]};
  matmul(mm);
}

void Pass::elementwise(const Node& n) {
  int r = 0;
  for (size_t i = 0; i < n.in.size(); ++i)
    if (n.in[i] >= 0) r = std::max(r, need_ranked(in(n, i)).rank());
  int at = -1;
  Fact blocks;
  for (size_t i = 0; i < n.in.size(); ++i) {
    const Fact& a = in(n, i);
    if (n.in[i] < 0 || a.kind != Fact::kRows) continue;
    const int here = a.at + r - a.rank();
    if (at >= 0 && here != at) throw Refused{"its inputs hold the rows on different dimensions"};
    if (at < 0) blocks = a;
    same_blocks(&blocks, a);
    at = here;
  }
  std::vector<int64_t> d(static_cast<size_t>(r), 1);
  for (size_t i = 0; i < n.in.size(); ++i) {
    const Fact& a = in(n, i);
    if (n.in[i] < 0) continue;
    for (int k = 0; k < a.rank(); ++k) d[static_cast<size_t>(r - a.rank() + k)] = broadcast(d[static_cast<size_t>(r - a.rank() + k)], a.dims[static_cast<size_t>(k)]);
    if (a.kind == Fact::kRows) continue;
    if (a.kind != Fact::kUniform) throw Refused{"it mixes the rows with the number of rows"};
    const int pos = at - (r - a.rank());
    if (pos >= 0 && a.dims[static_cast<size_t>(pos)] != 1)
      throw Refused{"input " + std::to_string(i) + " may have several elements along the rows"};
  }
  set_all(n, rows_like(blocks, d, at));
}

// RNN, GRU, LSTM: each batch entry's sequence is its own, so the rows may be the batch dimension
// of X, of the initial states and of sequence_lens (initial states of the exporter's zeros, sized
// by N, come as rows); the weights must be the same for every row.
void Pass::recurrent(const Node& n) {
  const bool batch_first = attr_i(n, "layout", 0) == 1;
  auto plain = [](const Fact& f) { return f.any_layout || (f.outer == 1 && f.inner == 1); };
  for (size_t i = 0; i < n.in.size(); ++i) {
    const Fact& f = in(n, i);
    if (n.in[i] < 0 || (f.kind == Fact::kUniform && i != 0 && i != 4 && i != 5 && i != 6)) continue;
    const int batch = i == 4 || batch_first ? 0 : 1;  // X [T, N, I], states [D, N, H], lens [N]
    if (f.kind != Fact::kRows || !plain(f) || (f.ranked && f.at != batch))
      throw Refused{"input " + std::to_string(i) + " does not hold the rows on its batch dimension"};
  }
  const Fact& x = in(n, 0);
  const int64_t t = x.ranked && x.rank() == 3 ? x.dims[batch_first ? 1 : 0] : kAnyDim;
  const int64_t d = attr_s(n, "direction", "forward") == "bidirectional" ? 2 : 1, h = attr_i(n, "hidden_size", kAnyDim);
  set(n, 0, batch_first ? rows({kRowsDim, t, d, h}, 0) : rows({t, d, kRowsDim, h}, 2));
  for (size_t k = 1; k < 3; ++k) set(n, k, batch_first ? rows({kRowsDim, d, h}, 0) : rows({d, kRowsDim, h}, 1));
}

void Pass::matmul(const Node& n) {
  const Fact &a = need_ranked(in(n, 0)), &b = need_ranked(in(n, 1));
  if (a.rank() < 2 || b.rank() < 2) throw Refused{"a 1-D MatMul operand"};
  const int r = std::max(a.rank(), b.rank());
  int at = -1;
  Fact blocks = a.kind == Fact::kRows ? a : b;
  if (a.kind == Fact::kRows) {
    if (a.at == a.rank() - 1) throw Refused{"the rows are its contracted dimension"};
    at = a.at == a.rank() - 2 ? r - 2 : a.at + r - a.rank();
  }
  if (b.kind == Fact::kRows) {
    if (b.at == b.rank() - 2) throw Refused{"the rows are its contracted dimension"};
    const int here = b.at == b.rank() - 1 ? r - 1 : b.at + r - b.rank();
    if (at >= 0 && here != at) throw Refused{"its operands hold the rows on different dimensions"};
    same_blocks(&blocks, b);
    at = here;
  }
  std::vector<int64_t> d(static_cast<size_t>(r - 2), 1);
  for (const Fact* u : {&a, &b}) {
    for (int k = 0; k < u->rank() - 2; ++k) d[static_cast<size_t>(r - u->rank() + k)] = broadcast(d[static_cast<size_t>(r - u->rank() + k)], u->dims[static_cast<size_t>(k)]);
    if (u->kind == Fact::kRows) continue;
    if (u->kind != Fact::kUniform) throw Refused{"it mixes the rows with the number of rows"};
    const int pos = at - (r - u->rank());
    if (at < r - 2 && pos >= 0 && u->dims[static_cast<size_t>(pos)] != 1)
      throw Refused{"an operand may have several elements along the rows"};
  }
  d.push_back(a.dims[static_cast<size_t>(a.rank() - 2)]);
  d.push_back(b.dims[static_cast<size_t>(b.rank() - 1)]);
  set(n, 0, rows_like(blocks, d, at));
}

// Expand(x, shape): the rows of x, or N in the shape (a uniform x repeated for every row: any
// blocks fit it).
void Pass::expand(const Node& n) {
  const Fact &x = need_ranked(in(n, 0)), &s = in(n, 1);
  std::vector<int64_t> shape;
  if (!vals_of(n, 1, &shape)) throw Refused{"its shape is not known"};
  const int len = static_cast<int>(shape.size()), r = std::max(x.rank(), len), off = r - len;
  int at = x.kind == Fact::kRows ? x.at + r - x.rank() : -1;
  if (s.kind == Fact::kSizes) {
    if (at >= 0 && (at != s.at + off || shape[static_cast<size_t>(s.at)] != full(x)))
      throw Refused{"the rows and N sit on different dimensions"};
    const int pos = s.at + off - (r - x.rank());
    if (x.kind == Fact::kUniform && pos >= 0 && x.dims[static_cast<size_t>(pos)] != 1)
      throw Refused{"its input may have several elements along the rows"};
    at = s.at + off;
  } else if (s.kind != Fact::kUniform || (at - off >= 0 && shape[static_cast<size_t>(at - off)] != 1)) {
    throw Refused{"its shape may repeat the rows"};
  }
  std::vector<int64_t> d(static_cast<size_t>(r), 1);
  for (int k = 0; k < x.rank(); ++k) d[static_cast<size_t>(r - x.rank() + k)] = x.dims[static_cast<size_t>(k)];
  for (int k = 0; k < len; ++k) d[static_cast<size_t>(off + k)] = broadcast(d[static_cast<size_t>(off + k)], Sizes::to_dim(shape[static_cast<size_t>(k)]));
  d[static_cast<size_t>(at)] = kRowsDim;
  if (x.kind == Fact::kRows) return set(n, 0, rows_like(x, d, at));
  Fact f = rows(d, at);
  f.any_layout = true, f.inner = sz_.div(shape[static_cast<size_t>(s.at)], sz_.n());
  set(n, 0, f);
}

void Pass::gather(const Node& n) {
  const Fact &d = need_ranked(in(n, 0)), &i = need_ranked(in(n, 1));
  const int g = norm(attr_i(n, "axis", 0), d.rank());
  std::vector<int64_t> dims(d.dims.begin(), d.dims.begin() + g);
  dims.insert(dims.end(), i.dims.begin(), i.dims.end());
  dims.insert(dims.end(), d.dims.begin() + g + 1, d.dims.end());
  if (d.kind == Fact::kRows && i.kind == Fact::kUniform) {
    if (g == d.at) throw Refused{"it picks rows"};
    return set(n, 0, rows_like(d, dims, d.at < g ? d.at : d.at - 1 + i.rank()));
  }
  if (d.kind == Fact::kUniform && i.kind == Fact::kRows) return set(n, 0, rows_like(i, dims, g + i.at));
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
  set(n, 0, rows_like(x, d, at));
}

}  // namespace rows_pass

using rows_pass::Fact;
using rows_pass::kAnyDim;
using rows_pass::Pass;
using rows_pass::rows;

std::string rows_independent(const std::vector<Node>& nodes, const std::vector<Tensor>& constants,
                             const std::vector<int>& input_ids, const std::vector<TensorInfo>& inputs,
                             const std::vector<int>& output_ids, const std::vector<std::string>& names) {
  Pass pass(constants);
  std::map<std::string, int64_t> named;  // open dimensions named alike: one size
  for (size_t k = 0; k < input_ids.size(); ++k) {
    std::vector<int64_t> dims = inputs[k].shape;
    if (dims.empty()) return "input '" + inputs[k].name + "' is a scalar";
    for (size_t i = 0; i < dims.size(); ++i) {  // open, and shared by joined requests
      if (dims[i] >= 0) continue;
      const std::string name = i < inputs[k].dim_names.size() ? inputs[k].dim_names[i] : "";
      if (name.empty()) dims[i] = pass.sizes().fresh();
      else dims[i] = named.count(name) ? named[name] : (named[name] = pass.sizes().fresh());
    }
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
    if (f.outer != 1 || f.inner != 1)
      return "output '" + names[static_cast<size_t>(v)] + "' holds the rows merged with another dimension";
  }
  return "";
}

}  // namespace loom::rt::graph

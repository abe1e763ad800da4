// ops_shape.cpp — the operators that move elements without arithmetic: shapes and views
// (Reshape, Flatten, Squeeze, Unsqueeze share the input's storage), and Transpose, Slice and
// Expand as one strided copy; Concat, Split, Gather, Pad, Range, ConstantOfShape, Trilu.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops.hpp"

namespace loom::rt::graph {
namespace {

// out[i...] = src[base + sum(i_d * st_d)] for every index of `shape`: elements of any size.
Tensor strided_copy(const Tensor& src, const Shape& shape, int64_t base, const std::vector<int64_t>& st) {
  Tensor y = Tensor::empty(shape, src.dtype());
  const int64_t total = numel_of(shape);
  if (total == 0) return y;
  const size_t es = dtype_size(src.dtype());
  const char* s = src.data<char>();
  char* d = y.data<char>();
  if (shape.empty()) {
    std::memcpy(d, s + base * es, es);
    return y;
  }
  const size_t r = shape.size();
  const int64_t inner = shape[r - 1], is = st[r - 1];
  std::vector<int64_t> idx(r, 0);
  for (int64_t o = 0; o < total; o += inner) {
    int64_t off = base;
    for (size_t k = 0; k + 1 < r; ++k) off += idx[k] * st[k];
    char* row = d + o * es;
    if (is == 1) {
      std::memcpy(row, s + off * es, static_cast<size_t>(inner) * es);
    } else if (es == 4) {
      for (int64_t j = 0; j < inner; ++j) reinterpret_cast<uint32_t*>(row)[j] = reinterpret_cast<const uint32_t*>(s)[off + j * is];
    } else if (es == 8) {
      for (int64_t j = 0; j < inner; ++j) reinterpret_cast<uint64_t*>(row)[j] = reinterpret_cast<const uint64_t*>(s)[off + j * is];
    } else {
      for (int64_t j = 0; j < inner; ++j) std::memcpy(row + j * es, s + (off + j * is) * es, es);
    }
    for (size_t k = r - 1; k-- > 0;) {
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
  }
  return y;
}

int64_t scalar_i(const Node& n, const Tensor& t) {
  const auto v = ints_of(n, t);
  if (v.size() != 1) op_error(n, "expected a scalar");
  return v[0];
}

}  // namespace

// GatherElements(data, indices, axis): out[i...] = data[i... with indices[i...] along axis]; any
// element type (copied by size), int64 or int32 indices, negative ones from the end.
void op_gather_elements(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& data = need(n, in, 0);
  const std::vector<int64_t> idx = ints_of(n, need(n, in, 1));
  const Shape& is = need(n, in, 1).shape();
  const int r = data.ndim();
  if (static_cast<int>(is.size()) != r) op_error(n, "indices and data differ in rank");
  const int axis = norm_axis(n, attr_i(n, "axis", 0), r);
  for (int d = 0; d < r; ++d)
    if (d != axis && is[static_cast<size_t>(d)] > data.dim(d)) op_error(n, "indices reach past the data's dimension " + std::to_string(d));
  const auto ds = broadcast_strides(data.shape(), data.shape());  // the data's row-major strides
  const size_t es = static_cast<size_t>(dtype_size(data.dtype()));
  Tensor y = Tensor::empty(is, data.dtype());
  std::vector<int64_t> at(static_cast<size_t>(r), 0);
  for (size_t i = 0; i < idx.size(); ++i) {
    int64_t k = idx[i], src = 0;
    const int64_t len = data.dim(axis);
    if (k < -len || k >= len) op_error(n, "index " + std::to_string(k) + " is outside [" + std::to_string(-len) + ", " + std::to_string(len) + ")");
    if (k < 0) k += len;
    for (int d = 0; d < r; ++d) src += (d == axis ? k : at[static_cast<size_t>(d)]) * ds[static_cast<size_t>(d)];
    std::memcpy(y.data<char>() + i * es, data.data<char>() + static_cast<size_t>(src) * es, es);
    for (int d = r; d-- > 0;) {
      if (++at[static_cast<size_t>(d)] < is[static_cast<size_t>(d)]) break;
      at[static_cast<size_t>(d)] = 0;
    }
  }
  out[0] = y;
}

void op_identity(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  // Dropout in training mode (its third input true) draws a random mask: this executor infers only.
  if (n.op == "Dropout" && in.size() > 2 && in[2] && in[2]->numel() == 1 && in[2]->dtype() == DType::kBool &&
      in[2]->data<bool>()[0])
    op_error(n, "training_mode true is not supported (this executor runs inference: Dropout passes its input through)");
  out[0] = need(n, in, 0);
  if (out.size() > 1) {  // Dropout's mask, all kept
    out[1] = Tensor::empty(out[0].shape(), DType::kBool);
    std::memset(out[1].data<char>(), 1, out[1].bytes());
  }
}

void op_constant(const Node& n, const std::vector<const Tensor*>&, std::vector<Tensor>& out) {
  auto it = n.attrs.find("value");
  if (it != n.attrs.end() && it->second.kind == Attr::kTensor) {
    out[0] = it->second.t;
  } else if (has_attr(n, "value_int")) {
    out[0] = make_i64({attr_i(n, "value_int", 0)}, {});
  } else if (has_attr(n, "value_ints")) {
    const auto v = attr_ints(n, "value_ints");
    out[0] = make_i64(v, {static_cast<int64_t>(v.size())});
  } else if (has_attr(n, "value_float")) {
    out[0] = Tensor::empty({});
    out[0].f32()[0] = attr_f(n, "value_float", 0);
  } else if ((it = n.attrs.find("value_floats")) != n.attrs.end()) {
    out[0] = Tensor::empty({static_cast<int64_t>(it->second.floats.size())});
    std::copy(it->second.floats.begin(), it->second.floats.end(), out[0].f32());
  } else {
    op_error(n, "a Constant needs value, value_int(s) or value_float(s)");
  }
}

void op_shape(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Shape& s = need(n, in, 0).shape();
  const int64_t r = static_cast<int64_t>(s.size());
  int64_t b = attr_i(n, "start", 0), e = attr_i(n, "end", r);
  b = std::clamp(b < 0 ? b + r : b, int64_t{0}, r);
  e = std::clamp(e < 0 ? e + r : e, int64_t{0}, r);
  std::vector<int64_t> v(s.begin() + b, s.begin() + std::max(b, e));
  out[0] = make_i64(v, {static_cast<int64_t>(v.size())});
}

void op_size(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  out[0] = make_i64({need(n, in, 0).numel()}, {});
}

void op_reshape(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  Shape s = ints_of(n, need(n, in, 1));
  const bool allowzero = attr_i(n, "allowzero", 0) != 0;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == 0 && !allowzero) {
      if (i >= x.shape().size()) op_error(n, "shape copies dimension " + std::to_string(i) + " the input lacks");
      s[i] = x.shape()[i];
    }
    if (s[i] == -1) {
      if (infer >= 0) op_error(n, "more than one -1 in the shape");
      infer = static_cast<int>(i);
    } else if (s[i] < 0) {
      op_error(n, "negative dimension in the shape");
    } else if (__builtin_mul_overflow(known, s[i], &known)) {
      op_error(n, "the shape's dimensions overflow");
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.numel() % known) op_error(n, "cannot infer the -1 dimension for " + x.shape_str());
    s[static_cast<size_t>(infer)] = x.numel() / known;
  }
  if (checked_numel(s) != x.numel()) op_error(n, "cannot reshape " + x.shape_str() + " to " + std::to_string(numel_of(s)) + " elements");
  out[0] = x.reshape(s);
}

void op_flatten(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  const int r = x.ndim();
  const int64_t a = attr_i(n, "axis", 1);
  const int axis = a == r ? r : norm_axis(n, a, r);
  int64_t outer = 1;
  for (int i = 0; i < axis; ++i) outer *= x.shape()[static_cast<size_t>(i)];
  out[0] = x.reshape({outer, outer ? x.numel() / outer : 0});
}

void op_squeeze(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  std::vector<bool> drop(x.shape().size(), false);
  if (in.size() > 1 && in[1]) {
    for (int64_t a : ints_of(n, *in[1])) {
      const int ax = norm_axis(n, a, x.ndim());
      if (x.shape()[static_cast<size_t>(ax)] != 1) op_error(n, "cannot squeeze axis " + std::to_string(a) + " of " + x.shape_str());
      drop[static_cast<size_t>(ax)] = true;
    }
  } else {
    for (size_t i = 0; i < drop.size(); ++i) drop[i] = x.shape()[i] == 1;
  }
  Shape s;
  for (size_t i = 0; i < drop.size(); ++i)
    if (!drop[i]) s.push_back(x.shape()[i]);
  out[0] = x.reshape(s);
}

void op_unsqueeze(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  const std::vector<int64_t> axes = ints_of(n, need(n, in, 1));
  const int r = x.ndim() + static_cast<int>(axes.size());
  std::vector<bool> added(static_cast<size_t>(r), false);
  for (int64_t a : axes) {
    const int ax = norm_axis(n, a, r);
    if (added[static_cast<size_t>(ax)]) op_error(n, "axis repeated");
    added[static_cast<size_t>(ax)] = true;
  }
  Shape s;
  size_t j = 0;
  for (int i = 0; i < r; ++i) s.push_back(added[static_cast<size_t>(i)] ? 1 : x.shape()[j++]);
  out[0] = x.reshape(s);
}

void op_transpose(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  const int r = x.ndim();
  std::vector<int64_t> perm = attr_ints(n, "perm");
  if (perm.empty())
    for (int i = r - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int>(perm.size()) != r) op_error(n, "perm has " + std::to_string(perm.size()) + " axes for rank " + std::to_string(r));
  const auto st = strides_of(x.shape());
  Shape s(static_cast<size_t>(r));
  std::vector<int64_t> src(static_cast<size_t>(r));
  std::vector<bool> seen(static_cast<size_t>(r), false);
  for (int i = 0; i < r; ++i) {
    const int p = norm_axis(n, perm[static_cast<size_t>(i)], r);
    if (seen[static_cast<size_t>(p)]) op_error(n, "perm repeats an axis");
    seen[static_cast<size_t>(p)] = true;
    s[static_cast<size_t>(i)] = x.shape()[static_cast<size_t>(p)];
    src[static_cast<size_t>(i)] = st[static_cast<size_t>(p)];
  }
  out[0] = strided_copy(x, s, 0, src);
}

void op_expand(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  const Shape s = broadcast_shape(n, x.shape(), ints_of(n, need(n, in, 1)));
  out[0] = s == x.shape() ? x : strided_copy(x, s, 0, broadcast_strides(x.shape(), s));
}

void op_slice(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  const auto starts = ints_of(n, need(n, in, 1)), ends = ints_of(n, need(n, in, 2));
  if (starts.size() != ends.size()) op_error(n, "starts and ends differ in length");
  std::vector<int64_t> axes, steps(starts.size(), 1);
  if (in.size() > 3 && in[3]) axes = ints_of(n, *in[3]);
  else
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (in.size() > 4 && in[4]) steps = ints_of(n, *in[4]);
  if (axes.size() != starts.size() || steps.size() != starts.size()) op_error(n, "axes or steps differ in length from starts");
  Shape s = x.shape();
  const auto st = strides_of(s);
  std::vector<int64_t> src = st;
  int64_t base = 0;
  for (size_t i = 0; i < starts.size(); ++i) {
    const size_t a = static_cast<size_t>(norm_axis(n, axes[i], x.ndim()));
    const int64_t dim = x.shape()[a], step = steps[i];
    if (step == 0) op_error(n, "a step of 0");
    int64_t b = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    if (step > 0) {
      b = std::clamp(b, int64_t{0}, dim);
      e = std::clamp(e, int64_t{0}, dim);
      s[a] = e > b ? (e - b + step - 1) / step : 0;
    } else {
      b = std::clamp(b, int64_t{0}, dim - 1);
      e = std::clamp(e, int64_t{-1}, dim - 1);
      s[a] = b > e ? (b - e - step - 1) / -step : 0;
    }
    base += b * st[a];
    src[a] = st[a] * step;
  }
  out[0] = strided_copy(x, s, numel_of(s) ? base : 0, src);
}

void op_concat(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& first = need(n, in, 0);
  const int axis = norm_axis(n, attr_i(n, "axis", 0), first.ndim());
  Shape s = first.shape();
  s[static_cast<size_t>(axis)] = 0;
  for (const Tensor* t : in) {
    if (!t || t->ndim() != first.ndim() || t->dtype() != first.dtype()) op_error(n, "inputs differ in rank or type");
    for (int d = 0; d < first.ndim(); ++d)
      if (d != axis && t->shape()[static_cast<size_t>(d)] != first.shape()[static_cast<size_t>(d)])
        op_error(n, "inputs " + first.shape_str() + " and " + t->shape_str() + " differ outside the axis");
    s[static_cast<size_t>(axis)] += t->shape()[static_cast<size_t>(axis)];
  }
  Tensor y = Tensor::empty(s, first.dtype());
  const size_t es = dtype_size(first.dtype());
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[static_cast<size_t>(d)];
  for (int d = axis + 1; d < first.ndim(); ++d) inner *= s[static_cast<size_t>(d)];
  const size_t row = static_cast<size_t>(s[static_cast<size_t>(axis)] * inner) * es;
  size_t at = 0;
  for (const Tensor* t : in) {
    const size_t part = static_cast<size_t>(t->shape()[static_cast<size_t>(axis)] * inner) * es;
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(y.data<char>() + static_cast<size_t>(o) * row + at, t->data<char>() + static_cast<size_t>(o) * part, part);
    at += part;
  }
  out[0] = y;
}

void op_split(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  const int axis = norm_axis(n, attr_i(n, "axis", 0), x.ndim());
  const int64_t dim = x.shape()[static_cast<size_t>(axis)];
  std::vector<int64_t> parts;
  if (in.size() > 1 && in[1]) parts = ints_of(n, *in[1]);
  else if (has_attr(n, "split")) parts = attr_ints(n, "split");
  if (parts.empty() && has_attr(n, "num_outputs")) {  // opset 18: chunks of ceil(dim / k), the last smaller
    const int64_t k = attr_i(n, "num_outputs", 0);
    if (k != static_cast<int64_t>(out.size())) op_error(n, "num_outputs differs from its outputs");
    const int64_t chunk = (dim + k - 1) / k;
    for (int64_t i = 0; i < k; ++i) parts.push_back(std::clamp<int64_t>(dim - i * chunk, 0, chunk));
  } else if (parts.empty()) {
    const int64_t k = static_cast<int64_t>(out.size());
    if (dim % k) op_error(n, "cannot split " + std::to_string(dim) + " into " + std::to_string(k) + " equal parts");
    parts.assign(out.size(), dim / k);
  }
  int64_t sum = 0;
  for (int64_t p : parts)
    if (p < 0 || __builtin_add_overflow(sum, p, &sum)) op_error(n, "a split size is negative or too large");
  if (parts.size() != out.size() || sum != dim) op_error(n, "split sizes do not add up to the axis");
  const auto st = strides_of(x.shape());
  int64_t at = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    Shape s = x.shape();
    s[static_cast<size_t>(axis)] = parts[i];
    out[i] = strided_copy(x, s, at * st[static_cast<size_t>(axis)], st);
    at += parts[i];
  }
}

void op_gather(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  const Tensor& ind = need(n, in, 1);
  const int axis = norm_axis(n, attr_i(n, "axis", 0), x.ndim());
  const std::vector<int64_t> idx = ints_of(n, ind);
  const int64_t dim = x.shape()[static_cast<size_t>(axis)];
  Shape s(x.shape().begin(), x.shape().begin() + axis);
  s.insert(s.end(), ind.shape().begin(), ind.shape().end());
  s.insert(s.end(), x.shape().begin() + axis + 1, x.shape().end());
  Tensor y = Tensor::empty(s, x.dtype());
  const size_t es = dtype_size(x.dtype());
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape()[static_cast<size_t>(d)];
  for (int d = axis + 1; d < x.ndim(); ++d) inner *= x.shape()[static_cast<size_t>(d)];
  const size_t block = static_cast<size_t>(inner) * es;
  char* dst = y.data<char>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k : idx) {
      const int64_t j = k < 0 ? k + dim : k;
      if (j < 0 || j >= dim) op_error(n, "index " + std::to_string(k) + " is outside an axis of " + std::to_string(dim));
      std::memcpy(dst, x.data<char>() + static_cast<size_t>(o * dim + j) * block, block);
      dst += block;
    }
  out[0] = y;
}

// Range's length, max(ceil((limit - start) / delta), 0), computed in long double so that no
// start, limit or delta (int64 or float, finite) overflows it; the tensor it makes is then
// checked and charged like any other (Tensor::empty) before it is filled.
int64_t range_length(const Node& n, long double start, long double limit, long double delta) {
  if (delta == 0) op_error(n, "a delta of 0");
  const long double k = std::ceil((limit - start) / delta);
  if (!std::isfinite(static_cast<double>(k))) op_error(n, "a range that does not end (start, limit or delta is not finite)");
  if (k > static_cast<long double>(int64_t{1} << 62))
    throw AllocationRefused("a range of " + std::to_string(static_cast<double>(k)) + " elements");
  return k <= 0 ? 0 : static_cast<int64_t>(k);  // a negative k may lie past int64's range
}

void op_range(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &a = need(n, in, 0), &b = need(n, in, 1), &d = need(n, in, 2);
  if (a.dtype() == DType::kF32) {
    const float s = a.f32()[0], l = b.f32()[0], dl = d.f32()[0];
    const int64_t k = range_length(n, s, l, dl);
    Tensor y = Tensor::empty({k});
    for (int64_t i = 0; i < k; ++i) y.f32()[i] = s + static_cast<float>(i) * dl;
    out[0] = y;
    return;
  }
  const int64_t s = scalar_i(n, a), l = scalar_i(n, b), dl = scalar_i(n, d);
  const int64_t k = range_length(n, s, l, dl);
  // Each value lies between start and limit, but i * delta alone may not fit: modular arithmetic.
  auto at = [s, dl](int64_t i) {
    return static_cast<int64_t>(static_cast<uint64_t>(s) + static_cast<uint64_t>(i) * static_cast<uint64_t>(dl));
  };
  if (a.dtype() == DType::kI32) {
    Tensor y = Tensor::empty({k}, DType::kI32);
    for (int64_t i = 0; i < k; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(at(i));
    out[0] = y;
    return;
  }
  Tensor y = Tensor::empty({k}, DType::kI64);
  for (int64_t i = 0; i < k; ++i) y.data<int64_t>()[i] = at(i);
  out[0] = y;
}

void op_constant_of_shape(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Shape s = ints_of(n, need(n, in, 0));
  numel_of(s);  // a negative dimension, or a count that would wrap, refused by name
  auto it = n.attrs.find("value");
  const Tensor* v = it != n.attrs.end() && it->second.kind == Attr::kTensor ? &it->second.t : nullptr;
  Tensor y = Tensor::empty(s, v ? v->dtype() : DType::kF32);
  const size_t es = dtype_size(y.dtype());
  for (int64_t i = 0; i < y.numel(); ++i) {
    if (v) std::memcpy(y.data<char>() + i * es, v->data<char>(), es);
    else y.f32()[i] = 0;
  }
  out[0] = y;
}

void op_trilu(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  if (x.ndim() < 2) op_error(n, "Trilu takes a tensor of rank >= 2");
  const int64_t k = in.size() > 1 && in[1] ? scalar_i(n, *in[1]) : 0;
  const bool upper = attr_i(n, "upper", 1) != 0;
  Tensor y = x.clone();
  const int64_t rows = x.dim(-2), cols = x.dim(-1), mats = rows * cols > 0 ? x.numel() / (rows * cols) : 0;
  const size_t es = dtype_size(x.dtype());
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const bool keep = upper ? j - i >= k : j - i <= k;
        if (!keep) std::memset(y.data<char>() + ((m * rows + i) * cols + j) * es, 0, es);
      }
  out[0] = y;
}

std::vector<int64_t> pads_of(const Node& n, const std::vector<int64_t>& pads, const std::vector<int64_t>& axes, int r) {
  if (axes.empty()) return pads;
  if (pads.size() != 2 * axes.size()) op_error(n, "pads needs 2 values for each of its axes");
  std::vector<int64_t> all(static_cast<size_t>(2 * r), 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    const auto a = static_cast<size_t>(norm_axis(n, axes[i], r));
    all[a] = pads[i], all[a + static_cast<size_t>(r)] = pads[i + axes.size()];
  }
  return all;
}

void op_pad(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  if (attr_s(n, "mode", "constant") != "constant") op_error(n, "Pad mode '" + attr_s(n, "mode", "") + "' is not supported");
  const int r = x.ndim();
  const std::vector<int64_t> pads = pads_of(n, ints_of(n, need(n, in, 1)), in.size() > 3 && in[3] ? ints_of(n, *in[3]) : std::vector<int64_t>{}, r);
  if (static_cast<int>(pads.size()) != 2 * r) op_error(n, "pads needs 2 x rank values");
  const Tensor* value = in.size() > 2 && in[2] && in[2]->numel() ? in[2] : nullptr;
  if (value && value->dtype() != x.dtype()) op_error(n, "its constant_value is not of the data's type");
  Shape s(static_cast<size_t>(r));
  for (int d = 0; d < r; ++d) {
    int64_t& v = s[static_cast<size_t>(d)];
    if (__builtin_add_overflow(x.shape()[static_cast<size_t>(d)], pads[static_cast<size_t>(d)], &v) ||
        __builtin_add_overflow(v, pads[static_cast<size_t>(d + r)], &v))
      throw AllocationRefused("pads of " + std::to_string(pads[static_cast<size_t>(d)]) + " and " +
                              std::to_string(pads[static_cast<size_t>(d + r)]) + " overflow a dimension");
    if (v < 0) op_error(n, "pads cut away more than the tensor");
  }
  // Any element type (uint8 in the QOperator format, padded with its zero point), byte-wise.
  const size_t es = dtype_size(x.dtype());
  Tensor y = Tensor::zeros(s, x.dtype());
  char* py = y.data<char>();
  const char* px = x.data<char>();
  if (value && x.dtype() == DType::kF32) std::fill_n(y.f32(), y.numel(), value->f32()[0]);
  else if (value && es == 1) std::memset(py, value->data<char>()[0], static_cast<size_t>(y.numel()));
  else if (value)
    for (int64_t i = 0; i < y.numel(); ++i) std::memcpy(py + static_cast<size_t>(i) * es, value->data<char>(), es);
  if (r == 0) {  // a scalar: nothing to pad (pads is empty)
    std::memcpy(py, px, es);
    out[0] = y;
    return;
  }
  if (x.numel() == 0) {
    out[0] = y;
    return;
  }
  // Each row of the last dimension to its place at once: the part of it the pads keep, copied.
  const auto ys = strides_of(s);
  const int64_t w = x.shape().back(), lo = pads[static_cast<size_t>(r - 1)], keep_lo = std::max<int64_t>(0, -lo),
                keep_hi = std::min<int64_t>(w, s.back() - lo);
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  for (int64_t i = 0, total = x.numel(); i < total && keep_lo < keep_hi; i += w) {
    int64_t o = 0;
    bool in_out = true;
    for (int d = 0; d + 1 < r; ++d) {
      const int64_t c = idx[static_cast<size_t>(d)] + pads[static_cast<size_t>(d)];
      in_out = in_out && c >= 0 && c < s[static_cast<size_t>(d)];
      o += c * ys[static_cast<size_t>(d)];
    }
    if (in_out)
      std::memcpy(py + static_cast<size_t>(o + lo + keep_lo) * es, px + static_cast<size_t>(i + keep_lo) * es,
                  static_cast<size_t>(keep_hi - keep_lo) * es);
    for (int d = r - 1; d-- > 0;) {
      if (++idx[static_cast<size_t>(d)] < x.shape()[static_cast<size_t>(d)]) break;
      idx[static_cast<size_t>(d)] = 0;
    }
  }
  out[0] = y;
}

}  // namespace loom::rt::graph

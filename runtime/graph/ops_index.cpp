// ops_index.cpp — operators that pick, place or rearrange elements by index: GatherND, ScatterND,
// ScatterElements, TopK, NonZero, Unique, Compress, OneHot, EyeLike, Tile, DepthToSpace, SpaceToDepth and
// ReverseSequence. Elements move by their size, so any element type goes where only indices are
// computed; the reductions of the scatters and TopK's order compute on float32, int64 and int32.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "ops.hpp"

namespace loom::rt::graph {
namespace {

// An element as an index: integers exactly, floats (OneHot's depth may be one) toward zero.
int64_t index_at(const Node& n, const Tensor& t, int64_t i) {
  if (t.dtype() == DType::kI64) return t.data<int64_t>()[i];
  const double v = load_as_double(t, i);
  if (!(v > -9.0e18 && v < 9.0e18)) op_error(n, "an index or depth outside int64");
  return static_cast<int64_t>(v);
}

// One element of `src` combined into element `at` of `dst` by a scatter's reduction.
void combine(const Node& n, const std::string& how, Tensor& dst, int64_t at, const Tensor& src, int64_t from) {
  const size_t es = dtype_size(dst.dtype());
  if (how == "none") {
    std::memcpy(dst.data<char>() + at * es, src.data<char>() + from * es, es);
    return;
  }
  auto apply = [&](auto* d, auto s) {
    if (how == "add") *d += s;
    else if (how == "mul") *d *= s;
    else if (how == "max") *d = std::max(*d, s);
    else if (how == "min") *d = std::min(*d, s);
    else op_error(n, "reduction '" + how + "' is not supported");
  };
  if (dst.dtype() == DType::kF32) apply(dst.f32() + at, src.f32()[from]);
  else if (dst.dtype() == DType::kI64) apply(dst.data<int64_t>() + at, src.data<int64_t>()[from]);
  else if (dst.dtype() == DType::kI32) apply(dst.data<int32_t>() + at, src.data<int32_t>()[from]);
  else op_error(n, std::string("a reduction over ") + dtype_name(dst.dtype()) + " is not supported");
}

int64_t wrap(const Node& n, int64_t i, int64_t len) {
  if (i < -len || i >= len) op_error(n, "index " + std::to_string(i) + " is outside [" + std::to_string(-len) + ", " + std::to_string(len) + ")");
  return i < 0 ? i + len : i;
}

// Where the index tuples of indices [..., k] point into `data` (element offsets; batch_dims
// leading dimensions shared), and how many elements each picks.
std::vector<int64_t> nd_offsets(const Node& n, const Tensor& data, const Tensor& indices, int64_t b, int64_t* slice) {
  const std::vector<int64_t> idx = ints_of(n, indices);
  const int r = data.ndim(), q = indices.ndim();
  if (q < 1) op_error(n, "indices must have rank >= 1");
  const int64_t k = indices.dim(-1);
  if (b < 0 || b >= q || b + k > r) op_error(n, "the index tuples do not fit the data's rank");
  for (int d = 0; d < b; ++d)
    if (data.dim(d) != indices.dim(d)) op_error(n, "data and indices differ in a batch dimension");
  const auto st = strides_of(data.shape());
  int64_t batches = 1, per = 1;
  for (int d = 0; d < b; ++d) batches *= data.dim(d);
  for (int d = static_cast<int>(b); d < q - 1; ++d) per *= indices.dim(d);
  *slice = numel_of(Shape(data.shape().begin() + b + k, data.shape().end()));
  std::vector<int64_t> off(static_cast<size_t>(batches * per));
  for (int64_t p = 0; p < batches * per; ++p) {
    int64_t o = b > 0 ? (p / per) * st[static_cast<size_t>(b - 1)] : 0;
    for (int64_t j = 0; j < k; ++j)
      o += wrap(n, idx[static_cast<size_t>(p * k + j)], data.dim(static_cast<int>(b + j))) * st[static_cast<size_t>(b + j)];
    off[static_cast<size_t>(p)] = o;
  }
  return off;
}

}  // namespace

void op_gather_nd(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &data = need(n, in, 0), &indices = need(n, in, 1);
  const int64_t b = attr_i(n, "batch_dims", 0);
  int64_t slice = 1;
  const std::vector<int64_t> off = nd_offsets(n, data, indices, b, &slice);
  Shape ys(indices.shape().begin(), indices.shape().end() - 1);
  for (int d = static_cast<int>(b + indices.dim(-1)); d < data.ndim(); ++d) ys.push_back(data.dim(d));
  Tensor y = Tensor::empty(ys, data.dtype());
  const size_t es = dtype_size(data.dtype());
  for (size_t p = 0; p < off.size(); ++p)
    std::memcpy(y.data<char>() + p * slice * es, data.data<char>() + off[p] * static_cast<int64_t>(es), slice * es);
  out[0] = y;
}

void op_scatter_nd(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &data = need(n, in, 0), &indices = need(n, in, 1), &updates = need(n, in, 2);
  if (updates.dtype() != data.dtype()) op_error(n, "updates and data differ in type");
  int64_t slice = 1;
  const std::vector<int64_t> off = nd_offsets(n, data, indices, 0, &slice);
  if (updates.numel() != static_cast<int64_t>(off.size()) * slice) op_error(n, "updates do not match the index tuples");
  const std::string how = attr_s(n, "reduction", "none");
  Tensor y = data.clone();
  for (size_t p = 0; p < off.size(); ++p)
    for (int64_t e = 0; e < slice; ++e) combine(n, how, y, off[p] + e, updates, static_cast<int64_t>(p) * slice + e);
  out[0] = y;
}

void op_scatter_elements(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &data = need(n, in, 0), &indices = need(n, in, 1), &updates = need(n, in, 2);
  const int r = data.ndim();
  if (indices.shape() != updates.shape() || indices.ndim() != r) op_error(n, "indices and updates must have the data's rank and one shape");
  if (updates.dtype() != data.dtype()) op_error(n, "updates and data differ in type");
  const int axis = norm_axis(n, attr_i(n, "axis", 0), r);
  for (int d = 0; d < r; ++d)
    if (indices.dim(d) > data.dim(d)) op_error(n, "indices reach past the data's dimension " + std::to_string(d));
  const std::vector<int64_t> idx = ints_of(n, indices);
  const auto st = strides_of(data.shape());
  const std::string how = attr_s(n, "reduction", "none");
  Tensor y = data.clone();
  std::vector<int64_t> at(static_cast<size_t>(r), 0);
  for (size_t i = 0; i < idx.size(); ++i) {
    int64_t dst = 0;
    for (int d = 0; d < r; ++d)
      dst += (d == axis ? wrap(n, idx[i], data.dim(axis)) : at[static_cast<size_t>(d)]) * st[static_cast<size_t>(d)];
    combine(n, how, y, dst, updates, static_cast<int64_t>(i));
    for (int d = r; d-- > 0;) {
      if (++at[static_cast<size_t>(d)] < indices.dim(d)) break;
      at[static_cast<size_t>(d)] = 0;
    }
  }
  out[0] = y;
}

// TopK: the k largest (or smallest) along an axis, equal values in the order of their index.
void op_top_k(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  const std::vector<int64_t> kv = ints_of(n, need(n, in, 1));
  const int r = x.ndim();
  if (r == 0) op_error(n, "TopK takes a tensor of rank >= 1");
  const int axis = norm_axis(n, attr_i(n, "axis", -1), r);
  const int64_t len = x.dim(axis);
  if (kv.size() != 1 || kv[0] < 0 || kv[0] > len) op_error(n, "k must be one value in [0, " + std::to_string(len) + "]");
  const int64_t k = kv[0], inner = strides_of(x.shape())[static_cast<size_t>(axis)], outer = len ? x.numel() / (len * inner) : 0;
  const bool largest = attr_i(n, "largest", 1) != 0;
  Shape ys = x.shape();
  ys[static_cast<size_t>(axis)] = k;
  Tensor v = Tensor::empty(ys, x.dtype()), ix = Tensor::empty(ys, DType::kI64);
  out[0] = v;
  if (out.size() > 1) out[1] = ix;
  if (x.numel() == 0) return;  // its other dimensions may then be of any size
  const size_t es = dtype_size(x.dtype());
  std::vector<int64_t> order(static_cast<size_t>(len));
  std::vector<double> key(static_cast<size_t>(len));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * len * inner + i;
      for (int64_t j = 0; j < len; ++j) key[static_cast<size_t>(j)] = load_as_double(x, base + j * inner);
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
        const int c = compare_total(key[static_cast<size_t>(a)], key[static_cast<size_t>(b)]);
        return c != 0 ? (largest ? c > 0 : c < 0) : a < b;
      });
      for (int64_t j = 0; j < k; ++j) {
        const int64_t dst = o * k * inner + j * inner + i, src = base + order[static_cast<size_t>(j)] * inner;
        std::memcpy(v.data<char>() + dst * static_cast<int64_t>(es), x.data<char>() + src * static_cast<int64_t>(es), es);
        ix.data<int64_t>()[dst] = order[static_cast<size_t>(j)];
      }
    }
}

void op_non_zero(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  const int r = x.ndim();
  std::vector<int64_t> hits;
  for (int64_t i = 0; i < x.numel(); ++i)
    if (load_as_double(x, i) != 0) hits.push_back(i);
  const auto st = strides_of(x.shape());
  const int64_t cnt = static_cast<int64_t>(hits.size());
  Tensor y = Tensor::empty({r, cnt}, DType::kI64);
  for (int64_t j = 0; j < cnt; ++j)
    for (int d = 0; d < r; ++d) y.data<int64_t>()[d * cnt + j] = hits[static_cast<size_t>(j)] / st[static_cast<size_t>(d)] % x.dim(d);
  out[0] = y;
}

// Unique: the distinct elements (or slices along `axis`), sorted or in order of first appearance,
// with each one's first index, every element's index into them, and their counts.
void op_unique(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x0 = need(n, in, 0);
  const bool flat = !has_attr(n, "axis");
  const Tensor x = flat ? x0.reshape({x0.numel()}) : x0;
  const int axis = flat ? 0 : norm_axis(n, attr_i(n, "axis", 0), x.ndim());
  const int64_t len = x.dim(axis), inner = strides_of(x.shape())[static_cast<size_t>(axis)], outer = len ? x.numel() / (len * inner) : 0;
  auto cmp = [&](int64_t a, int64_t b) {  // slices a and b compared element by element, outer-major
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t e = 0; e < inner; ++e) {
        const double va = load_as_double(x, (o * len + a) * inner + e), vb = load_as_double(x, (o * len + b) * inner + e);
        if (const int c = compare_total(va, vb)) return c;
      }
    return 0;
  };
  std::vector<int64_t> order(static_cast<size_t>(len));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return cmp(a, b) < 0; });
  std::vector<int64_t> firsts, group(static_cast<size_t>(len));
  for (size_t k = 0; k < order.size(); ++k) {
    if (k == 0 || cmp(order[k], order[k - 1]) != 0) firsts.push_back(order[k]);
    group[static_cast<size_t>(order[k])] = static_cast<int64_t>(firsts.size()) - 1;
  }
  std::vector<int64_t> rank(firsts.size());  // a group's place in the output
  std::iota(rank.begin(), rank.end(), 0);
  if (!attr_i(n, "sorted", 1)) {
    std::vector<int64_t> by_first(firsts.size());
    std::iota(by_first.begin(), by_first.end(), 0);
    std::sort(by_first.begin(), by_first.end(), [&](int64_t a, int64_t b) { return firsts[static_cast<size_t>(a)] < firsts[static_cast<size_t>(b)]; });
    for (size_t k = 0; k < by_first.size(); ++k) rank[static_cast<size_t>(by_first[k])] = static_cast<int64_t>(k);
  }
  const int64_t u = static_cast<int64_t>(firsts.size());
  std::vector<int64_t> idx(static_cast<size_t>(u)), inv(static_cast<size_t>(len)), counts(static_cast<size_t>(u), 0);
  for (int64_t g = 0; g < u; ++g) idx[static_cast<size_t>(rank[static_cast<size_t>(g)])] = firsts[static_cast<size_t>(g)];
  for (int64_t i = 0; i < len; ++i) {
    inv[static_cast<size_t>(i)] = rank[static_cast<size_t>(group[static_cast<size_t>(i)])];
    ++counts[static_cast<size_t>(inv[static_cast<size_t>(i)])];
  }
  Shape ys = x.shape();
  ys[static_cast<size_t>(axis)] = u;
  Tensor y = Tensor::empty(ys, x.dtype());
  const int64_t es = static_cast<int64_t>(dtype_size(x.dtype()));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < u; ++j)
      std::memcpy(y.data<char>() + (o * u + j) * inner * es, x.data<char>() + (o * len + idx[static_cast<size_t>(j)]) * inner * es,
                  static_cast<size_t>(inner * es));
  const std::vector<Tensor> all = {y, make_i64(idx, {u}), make_i64(inv, {len}), make_i64(counts, {u})};
  for (size_t k = 0; k < out.size() && k < all.size(); ++k) out[k] = all[k];
}

void op_compress(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &x0 = need(n, in, 0), &c = need(n, in, 1);
  if (c.dtype() != DType::kBool || c.ndim() != 1) op_error(n, "condition must be a 1-D bool tensor");
  const bool flat = !has_attr(n, "axis");
  const Tensor x = flat ? x0.reshape({x0.numel()}) : x0;
  const int axis = flat ? 0 : norm_axis(n, attr_i(n, "axis", 0), x.ndim());
  const int64_t len = x.dim(axis), inner = strides_of(x.shape())[static_cast<size_t>(axis)], outer = len ? x.numel() / (len * inner) : 0;
  if (c.numel() > len) op_error(n, "condition is longer than the axis");
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < c.numel(); ++i)
    if (c.data<uint8_t>()[i]) keep.push_back(i);
  Shape ys = x.shape();
  ys[static_cast<size_t>(axis)] = static_cast<int64_t>(keep.size());
  Tensor y = Tensor::empty(ys, x.dtype());
  const int64_t es = static_cast<int64_t>(dtype_size(x.dtype())), kn = static_cast<int64_t>(keep.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < kn; ++j)
      std::memcpy(y.data<char>() + ((o * kn + j) * inner) * es, x.data<char>() + ((o * len + keep[static_cast<size_t>(j)]) * inner) * es,
                  static_cast<size_t>(inner * es));
  out[0] = y;
}

// OneHot(indices, depth, values [off, on], axis): negative indices count from the end, and one
// outside [-depth, depth) gives a row of off.
void op_one_hot(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &ind = need(n, in, 0), &dep = need(n, in, 1), &vals = need(n, in, 2);
  if (dep.numel() != 1 || vals.numel() != 2) op_error(n, "depth must be one value and values two");
  const int64_t depth = index_at(n, dep, 0);
  if (depth < 0) op_error(n, "a negative depth");
  const int r = ind.ndim() + 1, axis = norm_axis(n, attr_i(n, "axis", -1), r);
  Shape ys = ind.shape();
  ys.insert(ys.begin() + axis, depth);
  Tensor y = Tensor::empty(ys, vals.dtype());
  const int64_t es = static_cast<int64_t>(dtype_size(vals.dtype()));
  const int64_t inner = numel_of(Shape(ind.shape().begin() + axis, ind.shape().end()));
  const int64_t outer = inner ? ind.numel() / inner : 0;
  for (int64_t i = 0; i < y.numel(); ++i) std::memcpy(y.data<char>() + i * es, vals.data<char>(), static_cast<size_t>(es));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t h = index_at(n, ind, o * inner + i);
      if (h < 0) h += depth;
      if (h < 0 || h >= depth) continue;
      std::memcpy(y.data<char>() + ((o * depth + h) * inner + i) * es, vals.data<char>() + es, static_cast<size_t>(es));
    }
  out[0] = y;
}

void op_eye_like(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  if (x.ndim() != 2) op_error(n, "EyeLike takes a 2-D tensor");
  DType dt = x.dtype();
  if (has_attr(n, "dtype") && !dtype_from_onnx(static_cast<int32_t>(attr_i(n, "dtype", 1)), &dt))
    op_error(n, "dtype " + std::to_string(attr_i(n, "dtype", 1)) + " is not supported");
  const int64_t k = attr_i(n, "k", 0);
  Tensor y = Tensor::zeros(x.shape(), dt);
  for (int64_t i = 0; i < x.dim(0); ++i)
    if (i + k >= 0 && i + k < x.dim(1)) store_from_double(y, i * x.dim(1) + i + k, 1);
  out[0] = y;
}

void op_tile(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  const std::vector<int64_t> rep = ints_of(n, need(n, in, 1));
  const int r = x.ndim();
  if (static_cast<int>(rep.size()) != r) op_error(n, "repeats must have one value per dimension");
  Shape ys = x.shape();
  for (int d = 0; d < r; ++d) {
    if (rep[static_cast<size_t>(d)] < 0) op_error(n, "a negative repeat");
    ys[static_cast<size_t>(d)] = numel_of({x.dim(d), rep[static_cast<size_t>(d)]});
  }
  Tensor y = Tensor::empty(ys, x.dtype());
  if (y.numel() == 0) {
    out[0] = y;
    return;
  }
  // One output row (the last dimension) at a time: the input's row, repeated.
  const auto xs = strides_of(x.shape());
  const int64_t es = static_cast<int64_t>(dtype_size(x.dtype()));
  const int64_t row = r ? x.dim(r - 1) * es : es, times = r ? rep[static_cast<size_t>(r - 1)] : 1;
  std::vector<int64_t> at(static_cast<size_t>(std::max(r - 1, 0)), 0);
  char* dst = y.data<char>();
  for (int64_t i = 0; i < y.numel() / (r ? ys[static_cast<size_t>(r - 1)] : 1); ++i) {
    int64_t src = 0;
    for (int d = 0; d + 1 < r; ++d) src += (at[static_cast<size_t>(d)] % x.dim(d)) * xs[static_cast<size_t>(d)];
    for (int64_t t = 0; t < times; ++t, dst += row) std::memcpy(dst, x.data<char>() + src * es, static_cast<size_t>(row));
    for (int d = r - 1; d-- > 0;) {
      if (++at[static_cast<size_t>(d)] < ys[static_cast<size_t>(d)]) break;
      at[static_cast<size_t>(d)] = 0;
    }
  }
  out[0] = y;
}

// DepthToSpace (DCR or CRD) and SpaceToDepth on NCHW: blocks of channels become b x b pixels and back.
void op_depth_space(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  const int64_t b = attr_i(n, "blocksize", 0);
  if (x.ndim() != 4 || b < 1) op_error(n, "it takes an NCHW tensor and a positive blocksize");
  const bool to_space = n.op == "DepthToSpace", crd = attr_s(n, "mode", "DCR") == "CRD";
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  if (to_space ? C % (b * b) : (H % b || W % b)) op_error(n, "the blocksize does not divide the " + std::string(to_space ? "channels" : "height and width"));
  const int64_t c2 = to_space ? C / (b * b) : C;  // the channels of the space side
  const int64_t h2 = to_space ? H : H / b, w2 = to_space ? W : W / b;  // the depth side's pixels
  Tensor y = Tensor::empty(to_space ? Shape{N, c2, H * b, W * b} : Shape{N, C * b * b, h2, w2}, x.dtype());
  const size_t es = dtype_size(x.dtype());
  for (int64_t s = 0; s < N; ++s)
    for (int64_t c = 0; c < c2; ++c)
      for (int64_t i = 0; i < b; ++i)
        for (int64_t j = 0; j < b; ++j) {
          const int64_t deep = crd ? c * b * b + i * b + j : (i * b + j) * c2 + c;
          for (int64_t h = 0; h < h2; ++h)
            for (int64_t w = 0; w < w2; ++w) {
              const int64_t d_at = ((s * c2 * b * b + deep) * h2 + h) * w2 + w;
              const int64_t s_at = ((s * c2 + c) * h2 * b + h * b + i) * w2 * b + w * b + j;
              const int64_t src = to_space ? d_at : s_at, dst = to_space ? s_at : d_at;
              std::memcpy(y.data<char>() + dst * static_cast<int64_t>(es), x.data<char>() + src * static_cast<int64_t>(es), es);
            }
        }
  out[0] = y;
}

void op_reverse_sequence(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  const std::vector<int64_t> lens = ints_of(n, need(n, in, 1));
  const int r = x.ndim();
  if (r < 2) op_error(n, "it takes a tensor of rank >= 2");
  const int ba = norm_axis(n, attr_i(n, "batch_axis", 1), r), ta = norm_axis(n, attr_i(n, "time_axis", 0), r);
  if (ba == ta || (ba > 1 || ta > 1)) op_error(n, "batch_axis and time_axis must be 0 and 1");
  if (static_cast<int64_t>(lens.size()) != x.dim(ba)) op_error(n, "sequence_lens must have one value per batch entry");
  Tensor y = x.clone();
  const int64_t inner = strides_of(x.shape())[1], es = static_cast<int64_t>(dtype_size(x.dtype()));
  for (int64_t bi = 0; bi < x.dim(ba); ++bi) {
    const int64_t len = lens[static_cast<size_t>(bi)];
    if (len < 0 || len > x.dim(ta)) op_error(n, "a sequence length outside [0, " + std::to_string(x.dim(ta)) + "]");
    for (int64_t t = 0; t < len; ++t) {
      auto at = [&](int64_t tt) { return (ta == 0 ? tt * x.dim(1) + bi : bi * x.dim(1) + tt) * inner; };
      std::memcpy(y.data<char>() + at(t) * es, x.data<char>() + at(len - 1 - t) * es, static_cast<size_t>(inner * es));
    }
  }
  out[0] = y;
}

}  // namespace loom::rt::graph

// ops_math.cpp — MatMul (batched, broadcast) and Gemm on the runtime's GEMM (OpenBLAS or
// oneDNN), Softmax and LogSoftmax, the reductions, LayerNormalization.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/vec.hpp"
#include "ops.hpp"
#include "ops_fused.hpp"

namespace loom::rt::graph {

// The fusion pass's epilogue of a MatMul: a bias row (input 2) and the erf GELU.
void matmul_epilogue(const Node& n, const std::vector<const Tensor*>& in, Tensor& y) {
  const Tensor* bias = in.size() > 2 ? in[2] : nullptr;
  const bool gelu = attr_i(n, "loom.gelu", 0) != 0;
  if (!bias && !gelu) return;
  const int64_t cols = y.ndim() ? y.dim(-1) : 1, rows = cols ? y.numel() / cols : 0;  // a 1-D by 1-D product: a scalar
  if (bias) {
    if (bias->numel() != cols || bias->dtype() != DType::kF32) op_error(n, "the fused bias does not match the output");
    cpu::bias_act(y.f32(), bias->f32(), rows, cols, gelu ? cpu::Act::kGelu : cpu::Act::kNone);
  } else {
    gelu_rows(y.f32(), y.f32(), y.numel());
  }
}

namespace {

// Whether the fused transposes fit the operands as they came: both of rank 3 or both of rank 4,
// as each perm. The fusion knows the transposes' ranks, not always the other operand's.
bool strided_fits(const Node& n, const Tensor& a, const Tensor& b) {
  const auto r = static_cast<size_t>(a.ndim());
  if ((r != 3 && r != 4) || b.ndim() != a.ndim()) return false;
  for (const char* k : {"loom.perm_a", "loom.perm_b", "loom.perm_y"})
    if (has_attr(n, k) && attr_ints(n, k).size() != r) return false;
  return true;
}

// x through the fused transpose `key` of n, as a copy (the rare MatMul that strided_fits refuses).
Tensor transposed(const Node& n, const Tensor& x, const char* key) {
  if (!has_attr(n, key)) return x;
  Node t;
  t.op = "Transpose", t.name = n.name;
  t.attrs["perm"] = Attr::of(attr_ints(n, key));
  std::vector<const Tensor*> in{&x};
  std::vector<Tensor> out(1);
  op_transpose(t, in, out);
  return out[0];
}

}  // namespace

void op_matmul(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &a0 = need(n, in, 0), &b0 = need(n, in, 1);
  const float alpha = attr_f(n, "loom.alpha", 1.0f);
  if (has_attr(n, "loom.perm_a") || has_attr(n, "loom.perm_b") || has_attr(n, "loom.perm_y")) {
    if (a0.dtype() != DType::kF32 || b0.dtype() != DType::kF32) op_error(n, "MatMul runs on float32");
    if (strided_fits(n, a0, b0)) return matmul_strided(n, a0, b0, alpha, &out[0]);
    Node plain = n;
    for (const char* k : {"loom.perm_a", "loom.perm_b", "loom.perm_y"}) plain.attrs.erase(k);
    const Tensor a = transposed(n, a0, "loom.perm_a"), b = transposed(n, b0, "loom.perm_b");
    const std::vector<const Tensor*> operands{&a, &b};
    op_matmul(plain, operands, out);
    out[0] = transposed(n, out[0], "loom.perm_y");
    return;
  }
  if (a0.dtype() != DType::kF32 || b0.dtype() != DType::kF32) op_error(n, "MatMul runs on float32");
  if (a0.ndim() == 0 || b0.ndim() == 0) op_error(n, "MatMul of a scalar");
  const bool a_vec = a0.ndim() == 1, b_vec = b0.ndim() == 1;
  const Tensor a = a_vec ? a0.reshape({1, a0.dim(0)}) : a0;
  const Tensor b = b_vec ? b0.reshape({b0.dim(0), 1}) : b0;
  const int64_t M = a.dim(-2), K = a.dim(-1), N = b.dim(-1);
  if (b.dim(-2) != K) op_error(n, "cannot multiply " + a0.shape_str() + " by " + b0.shape_str());
  const Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = broadcast_shape(n, ab, bb);
  Shape os = batch;
  if (!a_vec) os.push_back(M);
  if (!b_vec) os.push_back(N);
  Tensor y = Tensor::empty(os);
  if (bb.empty() || numel_of(bb) == 1) {  // a weight: every row of a in one GEMM
    const int64_t rows = numel_of(ab) * M;
    if (numel_of(batch) == numel_of(ab)) {
      cpu::gemm(false, false, static_cast<int>(rows), static_cast<int>(N), static_cast<int>(K), alpha, a.f32(),
                static_cast<int>(K), b.f32(), static_cast<int>(N), 0.0f, y.f32(), static_cast<int>(N));
      matmul_epilogue(n, in, y);
      out[0] = y;
      return;
    }
  }
  const auto sa = broadcast_strides(ab, batch), sb = broadcast_strides(bb, batch);
  const int64_t count = numel_of(batch);
  std::vector<int64_t> idx(batch.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < batch.size(); ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    cpu::gemm(false, false, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha,
              a.f32() + oa * M * K, static_cast<int>(K), b.f32() + ob * K * N, static_cast<int>(N), 0.0f,
              y.f32() + i * M * N, static_cast<int>(N));
    for (size_t d = batch.size(); d-- > 0;) {
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
  matmul_epilogue(n, in, y);
  out[0] = y;
}

// Gemm: alpha op(A) op(B) + beta C, C broadcast to [M, N]; "loom.relu" (set by the fusion
// pass) applies ReLU on the way out.
void op_gemm(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &a = need(n, in, 0), &b = need(n, in, 1);
  if (a.ndim() != 2 || b.ndim() != 2 || a.dtype() != DType::kF32 || b.dtype() != DType::kF32)
    op_error(n, "Gemm takes two float32 matrices");
  const bool ta = attr_i(n, "transA", 0) != 0, tb = attr_i(n, "transB", 0) != 0;
  const float alpha = attr_f(n, "alpha", 1.0f), beta = attr_f(n, "beta", 1.0f);
  const int64_t M = ta ? a.dim(1) : a.dim(0), K = ta ? a.dim(0) : a.dim(1);
  const int64_t N = tb ? b.dim(0) : b.dim(1);
  if ((tb ? b.dim(1) : b.dim(0)) != K) op_error(n, "cannot multiply " + a.shape_str() + " by " + b.shape_str());
  Tensor y = Tensor::empty({M, N});
  float* py = y.f32();
  const Tensor* c = in.size() > 2 ? in[2] : nullptr;
  const bool relu = attr_i(n, "loom.relu", 0) != 0;
  if (c && c->dtype() != DType::kF32) op_error(n, "C must be float32");
  if (c && (c->numel() == N && (c->ndim() == 1 || (c->ndim() == 2 && c->dim(0) == 1))) && beta == 1.0f) {
    // A bias row: the GEMM, then the runtime's fused bias + activation (as the native MLP runs it).
    cpu::gemm(ta, tb, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, a.f32(),
              static_cast<int>(a.dim(1)), b.f32(), static_cast<int>(b.dim(1)), 0.0f, py, static_cast<int>(N));
    cpu::bias_act(py, c->f32(), static_cast<int>(M), static_cast<int>(N), relu ? cpu::Act::kRelu : cpu::Act::kNone);
    out[0] = y;
    return;
  }
  float acc = 0.0f;
  if (c && beta != 0.0f) {
    const Shape s = broadcast_shape(n, c->shape(), {M, N});
    if (s != Shape{M, N}) op_error(n, "C " + c->shape_str() + " does not broadcast to [M, N]");
    const auto st = broadcast_strides(c->shape(), {M, N});
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) py[i * N + j] = beta * c->f32()[i * st[0] + j * st[1]];
    acc = 1.0f;
  }
  cpu::gemm(ta, tb, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, a.f32(),
            static_cast<int>(a.dim(1)), b.f32(), static_cast<int>(b.dim(1)), acc, py, static_cast<int>(N));
  if (relu)
    for (int64_t i = 0; i < M * N; ++i) py[i] = py[i] > 0 ? py[i] : 0.0f;
  out[0] = y;
}

namespace {

template <typename T>
void cumsum_typed(const T* x, T* y, int64_t outer, int64_t len, int64_t inner, bool exclusive, bool reverse) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      T acc = 0;
      for (int64_t k = 0; k < len; ++k) {
        const int64_t at = (o * len + (reverse ? len - 1 - k : k)) * inner + i;
        const T v = x[at];
        if (exclusive) y[at] = acc;
        if constexpr (std::is_integral_v<T>)  // wraps, as numpy's
          acc = static_cast<T>(static_cast<std::make_unsigned_t<T>>(acc) + static_cast<std::make_unsigned_t<T>>(v));
        else
          acc += v;
        if (!exclusive) y[at] = acc;
      }
    }
}

}  // namespace

// CumSum along the axis input 1 gives (a scalar), inclusive or exclusive, forward or reverse.
void op_cumsum(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  const std::vector<int64_t> axis = ints_of(n, need(n, in, 1));
  if (axis.size() != 1) op_error(n, "axis must be one value");
  if (x.ndim() == 0) op_error(n, "a rank-0 tensor has no axis to sum along");
  const int a = norm_axis(n, axis[0], x.ndim());
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < a; ++d) outer *= x.dim(d);
  for (int d = a + 1; d < x.ndim(); ++d) inner *= x.dim(d);
  const bool exclusive = attr_i(n, "exclusive", 0) != 0, reverse = attr_i(n, "reverse", 0) != 0;
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  switch (x.dtype()) {
    case DType::kF32: cumsum_typed(x.f32(), y.f32(), outer, x.dim(a), inner, exclusive, reverse); break;
    case DType::kI64: cumsum_typed(x.data<int64_t>(), y.data<int64_t>(), outer, x.dim(a), inner, exclusive, reverse); break;
    case DType::kI32: cumsum_typed(x.data<int32_t>(), y.data<int32_t>(), outer, x.dim(a), inner, exclusive, reverse); break;
    default: op_error(n, std::string("CumSum of ") + dtype_name(x.dtype()) + " is not supported");
  }
  out[0] = y;
}

void op_softmax(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  if (x.dtype() != DType::kF32) op_error(n, "Softmax runs on float32");
  const int axis = norm_axis(n, attr_i(n, "axis", -1), x.ndim());
  const bool log = n.op == "LogSoftmax";
  int64_t outer = 1, inner = 1;
  const int64_t dim = x.ndim() ? x.dim(axis) : 1;
  for (int d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int d = axis + 1; d < x.ndim(); ++d) inner *= x.dim(d);
  Tensor y = Tensor::empty(x.shape());
  const float* px = x.f32();
  float* py = y.f32();
  if (inner == 1) {  // the last axis: contiguous rows
    softmax_rows(px, py, outer, dim, log);
    out[0] = y;
    return;
  }
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const float* r = px + o * dim * inner + i;
      float* w = py + o * dim * inner + i;
      float m = -INFINITY;
      for (int64_t k = 0; k < dim; ++k) m = std::max(m, r[k * inner]);
      float s = 0;
      for (int64_t k = 0; k < dim; ++k) {
        const float e = std::exp(r[k * inner] - m);
        w[k * inner] = e;
        s += e;
      }
      if (log) {
        const float ls = std::log(s) + m;
        for (int64_t k = 0; k < dim; ++k) w[k * inner] = r[k * inner] - ls;
      } else {
        const float inv = 1.0f / s;
        for (int64_t k = 0; k < dim; ++k) w[k * inner] *= inv;
      }
    }
  out[0] = y;
}

// ReduceMean / ReduceSum / ReduceMax over `axes` (attribute, or ReduceSum's input at opset 13).
namespace {

// One ONNX reduction: each element mapped (|x|, x^2, e^x), combined (sum, max, min, product) from
// its identity, the result finished (mean, square root, log).
struct Reducer {
  enum Combine { kSum, kMax, kMin, kProd } combine = kSum;
  enum Map { kSame, kAbs, kSquare, kExp } map = kSame;
  enum Finish { kNone, kMean, kSqrt, kLog } finish = kNone;
  float init() const { return combine == kMax ? -INFINITY : combine == kMin ? INFINITY : combine == kProd ? 1.0f : 0.0f; }
  float mapped(float x) const { return map == kAbs ? std::fabs(x) : map == kSquare ? x * x : map == kExp ? std::exp(x) : x; }
  float add(float a, float x) const {
    const float v = mapped(x);
    return combine == kMax ? std::max(a, v) : combine == kMin ? std::min(a, v) : combine == kProd ? a * v : a + v;
  }
  float done(float a, int64_t count) const {
    return finish == kMean ? (count ? a / static_cast<float>(count) : a) : finish == kSqrt ? std::sqrt(a) : finish == kLog ? std::log(a) : a;
  }
};

Reducer reducer_of(const std::string& op) {
  Reducer r;
  if (op == "ReduceMax") r.combine = Reducer::kMax;
  else if (op == "ReduceMin") r.combine = Reducer::kMin;
  else if (op == "ReduceProd") r.combine = Reducer::kProd;
  else if (op == "ReduceMean") r.finish = Reducer::kMean;
  else if (op == "ReduceL1") r.map = Reducer::kAbs;
  else if (op == "ReduceL2") r.map = Reducer::kSquare, r.finish = Reducer::kSqrt;
  else if (op == "ReduceSumSquare") r.map = Reducer::kSquare;
  else if (op == "ReduceLogSum") r.finish = Reducer::kLog;
  else if (op == "ReduceLogSumExp") r.map = Reducer::kExp, r.finish = Reducer::kLog;
  return r;
}

}  // namespace

void op_reduce(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  if (x.dtype() != DType::kF32) op_error(n, std::string(dtype_name(x.dtype())) + " is not supported (" + n.op + " runs on float32)");
  const Reducer red_op = reducer_of(n.op);
  std::vector<int64_t> axes = attr_ints(n, "axes");
  if (in.size() > 1 && in[1]) axes = ints_of(n, *in[1]);
  const bool keep = attr_i(n, "keepdims", 1) != 0;
  const int r = x.ndim();
  std::vector<bool> red(static_cast<size_t>(r), axes.empty() && !attr_i(n, "noop_with_empty_axes", 0));
  for (int64_t a : axes) red[static_cast<size_t>(norm_axis(n, a, r))] = true;
  Shape kept_shape(x.shape());
  for (int d = 0; d < r; ++d)
    if (red[static_cast<size_t>(d)]) kept_shape[static_cast<size_t>(d)] = 1;
  const int64_t total = x.numel(), outs = numel_of(kept_shape);
  const int64_t count = outs ? total / outs : 0;
  std::vector<float> acc(static_cast<size_t>(outs), red_op.init());
  const float* px = x.f32();
  if (r > 0 && red[static_cast<size_t>(r - 1)] && std::count(red.begin(), red.end(), true) == 1) {
    const int64_t dim = x.dim(-1);  // the last axis alone: rows
    for (int64_t o = 0; o < outs; ++o) {
      float s = red_op.init();
      for (int64_t k = 0; k < dim; ++k) s = red_op.add(s, px[o * dim + k]);
      acc[static_cast<size_t>(o)] = s;
    }
  } else {
    const auto ks = broadcast_strides(kept_shape, x.shape());
    std::vector<int64_t> idx(static_cast<size_t>(r), 0);
    for (int64_t i = 0; i < total; ++i) {
      int64_t o = 0;
      for (int d = 0; d < r; ++d) o += idx[static_cast<size_t>(d)] * ks[static_cast<size_t>(d)];
      float& a = acc[static_cast<size_t>(o)];
      a = red_op.add(a, px[i]);
      for (int d = r; d-- > 0;) {
        if (++idx[static_cast<size_t>(d)] < x.shape()[static_cast<size_t>(d)]) break;
        idx[static_cast<size_t>(d)] = 0;
      }
    }
  }
  Shape os;
  for (int d = 0; d < r; ++d)
    if (!red[static_cast<size_t>(d)]) os.push_back(x.shape()[static_cast<size_t>(d)]);
    else if (keep) os.push_back(1);
  Tensor y = Tensor::empty(os);
  for (int64_t o = 0; o < outs; ++o) y.f32()[o] = red_op.done(acc[static_cast<size_t>(o)], count);
  out[0] = y;
}

namespace {

// Visits every line along `axis` of a tensor of `shape`: fn(offset of its first element, stride).
template <typename F>
void for_lines(const Shape& shape, int axis, F fn) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t len = shape[static_cast<size_t>(axis)];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) fn(o * len * inner + i, inner);
}

}  // namespace

// ArgMax, ArgMin (float32): the index along `axis` (int64), the first or with select_last_index the last.
void op_arg(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  if (x.dtype() != DType::kF32) op_error(n, std::string(dtype_name(x.dtype())) + " is not supported (" + n.op + " runs on float32)");
  const int axis = norm_axis(n, attr_i(n, "axis", 0), x.ndim());
  const bool keep = attr_i(n, "keepdims", 1) != 0, last = attr_i(n, "select_last_index", 0) != 0, mx = n.op == "ArgMax";
  const int64_t len = x.dim(axis);
  if (len == 0) op_error(n, "an empty axis has no " + n.op);
  Shape os;
  for (int d = 0; d < x.ndim(); ++d)
    if (d != axis) os.push_back(x.dim(d));
    else if (keep) os.push_back(1);
  Tensor y = Tensor::empty(os, DType::kI64);
  int64_t* py = y.data<int64_t>();
  const float* px = x.f32();
  int64_t k = 0;  // the output follows the lines' order: outer, then inner
  for_lines(x.shape(), axis, [&](int64_t at, int64_t stride) {
    int64_t best = 0;
    for (int64_t j = 1; j < len; ++j) {
      const float v = px[at + j * stride], b = px[at + best * stride];
      if (mx ? (v > b || (last && v == b)) : (v < b || (last && v == b))) best = j;
    }
    py[k++] = best;
  });
  out[0] = y;
}

// Hardmax (opset 13, float32): 1 at the first largest value along `axis`, 0 elsewhere.
void op_hardmax(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  if (x.dtype() != DType::kF32) op_error(n, std::string(dtype_name(x.dtype())) + " is not supported (Hardmax runs on float32)");
  const int axis = norm_axis(n, attr_i(n, "axis", -1), x.ndim());
  Tensor y = Tensor::zeros(x.shape());
  const int64_t len = x.ndim() ? x.dim(axis) : 1;
  for_lines(x.shape(), axis, [&](int64_t at, int64_t stride) {
    int64_t best = 0;
    for (int64_t j = 1; j < len; ++j)
      if (x.f32()[at + j * stride] > x.f32()[at + best * stride]) best = j;
    if (len) y.f32()[at + best * stride] = 1.0f;
  });
  out[0] = y;
}

namespace {

// NegativeLogLikelihoodLoss on log-probabilities lp [N, C, d...] (float32) and targets [N, d...]:
// -lp[n, t, d...] times weight[t] (absent: 1), 0 where t is ignore_index; reduction none (the
// targets' shape), sum, or mean (over the weights of the targets counted).
Tensor nll_loss(const Node& n, const Tensor& lp, const Tensor& target, const Tensor* weight) {
  if (lp.dtype() != DType::kF32) op_error(n, std::string(dtype_name(lp.dtype())) + " is not supported (" + n.op + " runs on float32)");
  if (lp.ndim() < 2 || target.ndim() != lp.ndim() - 1) op_error(n, "expects input [N, C, d...] and target [N, d...]");
  const std::vector<int64_t> t = ints_of(n, target);
  const int64_t N = lp.dim(0), C = lp.dim(1), inner = N ? static_cast<int64_t>(t.size()) / N : 0;
  if (weight && (weight->dtype() != DType::kF32 || weight->numel() != C)) op_error(n, "weight must be float32 of the C classes");
  const bool ignoring = has_attr(n, "ignore_index");
  const int64_t ignore = attr_i(n, "ignore_index", 0);
  const std::string reduction = attr_s(n, "reduction", "mean");
  Tensor loss = Tensor::empty(target.shape());
  double sum = 0, weights = 0;
  for (int64_t b = 0; b < N; ++b)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t k = t[static_cast<size_t>(b * inner + i)];
      float v = 0;
      if (!(ignoring && k == ignore)) {
        if (k < 0 || k >= C) op_error(n, "target " + std::to_string(k) + " is not a class of " + std::to_string(C));
        const float w = weight ? weight->f32()[k] : 1.0f;
        v = -lp.f32()[(b * C + k) * inner + i] * w;
        weights += w;
      }
      loss.f32()[b * inner + i] = v;
      sum += v;
    }
  if (reduction == "none") return loss;
  Tensor y = Tensor::empty({});
  if (reduction == "sum") y.f32()[0] = static_cast<float>(sum);
  else if (reduction == "mean") y.f32()[0] = weights != 0 ? static_cast<float>(sum / weights) : 0.0f;
  else op_error(n, "reduction '" + reduction + "' is not supported (none, sum, mean)");
  return y;
}

}  // namespace

void op_nll_loss(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  out[0] = nll_loss(n, need(n, in, 0), need(n, in, 1), in.size() > 2 ? in[2] : nullptr);
}

// SoftmaxCrossEntropyLoss: log_softmax over axis 1 of the scores, then NegativeLogLikelihoodLoss;
// the second output, when asked, the log-probabilities.
void op_softmax_xent_loss(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  if (x.dtype() != DType::kF32) op_error(n, std::string(dtype_name(x.dtype())) + " is not supported (" + n.op + " runs on float32)");
  if (x.ndim() < 2) op_error(n, "expects scores [N, C, d...]");
  Tensor lp = Tensor::empty(x.shape());
  const int64_t N = x.dim(0), C = x.dim(1), inner = N && C ? x.numel() / (N * C) : 0;
  for (int64_t b = 0; b < N; ++b)
    for (int64_t i = 0; i < inner; ++i) {
      const float* px = x.f32() + b * C * inner + i;
      float m = -INFINITY;
      for (int64_t c = 0; c < C; ++c) m = std::max(m, px[c * inner]);
      double z = 0;
      for (int64_t c = 0; c < C; ++c) z += std::exp(static_cast<double>(px[c * inner] - m));
      const float lz = m + static_cast<float>(std::log(z));
      for (int64_t c = 0; c < C; ++c) lp.f32()[b * C * inner + c * inner + i] = px[c * inner] - lz;
    }
  out[0] = nll_loss(n, lp, need(n, in, 1), in.size() > 2 ? in[2] : nullptr);
  if (out.size() > 1) out[1] = lp;
}

// LayerNormalization (opset 17), and the fusion of opset 13's spelled-out form into it.
void op_layer_norm(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  const Tensor& scale = need(n, in, 1);
  const Tensor* bias = in.size() > 2 ? in[2] : nullptr;
  if (x.dtype() != DType::kF32) op_error(n, "LayerNormalization runs on float32");
  const int axis = norm_axis(n, attr_i(n, "axis", -1), x.ndim());
  const float eps = attr_f(n, "epsilon", 1e-5f);
  int64_t rows = 1, cols = 1;
  for (int d = 0; d < axis; ++d) rows *= x.dim(d);
  for (int d = axis; d < x.ndim(); ++d) cols *= x.dim(d);
  if (scale.numel() != cols || (bias && bias->numel() != cols))
    op_error(n, "scale or bias does not match the normalised " + std::to_string(cols) + " values");
  Tensor y = Tensor::empty(x.shape());
  const float *px = x.f32(), *g = scale.f32(), *b = bias ? bias->f32() : nullptr;
  float* py = y.f32();
  std::vector<float> means(static_cast<size_t>(rows)), invs(static_cast<size_t>(rows));
  layer_norm_rows(px, g, b, py, rows, cols, eps, means.data(), invs.data());
  out[0] = y;
  for (size_t k = 1; k < out.size(); ++k) {  // Mean and InvStdDev, when asked for
    Shape s = x.shape();
    for (int d = axis; d < x.ndim(); ++d) s[static_cast<size_t>(d)] = 1;
    out[k] = Tensor::empty(s);
    std::copy_n((k == 1 ? means : invs).begin(), rows, out[k].f32());
  }
}

}  // namespace loom::rt::graph

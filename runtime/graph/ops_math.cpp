// ops_math.cpp — MatMul (batched, broadcast) and Gemm on the runtime's GEMM (OpenBLAS or
// oneDNN), Softmax and LogSoftmax, the reductions, LayerNormalization.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/rt/tensor/kernels.hpp"
#include "ops.hpp"
#include "ops_fused.hpp"

namespace loom::rt::graph {

// The fusion pass's epilogue of a MatMul: a bias row (input 2) and the erf GELU.
void matmul_epilogue(const Node& n, const std::vector<const Tensor*>& in, Tensor& y) {
  const Tensor* bias = in.size() > 2 ? in[2] : nullptr;
  const bool gelu = attr_i(n, "loom.gelu", 0) != 0;
  if (!bias && !gelu) return;
  const int64_t cols = y.dim(-1), rows = cols ? y.numel() / cols : 0;
  if (bias) {
    if (bias->numel() != cols || bias->dtype() != DType::kF32) op_error(n, "the fused bias does not match the output");
    cpu::bias_act(y.f32(), bias->f32(), rows, cols, gelu ? cpu::Act::kGelu : cpu::Act::kNone);
  } else {
    gelu_rows(y.f32(), y.f32(), y.numel());
  }
}

namespace {

// A rank-4 operand as the GEMMs see it: the tensor read through a transpose `perm` (the
// fusion pass's loom.perm_a / loom.perm_b), each batch matrix by its offset and leading dimension.
struct Operand4 {
  Shape shape;                  // logical [b0, b1, rows, cols]
  std::vector<int64_t> stride;  // element strides of the logical axes
  bool trans = false;           // rows are contiguous (a transposed matrix for BLAS)
  int64_t ld = 0;
};

Operand4 operand4(const Node& n, const Tensor& t, const std::vector<int64_t>& perm) {
  if (t.ndim() != 4) op_error(n, "a fused transpose needs a rank-4 operand, got " + t.shape_str());
  const auto st = strides_of(t.shape());
  Operand4 o;
  for (int k = 0; k < 4; ++k) {
    const size_t p = static_cast<size_t>(perm.empty() ? k : perm[static_cast<size_t>(k)]);
    o.shape.push_back(t.shape()[p]);
    o.stride.push_back(st[p]);
  }
  if (o.stride[3] == 1) o.ld = o.stride[2];
  else if (o.stride[2] == 1) o.trans = true, o.ld = o.stride[3];
  else op_error(n, "a fused transpose leaves no contiguous matrix axis");
  return o;
}

// MatMul over rank-4 operands read through transposes, its output written through one
// (attention's Q K^T and P V without the copies).
void matmul_strided4(const Node& n, const Tensor& a, const Tensor& b, float alpha, Tensor* out) {
  const Operand4 A = operand4(n, a, attr_ints(n, "loom.perm_a")), B = operand4(n, b, attr_ints(n, "loom.perm_b"));
  const int64_t M = A.shape[2], K = A.shape[3], N = B.shape[3];
  if (B.shape[2] != K || A.shape[0] != B.shape[0] || A.shape[1] != B.shape[1])
    op_error(n, "cannot multiply the fused operands " + a.shape_str() + " and " + b.shape_str());
  const Shape ys = {A.shape[0], A.shape[1], M, N};
  const std::vector<int64_t> py = attr_ints(n, "loom.perm_y", {0, 1, 2, 3});
  Shape os(4);
  for (int k = 0; k < 4; ++k) os[static_cast<size_t>(k)] = ys[static_cast<size_t>(py[static_cast<size_t>(k)])];
  const auto ost = strides_of(os);
  std::vector<int64_t> yst(4);  // where each axis of the product lands in the output
  for (int k = 0; k < 4; ++k) yst[static_cast<size_t>(py[static_cast<size_t>(k)])] = ost[static_cast<size_t>(k)];
  if (yst[3] != 1) op_error(n, "a fused output transpose must keep the last axis");
  Tensor y = Tensor::empty(os);
  for (int64_t i = 0; i < ys[0]; ++i)
    for (int64_t j = 0; j < ys[1]; ++j)
      cpu::gemm(A.trans, B.trans, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha,
                a.f32() + i * A.stride[0] + j * A.stride[1], static_cast<int>(A.ld),
                b.f32() + i * B.stride[0] + j * B.stride[1], static_cast<int>(B.ld), 0.0f,
                y.f32() + i * yst[0] + j * yst[1], static_cast<int>(yst[2]));
  *out = y;
}

}  // namespace

void op_matmul(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &a0 = need(n, in, 0), &b0 = need(n, in, 1);
  const float alpha = attr_f(n, "loom.alpha", 1.0f);
  if (has_attr(n, "loom.perm_a") || has_attr(n, "loom.perm_b") || has_attr(n, "loom.perm_y")) {
    if (a0.dtype() != DType::kF32 || b0.dtype() != DType::kF32) op_error(n, "MatMul runs on float32");
    matmul_strided4(n, a0, b0, alpha, &out[0]);
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
void op_reduce(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  if (x.dtype() != DType::kF32) op_error(n, n.op + " runs on float32");
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
  const bool mx = n.op == "ReduceMax";
  std::vector<float> acc(static_cast<size_t>(outs), mx ? -INFINITY : 0.0f);
  const float* px = x.f32();
  if (r > 0 && red[static_cast<size_t>(r - 1)] && std::count(red.begin(), red.end(), true) == 1) {
    const int64_t dim = x.dim(-1);  // the last axis alone: rows
    for (int64_t o = 0; o < outs; ++o) {
      float s = mx ? -INFINITY : 0.0f;
      for (int64_t k = 0; k < dim; ++k) s = mx ? std::max(s, px[o * dim + k]) : s + px[o * dim + k];
      acc[static_cast<size_t>(o)] = s;
    }
  } else {
    const auto ks = broadcast_strides(kept_shape, x.shape());
    std::vector<int64_t> idx(static_cast<size_t>(r), 0);
    for (int64_t i = 0; i < total; ++i) {
      int64_t o = 0;
      for (int d = 0; d < r; ++d) o += idx[static_cast<size_t>(d)] * ks[static_cast<size_t>(d)];
      float& a = acc[static_cast<size_t>(o)];
      a = mx ? std::max(a, px[i]) : a + px[i];
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
  for (int64_t o = 0; o < outs; ++o)
    y.f32()[o] = n.op == "ReduceMean" && count ? acc[static_cast<size_t>(o)] / static_cast<float>(count) : acc[static_cast<size_t>(o)];
  out[0] = y;
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

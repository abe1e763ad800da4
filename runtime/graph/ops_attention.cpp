// ops_attention.cpp — MatMuls over operands read through the fusion pass's transposes (rank 3
// or 4: [T, N·heads, d] or [N, T, heads, d] as the batch of matrices attention multiplies,
// without copies), and Loom.Attention: softmax(alpha · A B + mask) V per batch matrix, its scores
// kept in a scratch block of the thread that computes them instead of passing through memory
// four times (the MatMul, the mask's Add, the Softmax, the second MatMul).
#include <algorithm>
#include <cmath>
#include <vector>

#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/vec.hpp"
#include "ops.hpp"
#include "ops_fused.hpp"

namespace loom::rt::graph {

namespace {

// An operand as the GEMMs see it: the tensor read through a transpose `perm` (the fusion pass's
// loom.perm_a / loom.perm_b; rank 3 as rank 4 with a leading 1), each batch matrix by its offset
// and leading dimension.
struct Operand4 {
  Shape shape;                  // logical [b0, b1, rows, cols]
  std::vector<int64_t> stride;  // element strides of the logical axes
  bool trans = false;           // rows are contiguous (a transposed matrix for BLAS)
  int64_t ld = 0;
  const float* at(const Tensor& t, int64_t i, int64_t j) const { return t.f32() + i * stride[0] + j * stride[1]; }
};

std::vector<int64_t> as_rank4(std::vector<int64_t> perm) {
  if (perm.size() != 3) return perm;
  for (auto& p : perm) ++p;
  perm.insert(perm.begin(), 0);
  return perm;
}

Operand4 operand4(const Node& n, const Tensor& t, const std::vector<int64_t>& perm3or4) {
  Shape shape = t.shape();
  if (shape.size() == 3) shape.insert(shape.begin(), 1);
  if (shape.size() != 4) op_error(n, "a fused transpose needs a rank-3 or rank-4 operand, got " + t.shape_str());
  const std::vector<int64_t> perm = as_rank4(perm3or4);
  const auto st = strides_of(shape);
  Operand4 o;
  for (int k = 0; k < 4; ++k) {
    const size_t p = static_cast<size_t>(perm.empty() ? k : perm[static_cast<size_t>(k)]);
    o.shape.push_back(shape[p]);
    o.stride.push_back(st[p]);
  }
  if (o.stride[3] == 1) o.ld = o.stride[2];
  else if (o.stride[2] == 1) o.trans = true, o.ld = o.stride[3];
  else op_error(n, "a fused transpose leaves no contiguous matrix axis");
  return o;
}

// The product [b0, b1, M, N] written through loom.perm_y: the output tensor and where each
// logical axis lands in it.
struct Placed {
  Tensor y;
  std::vector<int64_t> st;
  float* at(int64_t i, int64_t j) const { return const_cast<float*>(y.f32()) + i * st[0] + j * st[1]; }
};

Placed place(const Node& n, const Shape& product, bool rank3) {
  const std::vector<int64_t> py = as_rank4(attr_ints(n, "loom.perm_y", {0, 1, 2, 3}));
  Shape os(4);
  for (int k = 0; k < 4; ++k) os[static_cast<size_t>(k)] = product[static_cast<size_t>(py[static_cast<size_t>(k)])];
  const auto ost = strides_of(os);
  Placed p;
  p.st.resize(4);
  for (int k = 0; k < 4; ++k) p.st[static_cast<size_t>(py[static_cast<size_t>(k)])] = ost[static_cast<size_t>(k)];
  if (p.st[3] != 1) op_error(n, "a fused output transpose must keep the last axis");
  p.y = Tensor::empty(os);
  if (rank3) p.y = p.y.reshape({os[1], os[2], os[3]});
  return p;
}

// The batch matrices spread over the threads, each on one (as ONNX Runtime runs attention),
// rather than each GEMM split over all of them in turn; not when all of them are a few
// microseconds (one sequence of 16 positions), where waking the threads costs more.
template <class F>
void each_matrix(int64_t count, int64_t macs, F&& f) {
  vec::for_range(count, macs >= (int64_t{1} << 18) ? 2 : count + 1, [&](int64_t lo, int64_t hi) { f(lo, hi); });
}

}  // namespace

void matmul_strided(const Node& n, const Tensor& a, const Tensor& b, float alpha, Tensor* out) {
  const Operand4 A = operand4(n, a, attr_ints(n, "loom.perm_a")), B = operand4(n, b, attr_ints(n, "loom.perm_b"));
  const int64_t M = A.shape[2], K = A.shape[3], N = B.shape[3];
  if (B.shape[2] != K || A.shape[0] != B.shape[0] || A.shape[1] != B.shape[1])
    op_error(n, "cannot multiply the fused operands " + a.shape_str() + " and " + b.shape_str());
  const Placed y = place(n, {A.shape[0], A.shape[1], M, N}, a.ndim() == 3);
  each_matrix(A.shape[0] * A.shape[1], A.shape[0] * A.shape[1] * M * N * K, [&](int64_t lo, int64_t hi) {
    for (int64_t ij = lo; ij < hi; ++ij) {
      const int64_t i = ij / A.shape[1], j = ij % A.shape[1];
      cpu::gemm(A.trans, B.trans, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A.at(a, i, j),
                static_cast<int>(A.ld), B.at(b, i, j), static_cast<int>(B.ld), 0.0f, y.at(i, j), static_cast<int>(y.st[2]));
    }
  });
  *out = y.y;
}

namespace {

// Whether Loom.Attention's operands fit its one pass: q, k, v of one rank (3 or 4) as their
// perms, matching matrices, and a float mask that broadcasts to the scores without growing them.
bool attention_fits(const Node& n, const Tensor& q, const Tensor& k, const Tensor* mask, const Tensor& v) {
  const auto r = static_cast<size_t>(q.ndim());
  if ((r != 3 && r != 4) || k.ndim() != q.ndim() || v.ndim() != q.ndim()) return false;
  if (q.dtype() != DType::kF32 || k.dtype() != DType::kF32 || v.dtype() != DType::kF32) return false;
  for (const char* key : {"loom.qk_perm_a", "loom.qk_perm_b", "loom.perm_v", "loom.perm_y"})
    if (has_attr(n, key) && attr_ints(n, key).size() != r) return false;
  const Operand4 A = operand4(n, q, attr_ints(n, "loom.qk_perm_a")), B = operand4(n, k, attr_ints(n, "loom.qk_perm_b")),
                 V = operand4(n, v, attr_ints(n, "loom.perm_v"));
  if (B.shape[2] != A.shape[3] || V.shape[2] != B.shape[3]) return false;
  for (size_t d = 0; d < 2; ++d)
    if (B.shape[d] != A.shape[d] || V.shape[d] != A.shape[d]) return false;
  if (!mask) return true;
  if (mask->dtype() != DType::kF32 || mask->ndim() > q.ndim()) return false;
  const Shape scores = {A.shape[0], A.shape[1], A.shape[2], B.shape[3]};
  for (int d = 0; d < mask->ndim(); ++d) {
    const int64_t m = mask->shape()[static_cast<size_t>(d)], s = scores[static_cast<size_t>(4 - mask->ndim() + d)];
    if (m != 1 && m != s) return false;
  }
  return true;
}

// The four operators Loom.Attention stands for, one after another (operands the one pass
// cannot take: another rank, a mask that grows the scores).
void attention_steps(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  Node mm = n;
  mm.op = "MatMul";
  mm.attrs.clear();
  if (has_attr(n, "loom.alpha")) mm.attrs["loom.alpha"] = n.attrs.at("loom.alpha");
  if (has_attr(n, "loom.qk_perm_a")) mm.attrs["loom.perm_a"] = n.attrs.at("loom.qk_perm_a");
  if (has_attr(n, "loom.qk_perm_b")) mm.attrs["loom.perm_b"] = n.attrs.at("loom.qk_perm_b");
  std::vector<Tensor> s(1);
  op_matmul(mm, {in[0], in[1]}, s);
  if (in[2]) {
    std::vector<Tensor> sum(1);
    op_add(n, {&s[0], in[2]}, sum);
    s = sum;
  }
  Node sm = n;
  sm.op = "Softmax";
  sm.attrs.clear();
  std::vector<Tensor> p(1);
  op_softmax(sm, {&s[0]}, p);
  mm.attrs.clear();
  if (has_attr(n, "loom.perm_v")) mm.attrs["loom.perm_b"] = n.attrs.at("loom.perm_v");
  if (has_attr(n, "loom.perm_y")) mm.attrs["loom.perm_y"] = n.attrs.at("loom.perm_y");
  op_matmul(mm, {&p[0], in[3]}, out);
}

// scores[m][c] += mask[m * row + c * col] (a mask broadcast along its rows or columns: 0).
LOOM_VEC void add_mask(float* s, const float* mask, int64_t M, int64_t N, int64_t row, int64_t col) {
  for (int64_t m = 0; m < M; ++m) {
    float* sr = s + m * N;
    const float* mr = mask + m * row;
    if (col == 1) {
      for (int64_t c = 0; c < N; ++c) sr[c] += mr[c];
    } else {
      const float v = mr[0];
      for (int64_t c = 0; c < N; ++c) sr[c] += v;
    }
  }
}

}  // namespace

// Loom.Attention(q, k, mask or absent, v): MatMul(q, k) scaled by alpha, + mask, Softmax over the
// last axis, MatMul by v, each operand through its fused transpose.
void op_attention(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &q = need(n, in, 0), &k = need(n, in, 1), &v = need(n, in, 3);
  const Tensor* mask = in.size() > 2 ? in[2] : nullptr;
  if (!attention_fits(n, q, k, mask, v)) return attention_steps(n, in, out);
  const Operand4 A = operand4(n, q, attr_ints(n, "loom.qk_perm_a")), B = operand4(n, k, attr_ints(n, "loom.qk_perm_b")),
                 V = operand4(n, v, attr_ints(n, "loom.perm_v"));
  const int64_t b1 = A.shape[1], M = A.shape[2], K = A.shape[3], N = B.shape[3], D = V.shape[3];
  const float alpha = attr_f(n, "loom.alpha", 1.0f);
  const Placed y = place(n, {A.shape[0], b1, M, D}, q.ndim() == 3);
  std::vector<int64_t> mst(4, 0);
  if (mask) {
    Shape m4 = mask->shape();
    while (m4.size() < 4) m4.insert(m4.begin(), 1);
    mst = broadcast_strides(m4, {A.shape[0], b1, M, N});
  }
  each_matrix(A.shape[0] * b1, A.shape[0] * b1 * M * N * (K + D), [&](int64_t lo, int64_t hi) {
    std::vector<float> s(static_cast<size_t>(M * N));
    for (int64_t ij = lo; ij < hi; ++ij) {
      const int64_t i = ij / b1, j = ij % b1;
      cpu::gemm(A.trans, B.trans, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A.at(q, i, j),
                static_cast<int>(A.ld), B.at(k, i, j), static_cast<int>(B.ld), 0.0f, s.data(), static_cast<int>(N));
      if (mask) add_mask(s.data(), mask->f32() + i * mst[0] + j * mst[1], M, N, mst[2], mst[3]);
      softmax_rows_here(s.data(), s.data(), M, N);
      cpu::gemm(false, V.trans, static_cast<int>(M), static_cast<int>(D), static_cast<int>(N), 1.0f, s.data(),
                static_cast<int>(N), V.at(v, i, j), static_cast<int>(V.ld), 0.0f, y.at(i, j), static_cast<int>(y.st[2]));
    }
  });
  out[0] = y.y;
}

}  // namespace loom::rt::graph

// ops_attention.cpp — MatMuls over operands read through the fusion pass's transposes (rank 3
// or 4: [T, N·heads, d] or [N, T, heads, d] as the batch of matrices attention multiplies,
// without copies), and Loom.Attention: softmax(alpha · A B + mask) V per batch matrix, its scores
// kept in a scratch block of the thread that computes them instead of passing through memory
// four times (the MatMul, the mask's Add, the Softmax, the second MatMul).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/vec.hpp"
#include "ops.hpp"
#include "ops_fused.hpp"
#include "quant.hpp"

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

// Whether `m` (of dtype `dt`) broadcasts to the scores without growing them.
bool broadcasts_to(const Tensor& m, DType dt, const Shape& scores) {
  if (m.dtype() != dt || m.ndim() > 4) return false;
  for (int d = 0; d < m.ndim(); ++d) {
    const int64_t e = m.shape()[static_cast<size_t>(d)], s = scores[static_cast<size_t>(4 - m.ndim() + d)];
    if (e != 1 && e != s) return false;
  }
  return true;
}

// Whether Loom.Attention's operands fit its one pass: q, k, v of one rank (3 or 4) as their
// perms, matching matrices, and a float mask and a bool condition that broadcast to the scores
// without growing them.
bool attention_fits(const Node& n, const Tensor& q, const Tensor& k, const Tensor* mask, const Tensor* cond, const Tensor& v) {
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
  const Shape scores = {A.shape[0], A.shape[1], A.shape[2], B.shape[3]};
  if (mask && (mask->ndim() > q.ndim() || !broadcasts_to(*mask, DType::kF32, scores))) return false;
  return !cond || (cond->ndim() <= q.ndim() && broadcasts_to(*cond, DType::kBool, scores));
}

// The scores' Where: the condition's own node and the fill value as a tensor.
void where_step(const Node& n, const Tensor& cond, std::vector<Tensor>& s) {
  Tensor fill = Tensor::empty({});
  fill.fill(attr_f(n, "loom.fill", 0.0f));
  const bool keep = attr_i(n, "loom.keep", 1) != 0;
  Node w = n;
  w.op = "Where";
  w.attrs.clear();
  std::vector<Tensor> r(1);
  op_where(w, {&cond, keep ? &s[0] : &fill, keep ? &fill : &s[0]}, r);
  s = r;
}

// p[i] = c where p[i] is NaN.
LOOM_VEC void nan_to(float* p, int64_t count, float c) {
  for (int64_t i = 0; i < count; ++i) p[i] = p[i] != p[i] ? c : p[i];
}

// s[i] / c (div) or s[i] * c, as the Div or Mul node did.
LOOM_VEC void scale_by(float* s, int64_t count, float c, bool div) {
  if (div) {
    for (int64_t i = 0; i < count; ++i) s[i] = s[i] / c;
  } else {
    for (int64_t i = 0; i < count; ++i) s[i] = s[i] * c;
  }
}

// Loom.Attention's steps: those on the scores (loom.score_steps; without it, the Where over a
// condition input and the Add of a mask input, as given), and those on the probabilities after
// the Softmax (NaN made a value, a fake quantization).
class Steps {
 public:
  Steps(const Node& n, bool cond, bool mask) : p_q_(qdq_of(n)) {
    if (has_attr(n, "loom.score_steps")) {
      steps_ = n.attrs.at("loom.score_steps").ints;
      if (has_attr(n, "loom.score_consts")) consts_ = n.attrs.at("loom.score_consts").floats;
    } else {
      if (cond) steps_.push_back(kStepWhere);
      if (mask) steps_.push_back(kStepMask);
    }
    size_t need = 0;
    for (int64_t s : steps_) {
      need += s == kStepQdq ? 4 : s == kStepDiv || s == kStepMul ? 1 : 0;
      if (s < kStepQdq || s > kStepMask || (s == kStepWhere && !cond) || (s == kStepMask && !mask)) op_error(n, "a score step without its operand");
    }
    if (need != consts_.size()) op_error(n, "the score steps need " + std::to_string(need) + " constants");
    nan_ = has_attr(n, "loom.nan_fill"), nan_fill_ = attr_f(n, "loom.nan_fill", 0.0f);
  }
  // Each score step in order over `count` scores at s; where() and mask() do those two and
  // return where the scores are then and how many.
  template <class Where, class Mask>
  void scores(float* s, int64_t count, Where&& where, Mask&& mask) const {
    const float* c = consts_.data();
    for (int64_t step : steps_) {
      if (step == kStepQdq) {
        quantize_dequantize(s, count, c[0], c[1], c[2], c[3], s);
        c += 4;
      } else if (step == kStepDiv || step == kStepMul) {
        scale_by(s, count, *c++, step == kStepDiv);
      } else {
        std::tie(s, count) = step == kStepWhere ? where() : mask();
      }
    }
  }
  // The steps of the probabilities.
  void probs(float* p, int64_t count) const {
    if (nan_) nan_to(p, count, nan_fill_);
    if (p_q_) quantize_dequantize(p, count, p_q_[0], p_q_[1], p_q_[2], p_q_[3], p);
  }

 private:
  static const float* qdq_of(const Node& n) {
    if (!has_attr(n, "loom.p_qdq")) return nullptr;
    const std::vector<float>& q = n.attrs.at("loom.p_qdq").floats;
    if (q.size() != 4) op_error(n, "loom.p_qdq must hold a scale, a zero point and the range");
    return q.data();
  }
  std::vector<int64_t> steps_;
  std::vector<float> consts_;
  const float* p_q_;
  bool nan_ = false;
  float nan_fill_ = 0.0f;
};

// The four operators Loom.Attention stands for, one after another (operands the one pass
// cannot take: another rank, a mask that grows the scores).
void attention_steps(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  Node mm = n;
  mm.op = "MatMul";
  mm.attrs.clear();
  if (has_attr(n, "loom.alpha")) mm.attrs["loom.alpha"] = n.attrs.at("loom.alpha");
  if (has_attr(n, "loom.qk_perm_a")) mm.attrs["loom.perm_a"] = n.attrs.at("loom.qk_perm_a");
  if (has_attr(n, "loom.qk_perm_b")) mm.attrs["loom.perm_b"] = n.attrs.at("loom.qk_perm_b");
  const Tensor* cond = in.size() > 4 ? in[4] : nullptr;
  const Steps each(n, cond, in[2]);
  std::vector<Tensor> s(1);
  op_matmul(mm, {in[0], in[1]}, s);
  // The Where and the Add may grow the scores (broadcast): each step over the scores as they are then.
  auto where = [&] {
    where_step(n, *cond, s);
    return std::make_pair(s[0].f32(), s[0].numel());
  };
  auto mask = [&] {
    std::vector<Tensor> sum(1);
    op_add(n, {&s[0], in[2]}, sum);
    s = sum;
    return std::make_pair(s[0].f32(), s[0].numel());
  };
  each.scores(s[0].f32(), s[0].numel(), where, mask);
  Node sm = n;
  sm.op = "Softmax";
  sm.attrs.clear();
  std::vector<Tensor> p(1);
  op_softmax(sm, {&s[0]}, p);
  each.probs(p[0].f32(), p[0].numel());
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

// scores[m][c] = cond[m * row + c * col] == keep ? scores[m][c] : fill.
LOOM_VEC void where_cond(float* s, const uint8_t* cond, int64_t M, int64_t N, int64_t row, int64_t col, bool keep, float fill) {
  for (int64_t m = 0; m < M; ++m) {
    float* sr = s + m * N;
    const uint8_t* cr = cond + m * row;
    for (int64_t c = 0; c < N; ++c) sr[c] = (cr[c * col] != 0) == keep ? sr[c] : fill;
  }
}

// Rows [0, R) of C[:, j0 : j0 + jn] = alpha A B for one small batch matrix, B packed as [K, NP]
// (NP a multiple of 16, zero past N): R x 16 sums held in registers over the whole of K.
typedef float f8 __attribute__((vector_size(32)));
__attribute__((always_inline)) inline void store_row(const f8* lo, const f8* hi, float alpha, float* c, int64_t jn) {
  float row[16];
  std::memcpy(row, lo, sizeof *lo);
  std::memcpy(row + 8, hi, sizeof *hi);
  for (int64_t j = 0; j < jn; ++j) c[j] = alpha * row[j];
}
template <int R>
__attribute__((always_inline)) inline void small_block(const float* a, int64_t a_row, int64_t a_col, const float* bt, int64_t NP,
                                                       int64_t K, int64_t jn, float alpha, float* c, int64_t ldc) {
  static_assert(R == 1 || R == 4, "blocks of 1 or 4 rows");
  f8 c00 = {}, c01 = {}, c10 = {}, c11 = {}, c20 = {}, c21 = {}, c30 = {}, c31 = {};
  for (int64_t k = 0; k < K; ++k) {
    f8 b0, b1;
    std::memcpy(&b0, bt + k * NP, sizeof b0);
    std::memcpy(&b1, bt + k * NP + 8, sizeof b1);
    const float* ak = a + k * a_col;
    c00 += ak[0] * b0, c01 += ak[0] * b1;
    if (R == 4) {
      c10 += ak[a_row] * b0, c11 += ak[a_row] * b1;
      c20 += ak[2 * a_row] * b0, c21 += ak[2 * a_row] * b1;
      c30 += ak[3 * a_row] * b0, c31 += ak[3 * a_row] * b1;
    }
  }
  store_row(&c00, &c01, alpha, c, jn);
  if (R == 4) {
    store_row(&c10, &c11, alpha, c + ldc, jn);
    store_row(&c20, &c21, alpha, c + 2 * ldc, jn);
    store_row(&c30, &c31, alpha, c + 3 * ldc, jn);
  }
}

// C[M, N] = alpha A B for one small batch matrix (a few thousand products, as short sequences
// have), A and B read through their element strides, where a BLAS call costs more than its
// arithmetic: B packed into `bt` [K, N rounded up to 16], then blocks of 4 rows by 16 columns.
LOOM_VEC void gemm_small(const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t b_row, int64_t b_col, int64_t M,
                         int64_t N, int64_t K, float alpha, float* c, int64_t ldc, float* bt) {
  const int64_t NP = (N + 15) / 16 * 16;
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t j = 0; j < N; ++j) bt[k * NP + j] = b[k * b_row + j * b_col];
    for (int64_t j = N; j < NP; ++j) bt[k * NP + j] = 0.0f;
  }
  for (int64_t j0 = 0; j0 < N; j0 += 16) {
    const int64_t jn = std::min<int64_t>(16, N - j0);
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) small_block<4>(a + m * a_row, a_row, a_col, bt + j0, NP, K, jn, alpha, c + m * ldc + j0, ldc);
    for (; m < M; ++m) small_block<1>(a + m * a_row, a_row, a_col, bt + j0, NP, K, jn, alpha, c + m * ldc + j0, ldc);
  }
}

// The element strides of `t` broadcast to the scores [b0, b1, M, N].
std::vector<int64_t> strides_in(const Tensor* t, const Shape& scores) {
  if (!t) return std::vector<int64_t>(4, 0);
  Shape s = t->shape();
  while (s.size() < 4) s.insert(s.begin(), 1);
  return broadcast_strides(s, scores);
}

}  // namespace

// Loom.Attention(q, k, mask or absent, v[, cond]): MatMul(q, k) scaled by alpha, the score steps
// (by default Where(cond, scores, loom.fill) -- Where(cond, loom.fill, scores) when loom.keep is
// 0 -- then + mask; loom.score_steps sets their order and adds a QDQ model's fake quantizations and
// scalings between them), Softmax over the last axis (loom.nan_fill: NaNs, a row masked whole,
// become that value; loom.p_qdq: fake-quantized), MatMul by v, each operand through its fused
// transpose.
void op_attention(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &q = need(n, in, 0), &k = need(n, in, 1), &v = need(n, in, 3);
  const Tensor* mask = in.size() > 2 ? in[2] : nullptr;
  const Tensor* cond = in.size() > 4 ? in[4] : nullptr;
  if (!attention_fits(n, q, k, mask, cond, v)) return attention_steps(n, in, out);
  const Operand4 A = operand4(n, q, attr_ints(n, "loom.qk_perm_a")), B = operand4(n, k, attr_ints(n, "loom.qk_perm_b")),
                 V = operand4(n, v, attr_ints(n, "loom.perm_v"));
  const int64_t b1 = A.shape[1], M = A.shape[2], K = A.shape[3], N = B.shape[3], D = V.shape[3];
  const float alpha = attr_f(n, "loom.alpha", 1.0f), fill = attr_f(n, "loom.fill", 0.0f);
  const bool keep = attr_i(n, "loom.keep", 1) != 0;
  const Steps each(n, cond, mask);
  const Placed y = place(n, {A.shape[0], b1, M, D}, q.ndim() == 3);
  const std::vector<int64_t> mst = strides_in(mask, {A.shape[0], b1, M, N}), cst = strides_in(cond, {A.shape[0], b1, M, N});
  const bool small = M * N * (K + D) <= (int64_t{1} << 16);
  each_matrix(A.shape[0] * b1, A.shape[0] * b1 * M * N * (K + D), [&](int64_t lo, int64_t hi) {
    std::vector<float> s(static_cast<size_t>(M * N)), packed(small ? static_cast<size_t>((std::max(N, D) + 15) / 16 * 16 * std::max(K, N)) : 0);
    for (int64_t ij = lo; ij < hi; ++ij) {
      const int64_t i = ij / b1, j = ij % b1;
      if (small)
        gemm_small(A.at(q, i, j), A.stride[2], A.stride[3], B.at(k, i, j), B.stride[2], B.stride[3], M, N, K, alpha, s.data(), N,
                   packed.data());
      else
        cpu::gemm(A.trans, B.trans, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A.at(q, i, j),
                  static_cast<int>(A.ld), B.at(k, i, j), static_cast<int>(B.ld), 0.0f, s.data(), static_cast<int>(N));
      each.scores(
          s.data(), M * N,
          [&] {
            where_cond(s.data(), cond->data<uint8_t>() + i * cst[0] + j * cst[1], M, N, cst[2], cst[3], keep, fill);
            return std::make_pair(s.data(), M * N);
          },
          [&] {
            add_mask(s.data(), mask->f32() + i * mst[0] + j * mst[1], M, N, mst[2], mst[3]);
            return std::make_pair(s.data(), M * N);
          });
      softmax_rows_here(s.data(), s.data(), M, N);
      each.probs(s.data(), M * N);
      if (small)
        gemm_small(s.data(), N, 1, V.at(v, i, j), V.stride[2], V.stride[3], M, D, N, 1.0f, y.at(i, j), y.st[2], packed.data());
      else
        cpu::gemm(false, V.trans, static_cast<int>(M), static_cast<int>(D), static_cast<int>(N), 1.0f, s.data(),
                  static_cast<int>(N), V.at(v, i, j), static_cast<int>(V.ld), 0.0f, y.at(i, j), static_cast<int>(y.st[2]));
    }
  });
  out[0] = y.y;
}

}  // namespace loom::rt::graph

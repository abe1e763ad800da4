// ops_contrib.cpp — the operators of ONNX Runtime's own domain (com.microsoft) that its
// transformer optimizer writes (contrib_schemas.cpp describes them to ONNX's checker), computed as
// ONNX Runtime's CPU kernels compute them, on float32: EmbedLayerNormalization, Attention and
// MultiHeadAttention (through Loom.Attention's one pass), Skip(Simplified)LayerNormalization, the
// GELUs (BiasGelu, FastGelu, QuickGelu) and FusedMatMul. What they define and these do
// not run (a past state, rotary embeddings, packed query/key/value) is refused naming the node.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/vec.hpp"
#include "ops.hpp"
#include "ops_fused.hpp"

namespace loom::rt::graph {

namespace {

const Tensor& float_in(const Node& n, const std::vector<const Tensor*>& in, size_t i) {
  const Tensor& t = need(n, in, i);
  if (t.dtype() != DType::kF32) op_error(n, "input " + std::to_string(i) + " is " + dtype_name(t.dtype()) + " (it runs on float32)");
  return t;
}

bool wanted(const Node& n, size_t k) { return k < n.out.size() && n.out[k] >= 0; }

// The additive mask of the attention scores, [B, 1 or heads, S, T], as ONNX Runtime builds it: a
// mask index of end positions ([B]; [2B] adds start positions) or a raw 0/1 mask ([B, T] or
// [B, S, T]) gives mask_filter_value where a position is masked, a causal mask the lowest float
// past the diagonal, and an attention bias ([B or 1, heads or 1, S, T]) is added. Undefined when
// there is nothing to add.
Tensor scores_mask(const Node& n, const Tensor* index, const Tensor* bias, bool causal, int64_t B, int64_t heads, int64_t S,
                   int64_t T) {
  if (!index && !bias && !causal) return Tensor();
  const float filter = attr_f(n, "mask_filter_value", -10000.0f);
  const bool per_head = bias && bias->ndim() == 4 && bias->dim(1) == heads && heads > 1;
  Tensor m = Tensor::zeros({B, per_head ? heads : 1, S, T});
  float* pm = m.f32();
  if (index) {
    if (index->dtype() != DType::kI32) op_error(n, "its mask is " + std::string(dtype_name(index->dtype())) + ", not int32");
    const int32_t* mi = index->data<int32_t>();
    const int r = index->ndim();
    const bool ends = r == 1 && (index->dim(0) == B || index->dim(0) == 2 * B);
    if (!ends && !(r == 2 && index->dim(0) == B && index->dim(1) == T) &&
        !(r == 3 && index->dim(0) == B && index->dim(1) == S && index->dim(2) == T))
      op_error(n, "its mask " + index->shape_str() + " is none of [B], [2B], [B, T] or [B, S, T] for B=" + std::to_string(B) +
                      ", S=" + std::to_string(S) + ", T=" + std::to_string(T));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        float* row = pm + (b * (per_head ? heads : 1) * S + s) * T;
        if (ends) {
          const int64_t end = std::clamp<int64_t>(mi[b], 0, T);
          const int64_t start = index->dim(0) == 2 * B ? std::clamp<int64_t>(mi[B + b], 0, T) : 0;
          for (int64_t t = 0; t < T; ++t) row[t] = t >= end || t < start ? filter : 0.0f;
        } else {
          const int32_t* raw = mi + (r == 2 ? b * T : (b * S + s) * T);
          for (int64_t t = 0; t < T; ++t) row[t] = raw[t] > 0 ? 0.0f : filter;
        }
      }
  }
  if (per_head)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 1; h < heads; ++h) std::memcpy(pm + (b * heads + h) * S * T, pm + b * heads * S * T, static_cast<size_t>(S * T) * sizeof(float));
  const int64_t planes = per_head ? heads : 1;
  if (causal)
    for (int64_t p = 0; p < B * planes; ++p)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t t = std::max<int64_t>(0, s + 1 + (T - S)); t < T; ++t) pm[(p * S + s) * T + t] = std::numeric_limits<float>::lowest();
  if (bias) {
    if (bias->dtype() != DType::kF32 || bias->ndim() != 4 || (bias->dim(0) != B && bias->dim(0) != 1) ||
        (bias->dim(1) != heads && bias->dim(1) != 1) || bias->dim(2) != S || bias->dim(3) != T)
      op_error(n, "its attention bias " + bias->shape_str() + " is not float [B or 1, heads or 1, S, T]");
    const float* pb = bias->f32();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < planes; ++h) {
        const float* src = pb + ((bias->dim(0) == 1 ? 0 : b) * bias->dim(1) + (bias->dim(1) == 1 ? 0 : h)) * S * T;
        float* dst = pm + (b * planes + h) * S * T;
        for (int64_t i = 0; i < S * T; ++i) dst[i] += src[i];
      }
  }
  return m;
}

// softmax(scale · Q Kᵀ + mask) V for q [B, S, heads·d], k [B, T, heads·d], v [B, T, heads·dv]
// (contiguous), by Loom.Attention's pass over the heads: [B, S, heads·dv].
Tensor attend(const Node& n, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, int64_t heads, float scale) {
  const int64_t B = q.dim(0), S = q.dim(1), T = k.dim(1), d = q.dim(2) / heads, dv = v.dim(2) / heads;
  Node att = n;
  att.op = "Loom.Attention";
  const std::vector<int64_t> heads_second = {0, 2, 1, 3};
  att.attrs = {{"loom.qk_perm_a", Attr::of(heads_second)}, {"loom.qk_perm_b", Attr::of(std::vector<int64_t>{0, 2, 3, 1})},
               {"loom.perm_v", Attr::of(heads_second)}, {"loom.perm_y", Attr::of(heads_second)}, {"loom.alpha", Attr::of(scale)}};
  const Tensor q4 = q.reshape({B, S, heads, d}), k4 = k.reshape({B, T, heads, d}), v4 = v.reshape({B, T, heads, dv});
  std::vector<Tensor> y(1);
  op_attention(att, {&q4, &k4, mask.defined() ? &mask : nullptr, &v4}, y);
  return y[0].reshape({B, S, heads * dv});
}

// y = x + s (+ b) over one row of h values.
LOOM_VEC void add_rows(const float* x, const float* s, const float* b, float* y, int64_t h) {
  if (b) {
    for (int64_t i = 0; i < h; ++i) y[i] = x[i] + s[i] + b[i];
  } else {
    for (int64_t i = 0; i < h; ++i) y[i] = x[i] + s[i];
  }
}

// Columns [from, from + width) of a [rows, cols] matrix, contiguous, plus bias[from...] when given.
Tensor columns(const Tensor& x, int64_t rows, int64_t cols, int64_t from, int64_t width, const float* bias) {
  Tensor y = Tensor::empty({rows, width});
  const float* px = x.f32() + from;
  float* py = y.f32();
  vec::for_items(rows, width, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r)
      if (bias) add_rows(px + r * cols, bias + from, nullptr, py + r * width, width);
      else std::memcpy(py + r * width, px + r * cols, static_cast<size_t>(width) * sizeof(float));
  });
  return y;
}

// [B, T, heads·d] as [B, heads, T, d] (a present key or value).
Tensor heads_first(const Tensor& x, int64_t heads) {
  const int64_t B = x.dim(0), T = x.dim(1), d = x.dim(2) / heads;
  Tensor y = Tensor::empty({B, heads, T, d});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads; ++h)
        std::memcpy(y.f32() + ((b * heads + h) * T + t) * d, x.f32() + (b * T + t) * heads * d + h * d, static_cast<size_t>(d) * sizeof(float));
  return y;
}

int64_t heads_of(const Node& n) {
  const int64_t heads = attr_i(n, "num_heads", 0);
  if (heads < 1) op_error(n, "num_heads must be positive");
  return heads;
}

void refuse_present(const Node& n, const std::vector<const Tensor*>& in, std::initializer_list<size_t> slots, const char* what) {
  for (size_t i : slots)
    if (optional_input(in, i)) op_error(n, std::string(what) + " (input " + std::to_string(i) + ") is not supported");
}

}  // namespace

// Attention(input, weights, bias, mask_index, past, attention_bias, past_sequence_length): one
// GEMM for Q, K and V, then attention over num_heads heads; `present` is K and V stacked.
void op_ms_attention(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &x = float_in(n, in, 0), &w = float_in(n, in, 1);
  const Tensor* bias = optional_input(in, 2);
  refuse_present(n, in, {4, 6}, "a past state");
  if (attr_i(n, "do_rotary", 0) != 0) op_error(n, "rotary embeddings are not supported");
  const int64_t heads = heads_of(n);
  if (x.ndim() != 3 || w.ndim() != 2 || w.dim(0) != x.dim(2))
    op_error(n, "input " + x.shape_str() + " and weights " + w.shape_str() + " are not [B, S, D] and [D, 3 x hidden]");
  std::vector<int64_t> sizes = attr_ints(n, "qkv_hidden_sizes", {w.dim(1) / 3, w.dim(1) / 3, w.dim(1) / 3});
  if (sizes.size() != 3 || sizes[0] != sizes[1] || sizes[0] + sizes[1] + sizes[2] != w.dim(1) ||
      sizes[0] % heads || sizes[2] % heads || sizes[0] < 1 || sizes[2] < 1)
    op_error(n, "the weights' " + std::to_string(w.dim(1)) + " columns do not split into query, key and value of num_heads heads");
  if (bias && (bias->dtype() != DType::kF32 || bias->numel() != w.dim(1))) op_error(n, "its bias does not match the weights' columns");
  const int64_t B = x.dim(0), S = x.dim(1), D = x.dim(2), cols = w.dim(1);
  Tensor qkv = Tensor::empty({B * S, cols});
  cpu::gemm(false, false, static_cast<int>(B * S), static_cast<int>(cols), static_cast<int>(D), 1.0f, x.f32(), static_cast<int>(D),
            w.f32(), static_cast<int>(cols), 0.0f, qkv.f32(), static_cast<int>(cols));
  const float* pb = bias ? bias->f32() : nullptr;
  const Tensor q = columns(qkv, B * S, cols, 0, sizes[0], pb).reshape({B, S, sizes[0]});
  const Tensor k = columns(qkv, B * S, cols, sizes[0], sizes[1], pb).reshape({B, S, sizes[1]});
  const Tensor v = columns(qkv, B * S, cols, 2 * sizes[0], sizes[2], pb).reshape({B, S, sizes[2]});
  const Tensor mask = scores_mask(n, optional_input(in, 3), optional_input(in, 5), attr_i(n, "unidirectional", 0) != 0, B, heads, S, S);
  const float scale = attr_f(n, "scale", 1.0f / std::sqrt(static_cast<float>(sizes[0] / heads)));
  out[0] = attend(n, q, k, v, mask, heads, scale);
  if (wanted(n, 1)) {
    if (sizes[1] != sizes[2]) op_error(n, "a present state needs keys and values of one size");
    const Tensor pk = heads_first(k, heads), pv = heads_first(v, heads);
    out[1] = Tensor::empty({2, B, heads, S, sizes[1] / heads});
    std::memcpy(out[1].f32(), pk.f32(), static_cast<size_t>(pk.numel()) * sizeof(float));
    std::memcpy(out[1].f32() + pk.numel(), pv.f32(), static_cast<size_t>(pv.numel()) * sizeof(float));
  }
}

// MultiHeadAttention(query [B, S, D], key [B, T, D], value [B, T, Dv], bias [D + D + Dv],
// key_padding_mask, attention_bias): the packed and past forms are refused.
void op_multi_head_attention(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& q0 = float_in(n, in, 0);
  if (!optional_input(in, 1) || !optional_input(in, 2)) op_error(n, "packed query, key and value are not supported (give key and value)");
  const Tensor &k0 = float_in(n, in, 1), &v0 = float_in(n, in, 2);
  refuse_present(n, in, {6, 7, 8, 9}, "a past state");
  if (wanted(n, 3)) op_error(n, "its qk output is not supported");
  const int64_t heads = heads_of(n);
  if (q0.ndim() != 3 || k0.ndim() != 3 || v0.ndim() != 3 || k0.dim(0) != q0.dim(0) || v0.dim(0) != q0.dim(0) ||
      k0.dim(1) != v0.dim(1) || k0.dim(2) != q0.dim(2) || q0.dim(2) % heads || v0.dim(2) % heads || q0.dim(2) < 1 || v0.dim(2) < 1)
    op_error(n, "query " + q0.shape_str() + ", key " + k0.shape_str() + " and value " + v0.shape_str() +
                    " are not [B, S, D], [B, T, D] and [B, T, Dv] of num_heads heads");
  const int64_t B = q0.dim(0), S = q0.dim(1), T = k0.dim(1), D = q0.dim(2), Dv = v0.dim(2);
  const Tensor* bias = optional_input(in, 3);
  if (bias && (bias->dtype() != DType::kF32 || bias->numel() != 2 * D + Dv)) op_error(n, "its bias is not [D + D + Dv]");
  const float* pb = bias ? bias->f32() : nullptr;
  const Tensor q = pb ? columns(q0, B * S, D, 0, D, pb).reshape(q0.shape()) : q0;
  const Tensor k = pb ? columns(k0.reshape({B * T, D}), B * T, D, 0, D, pb + D).reshape(k0.shape()) : k0;
  const Tensor v = pb ? columns(v0.reshape({B * T, Dv}), B * T, Dv, 0, Dv, pb + 2 * D).reshape(v0.shape()) : v0;
  const Tensor mask = scores_mask(n, optional_input(in, 4), optional_input(in, 5), attr_i(n, "unidirectional", 0) != 0, B, heads, S, T);
  out[0] = attend(n, q, k, v, mask, heads, attr_f(n, "scale", 1.0f / std::sqrt(static_cast<float>(D / heads))));
  if (wanted(n, 1)) out[1] = heads_first(k, heads);
  if (wanted(n, 2)) out[2] = heads_first(v, heads);
}

// EmbedLayerNormalization: LayerNorm(word[ids] + position[position ids or s] + segment[segment
// ids]); mask_index is each row's count of 1s in the mask (0 without one).
void op_embed_layer_norm(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& ids = need(n, in, 0);
  const Tensor *seg = optional_input(in, 1), *seg_table = optional_input(in, 4), *mask = optional_input(in, 7), *pos_ids = optional_input(in, 8);
  const Tensor &word = float_in(n, in, 2), &pos = float_in(n, in, 3), &gamma = float_in(n, in, 5), &beta = float_in(n, in, 6);
  if (ids.dtype() != DType::kI32 || ids.ndim() != 2) op_error(n, "input_ids must be int32 [B, S]");
  const int64_t B = ids.dim(0), S = ids.dim(1), H = word.ndim() == 2 ? word.dim(1) : -1;
  if (H < 1 || pos.ndim() != 2 || pos.dim(1) != H || gamma.numel() != H || beta.numel() != H)
    op_error(n, "the embeddings, gamma and beta do not share one hidden size");
  if ((seg == nullptr) != (seg_table == nullptr)) op_error(n, "segment_ids and segment_embedding come together");
  if (seg_table && (seg_table->dtype() != DType::kF32 || seg_table->ndim() != 2 || seg_table->dim(1) != H))
    op_error(n, "segment_embedding is not float [segments, hidden]");
  for (const Tensor* t : {seg, mask})
    if (t && (t->dtype() != DType::kI32 || t->shape() != ids.shape())) op_error(n, "segment_ids and mask must be int32 like input_ids");
  if (pos_ids && (pos_ids->dtype() != DType::kI32 || pos_ids->ndim() != 2 || pos_ids->dim(1) != S || (pos_ids->dim(0) != B && pos_ids->dim(0) != 1)))
    op_error(n, "position_ids must be int32 [B or 1, S]");
  Tensor sum = Tensor::empty({B, S, H});
  auto row_of = [&](const Tensor& table, int64_t i, const char* what) {
    if (i < 0 || i >= table.dim(0)) op_error(n, std::string(what) + " " + std::to_string(i) + " is outside its table of " + std::to_string(table.dim(0)));
    return table.f32() + i * H;
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t at = b * S + s;
      const float* w = row_of(word, ids.data<int32_t>()[at], "input id");
      const float* p = row_of(pos, pos_ids ? pos_ids->data<int32_t>()[(pos_ids->dim(0) == 1 ? 0 : b) * S + s] : s, "position");
      const float* g = seg ? row_of(*seg_table, seg->data<int32_t>()[at], "segment id") : nullptr;
      float* y = sum.f32() + at * H;
      for (int64_t h = 0; h < H; ++h) y[h] = w[h] + p[h] + (g ? g[h] : 0.0f);
    }
  out[0] = Tensor::empty({B, S, H});
  layer_norm_rows(sum.f32(), gamma.f32(), beta.f32(), out[0].f32(), B * S, H, attr_f(n, "epsilon", 1e-12f), nullptr, nullptr);
  if (wanted(n, 1)) {
    out[1] = Tensor::zeros({B}, DType::kI32);
    for (int64_t b = 0; mask && b < B; ++b)
      out[1].data<int32_t>()[b] = static_cast<int32_t>(std::count(mask->data<int32_t>() + b * S, mask->data<int32_t>() + (b + 1) * S, 1));
  }
  if (wanted(n, 2)) out[2] = sum;
}

// Skip(Simplified)LayerNormalization: the norm of input + skip (+ bias) over the last axis
// (root mean square for the simplified one); outputs 1-3 the rows' means, inverse deviations and
// the sum itself.
void op_skip_layer_norm(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const bool simplified = n.op.find("Simplified") != std::string::npos;
  const Tensor &x = float_in(n, in, 0), &skip = float_in(n, in, 1), &gamma = float_in(n, in, 2);
  const Tensor* beta = simplified ? nullptr : optional_input(in, 3);
  const Tensor* bias = optional_input(in, simplified ? 3 : 4);
  if (x.ndim() < 1) op_error(n, "its input is a scalar");
  const int64_t H = x.dim(-1), rows = H ? x.numel() / H : 0;
  if (skip.ndim() < 1 || skip.numel() == 0 || skip.dim(-1) != H || x.numel() % skip.numel() != 0 || skip.ndim() > x.ndim() ||
      !std::equal(skip.shape().rbegin(), skip.shape().rend(), x.shape().rbegin()))
    op_error(n, "skip " + skip.shape_str() + " does not broadcast to the input " + x.shape_str());
  for (const Tensor* t : {&gamma, beta, bias})
    if (t && (t->dtype() != DType::kF32 || t->numel() != H)) op_error(n, "gamma, beta and bias must hold one value per hidden unit");
  Tensor sum = Tensor::empty(x.shape()), y = Tensor::empty(x.shape());
  const float *px = x.f32(), *ps = skip.f32(), *pb = bias ? bias->f32() : nullptr, *pg = gamma.f32();
  float *psum = sum.f32(), *py = y.f32();
  const int64_t skip_rows = skip.numel() / H;
  vec::for_items(rows, H, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) add_rows(px + r * H, ps + (r % skip_rows) * H, pb, psum + r * H, H);
  });
  std::vector<float> means(static_cast<size_t>(rows)), invs(static_cast<size_t>(rows));
  const float eps = attr_f(n, "epsilon", 1e-12f);
  if (simplified) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* s = psum + r * H;
      double sq = 0;
      for (int64_t h = 0; h < H; ++h) sq += static_cast<double>(s[h]) * s[h];
      const float inv = invs[static_cast<size_t>(r)] = static_cast<float>(1 / std::sqrt(sq / static_cast<double>(H) + eps));
      for (int64_t h = 0; h < H; ++h) py[r * H + h] = s[h] * inv * pg[h];
    }
  } else {
    layer_norm_rows(psum, pg, beta ? beta->f32() : nullptr, py, rows, H, eps, means.data(), invs.data());
  }
  out[0] = y;
  Shape stat = x.shape();
  stat.back() = 1;
  for (size_t k = 1; k < 3; ++k)
    if (wanted(n, k)) {
      out[k] = Tensor::empty(stat);
      std::copy_n((k == 1 ? means : invs).begin(), rows, out[k].f32());
    }
  if (wanted(n, 3)) out[3] = sum;
}

// BiasGelu(A, B) = Gelu(A + B); FastGelu(X, bias) the tanh form of X + bias; QuickGelu
// x · sigmoid(alpha x).
void op_bias_gelu(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = float_in(n, in, 0);
  std::vector<Tensor> sum(1, x);
  if (optional_input(in, 1)) op_add(n, {&x, &float_in(n, in, 1)}, sum);
  if (n.op == "com.microsoft:QuickGelu") {
    const float alpha = attr_f(n, "alpha", 1.702f);
    Tensor y = Tensor::empty(sum[0].shape());
    const float* px = sum[0].f32();
    float* py = y.f32();
    for (int64_t i = 0; i < y.numel(); ++i) py[i] = px[i] / (1.0f + std::exp(-alpha * px[i]));
    out[0] = y;
    return;
  }
  Node g = n;
  g.attrs.clear();
  if (n.op == "com.microsoft:FastGelu") g.attrs["approximate"].kind = Attr::kString, g.attrs["approximate"].s = "tanh";
  op_gelu(g, {&sum[0]}, out);
}

// FusedMatMul: alpha · op(A) op(B), op transposing the last two axes where transA / transB.
void op_fused_matmul(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &a = float_in(n, in, 0), &b = float_in(n, in, 1);
  if (attr_i(n, "transBatchA", 0) || attr_i(n, "transBatchB", 0)) op_error(n, "transBatchA and transBatchB are not supported");
  Node mm = n;
  mm.op = "MatMul";
  mm.attrs = {{"loom.alpha", Attr::of(attr_f(n, "alpha", 1.0f))}};
  auto swap_last = [&](const Tensor& t, const char* flag, const char* key) {
    if (!attr_i(n, flag, 0)) return;
    if (t.ndim() < 2) op_error(n, std::string(flag) + " needs an operand of rank 2 or more");
    std::vector<int64_t> perm(static_cast<size_t>(t.ndim()));
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
    std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
    mm.attrs[key] = Attr::of(perm);
  };
  swap_last(a, "transA", "loom.perm_a");
  swap_last(b, "transB", "loom.perm_b");
  op_matmul(mm, {&a, &b}, out);
}

}  // namespace loom::rt::graph

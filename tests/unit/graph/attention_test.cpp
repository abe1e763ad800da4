// attention_test.cpp — the attention fusion on GPT-2's causal pattern and PyTorch 2's SDPA:
// MatMul(q, k^T) -> Div -> Where(causal condition, scores, a large negative fill) [-> Add a
// padding mask] -> Softmax [-> Where(IsNaN(p), 0, p)] -> MatMul by V becomes one Loom.Attention
// node answering as the nodes it replaces: on short sequences (its own small GEMMs) and long ones
// (the BLAS), the condition either way round, rows masked whole, and through the operators one
// after another where the condition would grow the scores; a QDQ model's attention, its fake
// quantizations moved past the transposes and into the one node; and ORT's causal
// MultiHeadAttention with fewer keys than queries.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "loom/rt/graph/graph.hpp"
#include "nodes.hpp"

namespace {

using loom::rt::DType;
using loom::rt::Tensor;
using loom::rt::graph::Attr;
using loom::rt::graph::Node;
using namespace loom_test;  // node, noisy, run_nodes

struct Case {
  int64_t batch, heads, t, d;
  bool keep_true;    // Where(cond, scores, fill), else Where(not cond, fill, scores)
  bool padding;      // an Add of a [batch, 1, 1, t] mask after the Where
  int64_t cond_batch = 1;  // the condition's first dimension
  bool nan_guard = false;  // Where(IsNaN(p), 0, p) after the Softmax, every key of batch 1 masked by -inf
};

// Value ids: 0 q, 1 k^T, 2 v, 3 sqrt(d), 4 the condition, 5 the fill, 6 the padding mask, 15 zero,
// the others the nodes'.
std::vector<Tensor> values(const Case& c) {
  std::vector<Tensor> v(16);
  v[0] = noisy({c.batch, c.heads, c.t, c.d}, 1.5f, 0.31f);
  v[1] = noisy({c.batch, c.heads, c.d, c.t}, 1.2f, 0.57f);
  v[2] = noisy({c.batch, c.heads, c.t, c.d}, 2.0f, 0.23f);
  v[3] = Tensor::empty({}), v[3].fill(std::sqrt(static_cast<float>(c.d)));
  v[4] = Tensor::empty({c.cond_batch, 1, c.t, c.t}, DType::kBool);
  for (int64_t b = 0; b < c.cond_batch; ++b)
    for (int64_t i = 0; i < c.t; ++i)
      for (int64_t j = 0; j < c.t; ++j) v[4].data<uint8_t>()[(b * c.t + i) * c.t + j] = (j <= i + b) == c.keep_true;
  v[5] = Tensor::empty({}), v[5].fill(-3.4028234663852886e38f);
  v[6] = Tensor::zeros({c.batch, 1, 1, c.t});
  for (int64_t b = 0; b < c.batch; ++b) v[6].f32()[b * c.t + c.t - 1] = b % 2 ? -10000.0f : 0.0f;
  if (c.nan_guard)
    for (int64_t j = 0; j < c.t; ++j) v[6].f32()[c.t + j] = -INFINITY;
  v[15] = Tensor::zeros({});
  return v;
}

std::vector<Node> nodes_of(const Case& c) {
  std::vector<Node> n{node("MatMul", {0, 1}, {7}), node("Div", {7, 3}, {8}),
                      c.keep_true ? node("Where", {4, 8, 5}, {9}) : node("Where", {4, 5, 8}, {9})};
  if (c.padding) n.push_back(node("Add", {9, 6}, {10}));
  n.push_back(node("Softmax", {c.padding ? 10 : 9}, {11}));
  n.back().attrs["axis"] = Attr::of(int64_t{-1});
  if (c.nan_guard) n.push_back(node("IsNaN", {11}, {13})), n.push_back(node("Where", {13, 15, 11}, {14}));
  n.push_back(node("MatMul", {c.nan_guard ? 14 : 11, 2}, {12}));
  return n;
}

void expect_close(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i) ASSERT_NEAR(got.f32()[i], want.f32()[i], 1e-5f * std::max(1.0f, std::fabs(want.f32()[i]))) << "at " << i;
}

TEST(GraphFuse, CausalWhereAttentionIsOneNodeAnsweringAsItsNodes) {
  const std::vector<Case> cases = {
      {2, 3, 5, 3, true, false},    // short: the small GEMMs, rows and columns past their blocks
      {2, 4, 16, 8, false, true},   // GPT-2's test shape, the condition the other way round, padding
      {1, 2, 70, 16, true, true},   // long: the BLAS
      {1, 2, 6, 4, true, false, 2},  // a condition of two batches over scores of one: one after another
      {2, 2, 7, 4, true, true, 1, true},    // SDPA as PyTorch 2 exports it: a row masked whole is 0, not NaN
      {2, 2, 40, 32, false, true, 1, true}  // the same through the BLAS
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("t " + std::to_string(c.t) + " d " + std::to_string(c.d));
    const std::vector<Tensor> vals = values(c);
    std::vector<Node> nodes = nodes_of(c);
    Tensor want;
    if (c.cond_batch == 1) {
      want = run_nodes(nodes, vals)[12];
    } else {  // the Where grows the scores to two batches; so does the product
      ASSERT_NO_THROW(want = run_nodes(nodes, vals)[12]);
    }
    if (c.nan_guard) {  // batch 1 answers zeros, as PyTorch's SDPA does
      for (int64_t i = want.numel() / 2; i < want.numel(); ++i) ASSERT_EQ(want.f32()[i], 0.0f);
    }
    std::vector<Tensor> constants(vals.size());
    constants[3] = vals[3], constants[5] = vals[5], constants[15] = vals[15];
    ASSERT_GT(loom::rt::graph::fuse_nodes(nodes, constants, {12}), 0);
    ASSERT_EQ(nodes.size(), 1u);
    EXPECT_EQ(nodes[0].op, "Loom.Attention");
    expect_close(run_nodes(nodes, vals)[12], want);
  }
}

// A Where whose other operand is not a one-value constant, or whose scores another node reads,
// is left to run as it is.
TEST(GraphFuse, WhereOfAnotherKindKeepsItsNodes) {
  const Case c{1, 2, 4, 2, true, false};
  for (int variant = 0; variant < 2; ++variant) {
    std::vector<Tensor> vals = values(c);
    std::vector<Node> nodes = nodes_of(c);
    std::vector<int> outputs{12};
    if (variant == 0) nodes[2].in[2] = 6;  // the fill a tensor of the model's
    if (variant == 1) outputs.push_back(9);  // the masked scores an output too
    std::vector<Tensor> constants(vals.size());
    constants[3] = vals[3], constants[5] = vals[5];
    loom::rt::graph::fuse_nodes(nodes, constants, outputs);
    EXPECT_TRUE(std::none_of(nodes.begin(), nodes.end(), [](const Node& n) { return n.op == "Loom.Attention"; })) << variant;
    EXPECT_TRUE(std::any_of(nodes.begin(), nodes.end(), [](const Node& n) { return n.op == "Where"; })) << variant;
  }
}

// A quantize_static QDQ model's attention: each operand's Transpose then its fake quantization
// (QuantizeLinear -> DequantizeLinear), the scores and the probabilities fake-quantized too (and,
// as quantize_static writes it when every operator is quantized, the scaled and the masked scores
// too), the product's Transpose after its own: the transposes go into the MatMuls' strides and the
// rest into one Loom.Attention, answering as the nodes (operands on a grid of 1/4, so the scores
// are exact).
TEST(GraphFuse, QdqAttentionIsOneNodeAnsweringAsItsNodes) {
  const int64_t B = 2, T = 6, H = 2, d = 4;
  for (bool every_operator : {false, true}) {
    SCOPED_TRACE(every_operator ? "every operator quantized" : "MatMuls quantized");
    std::vector<Tensor> vals(13);
    for (int i = 0; i < 3; ++i) vals[static_cast<size_t>(i)] = noisy({B, T, H, d}, 2.0f, 0.3f + 0.2f * static_cast<float>(i));
    auto scalar = [&](int id, float v) { vals[static_cast<size_t>(id)] = Tensor::empty({}), vals[static_cast<size_t>(id)].fill(v); };
    auto zero = [&](int id, uint8_t z) {
      vals[static_cast<size_t>(id)] = Tensor::empty({}, DType::kU8);
      vals[static_cast<size_t>(id)].data<uint8_t>()[0] = z;
    };
    scalar(4, 0.25f), zero(5, 128), scalar(6, 0.1f), zero(7, 128), scalar(8, 2.0f), scalar(9, 1.0f / 255.0f), zero(10, 0);
    scalar(11, 0.05f), zero(12, 128);
    vals.push_back(Tensor::zeros({B, 1, 1, T}));  // 13: the padding mask, the last key of batch 1 masked
    vals[13].f32()[2 * T - 1] = -10000.0f;
    std::vector<Node> nodes;
    int next = 14;
    auto add = [&](const std::string& op, std::vector<int> in) {
      nodes.push_back(node(op, std::move(in), {next}));
      vals.emplace_back();
      return next++;
    };
    auto transpose = [&](int in, std::vector<int64_t> perm) {
      const int t = add("Transpose", {in});
      nodes.back().attrs["perm"] = Attr::of(std::move(perm));
      return t;
    };
    auto qdq = [&](int in, int s, int z) { return add("DequantizeLinear", {add("QuantizeLinear", {in, s, z}), s, z}); };
    const int q = qdq(transpose(0, {0, 2, 1, 3}), 4, 5), k = qdq(transpose(1, {0, 2, 3, 1}), 4, 5), v = qdq(transpose(2, {0, 2, 1, 3}), 4, 5);
    int scores = add("Div", {qdq(add("MatMul", {q, k}), 6, 7), 8});
    if (every_operator) scores = qdq(add("Add", {qdq(scores, 6, 7), 13}), 6, 7);
    const int probs = qdq(add("Softmax", {scores}), 9, 10);
    const int y = transpose(qdq(add("MatMul", {probs, v}), 11, 12), {0, 2, 1, 3});
    const Tensor want = run_nodes(nodes, vals)[static_cast<size_t>(y)];
    std::vector<Tensor> constants(vals.size());
    for (int id = 4; id <= 12; ++id) constants[static_cast<size_t>(id)] = vals[static_cast<size_t>(id)];
    ASSERT_GT(loom::rt::graph::fuse_nodes(nodes, constants, {y}), 0);
    std::vector<std::string> ops;
    for (const Node& n : nodes) ops.push_back(n.op);
    const std::vector<std::string> fused{"Loom.QuantizeDequantize", "Loom.QuantizeDequantize", "Loom.QuantizeDequantize",
                                         "Loom.Attention", "Loom.QuantizeDequantize"};
    ASSERT_EQ(ops, fused);
    expect_close(run_nodes(nodes, vals)[static_cast<size_t>(y)], want);
  }
}

// ORT's MultiHeadAttention, causal (unidirectional) with fewer keys than queries: query s sees
// keys t <= s + T - S, none for the first queries (their scores all the lowest float, so they
// average V); the mask of one batch never reaches into another's.
TEST(GraphOps, CausalMultiHeadAttentionWithFewerKeysThanQueries) {
  const int64_t B = 2, S = 4, T = 2, D = 4;
  const Tensor q = noisy({B, S, D}, 1.0f, 0.41f), k = noisy({B, T, D}, 1.0f, 0.77f), v = noisy({B, T, D}, 3.0f, 0.19f);
  Node n = node("com.microsoft:MultiHeadAttention", {0, 1, 2}, {3});
  n.attrs["num_heads"] = Attr::of(int64_t{1});
  n.attrs["unidirectional"] = Attr::of(int64_t{1});
  const Tensor y = run_nodes({n}, {q, k, v, Tensor()})[3];
  ASSERT_EQ(y.shape(), (std::vector<int64_t>{B, S, D}));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i) {
      const int64_t seen = std::max<int64_t>(0, i + 1 + T - S);  // keys [0, seen); none: all of them, evenly
      std::vector<float> w(static_cast<size_t>(T), 0.0f);
      float top = -INFINITY, sum = 0.0f;
      for (int64_t t = 0; t < (seen ? seen : T); ++t) {
        float dot = 0.0f;
        for (int64_t c = 0; c < D; ++c) dot += q.f32()[(b * S + i) * D + c] * k.f32()[(b * T + t) * D + c];
        w[static_cast<size_t>(t)] = seen ? dot / 2.0f : 0.0f;  // scale 1/sqrt(4)
        top = std::max(top, w[static_cast<size_t>(t)]);
      }
      for (int64_t t = 0; t < (seen ? seen : T); ++t) sum += w[static_cast<size_t>(t)] = std::exp(w[static_cast<size_t>(t)] - top);
      for (int64_t c = 0; c < D; ++c) {
        float want = 0.0f;
        for (int64_t t = 0; t < (seen ? seen : T); ++t) want += w[static_cast<size_t>(t)] / sum * v.f32()[(b * T + t) * D + c];
        EXPECT_NEAR(y.f32()[(b * S + i) * D + c], want, 1e-5f) << "batch " << b << " query " << i;
      }
    }
}

}  // namespace

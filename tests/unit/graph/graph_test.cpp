// graph_test.cpp — the ONNX executor's operators one by one against small reference values
// worked out by hand or by a naive loop: broadcasting, odd shapes, negative axes and indices,
// the attributes' defaults, and the errors that name the node.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "loom/rt/graph/graph.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "ops.hpp"

namespace {

using loom::rt::DType;
using loom::rt::Tensor;
using loom::rt::graph::Attr;
using loom::rt::graph::Node;

Tensor F(std::vector<int64_t> shape, std::vector<float> v) {
  Tensor t = Tensor::empty(shape);
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  for (size_t i = 0; i < v.size(); ++i) t.f32()[i] = v[i];
  return t;
}

Tensor I(std::vector<int64_t> shape, std::vector<int64_t> v) {
  Tensor t = Tensor::empty(shape, DType::kI64);
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

Tensor iota(std::vector<int64_t> shape, float scale = 1.0f) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(i) * scale;
  return t;
}

Attr ai(int64_t v) { return Attr::of(v); }
Attr af(float v) { return Attr::of(v); }
Attr ints(std::vector<int64_t> v) { return Attr::of(std::move(v)); }
Attr as(std::string v) { return Attr::of(std::move(v)); }

std::vector<Tensor> run(const std::string& op, const std::vector<Tensor>& args, std::map<std::string, Attr> attrs = {},
                        size_t outs = 1) {
  std::vector<const Tensor*> in;
  for (const Tensor& t : args) in.push_back(&t);
  Node n;
  n.op = op;
  n.name = "t";
  n.attrs = std::move(attrs);
  n.fn = loom::rt::graph::find_op(op);
  EXPECT_NE(n.fn, nullptr) << op;
  std::vector<Tensor> out(outs);
  n.fn(n, in, out);
  return out;
}

Tensor run1(const std::string& op, const std::vector<Tensor>& in, std::map<std::string, Attr> attrs = {}) {
  return run(op, in, std::move(attrs)).at(0);
}

void expect_f(const Tensor& t, std::vector<int64_t> shape, std::vector<float> v, float tol = 1e-5f) {
  ASSERT_EQ(t.shape(), shape);
  ASSERT_EQ(t.dtype(), DType::kF32);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(t.f32()[i], v[i], tol * std::max(1.0f, std::fabs(v[i]))) << "at " << i;
}

void expect_i(const Tensor& t, std::vector<int64_t> shape, std::vector<int64_t> v) {
  ASSERT_EQ(t.shape(), shape);
  ASSERT_EQ(t.dtype(), DType::kI64);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(t.data<int64_t>()[i], v[i]) << "at " << i;
}

TEST(GraphOps, BinaryOperatorsBroadcastLikeNumpy) {
  const Tensor a = F({2, 3}, {1, 2, 3, 4, 5, 6}), row = F({3}, {10, 20, 30}), col = F({2, 1}, {100, 200});
  expect_f(run1("Add", {a, row}), {2, 3}, {11, 22, 33, 14, 25, 36});
  expect_f(run1("Sub", {col, row}), {2, 3}, {90, 80, 70, 190, 180, 170});
  const Tensor s = F({}, {2});
  expect_f(run1("Mul", {s, a}), {2, 3}, {2, 4, 6, 8, 10, 12});
  expect_f(run1("Div", {a, s}), {2, 3}, {0.5, 1, 1.5, 2, 2.5, 3});
  expect_f(run1("Pow", {a, s}), {2, 3}, {1, 4, 9, 16, 25, 36});
  const Tensor x = F({2, 1, 2}, {1, 2, 3, 4}), y = F({3, 1}, {0, 10, 20});
  expect_f(run1("Add", {x, y}), {2, 3, 2}, {1, 2, 11, 12, 21, 22, 3, 4, 13, 14, 23, 24});
  const Tensor e = Tensor::empty({0, 3});
  EXPECT_EQ(run1("Add", {e, row}).shape(), (std::vector<int64_t>{0, 3}));
  const Tensor bad = F({2}, {1, 2});
  EXPECT_THROW(run1("Add", {a, bad}), loom::rt::Error);
}

TEST(GraphOps, IntegerArithmeticForShapesAndItsErrors) {
  const Tensor a = I({3}, {7, -7, 9}), b = I({}, {2}), z = I({}, {0});
  expect_i(run1("Div", {a, b}), {3}, {3, -3, 4});  // C++ truncation, as ONNX Runtime does
  expect_i(run1("Mul", {a, b}), {3}, {14, -14, 18});
  try {
    run1("Div", {a, z});
    FAIL() << "integer division by zero";
  } catch (const loom::rt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Div 't'"), std::string::npos) << e.what();
  }
  const Tensor f = F({3}, {1, 2, 3});
  EXPECT_THROW(run1("Add", {a, f}), loom::rt::Error);  // int64 + float
}

TEST(GraphOps, ComparisonsWhereNotAndCast) {
  const Tensor a = I({3}, {1, 5, 3}), b = I({3}, {1, 2, 3});
  const Tensor eq = run1("Equal", {a, b});
  ASSERT_EQ(eq.dtype(), DType::kBool);
  EXPECT_EQ(std::vector<int>(eq.data<uint8_t>(), eq.data<uint8_t>() + 3), (std::vector<int>{1, 0, 1}));
  const Tensor nt = run1("Not", {eq});
  EXPECT_EQ(nt.data<uint8_t>()[1], 1);
  const Tensor x = F({2, 2}, {1, 2, 3, 4}), y = F({}, {-1});
  const Tensor c = run1("Greater", {x, F({2, 1}, {1.5, 3.5})});
  expect_f(run1("Where", {c, x, y}), {2, 2}, {-1, 2, -1, 4});
  const Tensor v = F({4}, {-1.7f, 0.2f, 2.9f, 1e3f});
  expect_i(run1("Cast", {v}, {{"to", ai(7)}}), {4}, {-1, 0, 2, 1000});  // toward zero
  // Values an integer type cannot hold saturate (C++ leaves them undefined); NaN gives 0.
  const Tensor huge = F({4}, {1e30f, -1e30f, 300.0f, NAN});
  expect_i(run1("Cast", {huge}, {{"to", ai(7)}}), {4}, {INT64_MAX, INT64_MIN, 300, 0});
  const Tensor u8 = run1("Cast", {huge}, {{"to", ai(2)}});
  EXPECT_EQ(std::vector<int>(u8.data<uint8_t>(), u8.data<uint8_t>() + 4), (std::vector<int>{255, 0, 255, 0}));
  const Tensor back = run1("Cast", {a}, {{"to", ai(1)}});
  expect_f(back, {3}, {1, 5, 3});
  EXPECT_THROW(run1("Cast", {v}, {{"to", ai(11)}}), loom::rt::Error);  // double
}

TEST(GraphOps, UnaryFunctions) {
  const Tensor x = F({4}, {-2, -0.5, 0.5, 4});
  expect_f(run1("Relu", {x}), {4}, {0, 0, 0.5, 4});
  expect_f(run1("Erf", {x}), {4}, {std::erf(-2.0f), std::erf(-0.5f), std::erf(0.5f), std::erf(4.0f)});
  expect_f(run1("Tanh", {x}), {4}, {std::tanh(-2.0f), std::tanh(-0.5f), std::tanh(0.5f), std::tanh(4.0f)});
  expect_f(run1("Sigmoid", {x}), {4}, {1 / (1 + std::exp(2.0f)), 1 / (1 + std::exp(0.5f)), 1 / (1 + std::exp(-0.5f)), 1 / (1 + std::exp(-4.0f))});
  const Tensor p = F({2}, {4, 9});
  expect_f(run1("Sqrt", {p}), {2}, {2, 3});
  expect_f(run1("Neg", {p}), {2}, {-4, -9});
}

// The vectorised Tanh, Sigmoid, Exp and Erf (vec.hpp's exp, no libm call) against libm over the
// range where their digits go: tiny values where tanh switches to its polynomial, both tails.
TEST(GraphOps, VectorisedTranscendentalsAgreeWithLibm) {
  std::vector<float> xs;
  for (float v = -30; v <= 30; v += 0.0137f) xs.push_back(v);
  for (float v : {0.0f, 1e-8f, -1e-6f, 0.0624f, 0.0626f, -0.0625f, 80.0f, -80.0f}) xs.push_back(v);
  const Tensor x = F({static_cast<int64_t>(xs.size())}, xs);
  const std::map<std::string, double (*)(double)> ref = {{"Tanh", [](double v) { return std::tanh(v); }},
                                                         {"Sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }},
                                                         {"Erf", [](double v) { return std::erf(v); }}};
  for (const auto& [op, f] : ref) {
    const Tensor y = run1(op, {x});
    double worst = 0;
    for (size_t i = 0; i < xs.size(); ++i) worst = std::max(worst, std::fabs(y.f32()[i] - f(xs[i])));
    EXPECT_LT(worst, 1e-6) << op;
    if (op != "Tanh") continue;
    for (size_t i = xs.size() - 8; i < xs.size(); ++i)  // relative error where it is small
      EXPECT_NEAR(y.f32()[i], std::tanh(static_cast<double>(xs[i])), 2e-7 * std::max(1e-8, std::fabs(std::tanh(static_cast<double>(xs[i]))))) << xs[i];
  }
  const Tensor e = run1("Exp", {F({5}, {-20, -1, 0, 1, 20})});
  for (int i = 0; i < 5; ++i) {
    const double v = std::exp(static_cast<double>(std::vector<float>{-20, -1, 0, 1, 20}[static_cast<size_t>(i)]));
    EXPECT_NEAR(e.f32()[i], v, 3e-7 * v);
  }
}

TEST(GraphOps, MatMulBatchesBroadcastsAndVectors) {
  const Tensor a = iota({2, 2, 3}), w = iota({3, 2});
  // [[0,1,2],[3,4,5]] x [[0,1],[2,3],[4,5]] = [[10,13],[28,40]]; second batch [[6..8],[9..11]]
  expect_f(run1("MatMul", {a, w}), {2, 2, 2}, {10, 13, 28, 40, 46, 67, 64, 94});
  const Tensor b = iota({1, 2, 3, 2});
  const Tensor a4 = iota({3, 1, 2, 3});
  const Tensor r = run1("MatMul", {a4, b});
  ASSERT_EQ(r.shape(), (std::vector<int64_t>{3, 2, 2, 2}));
  // batch (2, 1): a4[2] = 12..17 by b[0][1] = 6..11 -> [[12*6+13*8+14*10, ...]]
  EXPECT_FLOAT_EQ(r.f32()[(2 * 2 + 1) * 4], 12 * 6 + 13 * 8 + 14 * 10);
  const Tensor v = F({3}, {1, 1, 1});
  expect_f(run1("MatMul", {v, w}), {2}, {6, 9});
  expect_f(run1("MatMul", {w, F({2}, {1, -1})}), {3}, {-1, -1, -1});
  EXPECT_THROW(run1("MatMul", {w, w}), loom::rt::Error);
}

// The fusion pass's transposes around a MatMul (rank 3: [T, N·heads, d] read as [N·heads, T, d]),
// answered as the Transposes and the MatMul would; an operand of another rank at run time (the
// fusion cannot see it) through copies.
TEST(GraphOps, MatMulThroughFusedTransposesOfRankThree) {
  const Tensor q = iota({4, 3, 2}, 0.5f), k = iota({3, 2, 4}, 0.25f), w = iota({2, 5});
  const Tensor qt = run1("Transpose", {q}, {{"perm", ints({1, 0, 2})}});  // [3, 4, 2]
  const Tensor plain = run1("Transpose", {run1("MatMul", {qt, k})}, {{"perm", ints({1, 0, 2})}});  // [4, 3, 4]
  const Tensor fused = run1("MatMul", {q, k}, {{"loom.perm_a", ints({1, 0, 2})}, {"loom.perm_y", ints({1, 0, 2})}});
  std::vector<float> want(plain.f32(), plain.f32() + plain.numel());
  expect_f(fused, {4, 3, 4}, want);
  const Tensor scaled = run1("MatMul", {q, k}, {{"loom.perm_a", ints({1, 0, 2})}, {"loom.alpha", af(0.5f)}});
  const Tensor half = run1("MatMul", {qt, k});
  for (int64_t i = 0; i < half.numel(); ++i) EXPECT_FLOAT_EQ(scaled.f32()[i], 0.5f * half.f32()[i]);
  const Tensor by_weight = run1("MatMul", {q, w}, {{"loom.perm_a", ints({1, 0, 2})}});  // w of rank 2: copies
  const Tensor want_w = run1("MatMul", {qt, w});
  expect_f(by_weight, {3, 4, 5}, std::vector<float>(want_w.f32(), want_w.f32() + want_w.numel()));
}

// Loom.Attention against the operators it stands for: scores through fused transposes and a
// scale, a mask broadcast over rows (and over heads, rank 4), Softmax, the product by V written
// through a transpose; and operands it cannot take in one pass (a mask that grows the scores).
TEST(GraphOps, FusedAttentionAnswersAsItsOperators) {
  auto steps = [](const Tensor& q, const Tensor& k, const Tensor* mask, const Tensor& v, std::map<std::string, Attr> qk,
                  std::map<std::string, Attr> pv) {
    Tensor s = run1("MatMul", {q, k}, qk);
    if (mask) s = run1("Add", {s, *mask});
    return run1("MatMul", {run1("Softmax", {s}, {{"axis", ai(-1)}}), v}, pv);
  };
  auto attention = [](const std::vector<Tensor>& args, std::map<std::string, Attr> attrs) {
    std::vector<const Tensor*> in;
    for (const Tensor& t : args) in.push_back(t.defined() ? &t : nullptr);
    Node n;
    n.op = "Loom.Attention", n.name = "t", n.attrs = std::move(attrs);
    std::vector<Tensor> out(1);
    loom::rt::graph::op_attention(n, in, out);
    return out[0];
  };
  auto same = [](const Tensor& got, const Tensor& want) {
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got.f32()[i], want.f32()[i], 1e-5f) << "at " << i;
  };
  // [T=3, N·heads=4, d=2] as nn.MultiheadAttention leaves q, k, v; a mask [4, 1, 3]
  const Tensor q = iota({3, 4, 2}, 0.1f), k = iota({3, 4, 2}, -0.05f), v = iota({3, 4, 2}, 0.3f), mask = iota({4, 1, 3}, -0.2f);
  const std::map<std::string, Attr> qk = {{"loom.perm_a", ints({1, 0, 2})}, {"loom.perm_b", ints({1, 2, 0})}, {"loom.alpha", af(0.7f)}};
  const std::map<std::string, Attr> pv = {{"loom.perm_b", ints({1, 0, 2})}, {"loom.perm_y", ints({1, 0, 2})}};
  const std::map<std::string, Attr> fused = {{"loom.qk_perm_a", ints({1, 0, 2})}, {"loom.qk_perm_b", ints({1, 2, 0})},
                                             {"loom.alpha", af(0.7f)}, {"loom.perm_v", ints({1, 0, 2})},
                                             {"loom.perm_y", ints({1, 0, 2})}};
  same(attention({q, k, mask, v}, fused), steps(q, k, &mask, v, qk, pv));
  same(attention({q, k, Tensor(), v}, fused), steps(q, k, nullptr, v, qk, pv));
  // rank 4 [N=2, heads=2, T=3, d=2] with BERT's mask [N, 1, 1, T]
  const Tensor q4 = iota({2, 2, 3, 2}, 0.1f), k4 = iota({2, 2, 2, 3}, 0.05f), v4 = iota({2, 2, 3, 2}, -0.1f), m4 = iota({2, 1, 1, 3}, 0.5f);
  same(attention({q4, k4, m4, v4}, {}), steps(q4, k4, &m4, v4, {}, {}));
  // a mask of more rows than the scores [3, 3] -> [2, 3, 3]: the operators one after another
  const Tensor q2 = iota({3, 2}, 0.1f), k2 = iota({2, 3}, 0.1f), v2 = iota({3, 2}, 0.1f), grow = iota({2, 3, 3}, 0.1f);
  same(attention({q2, k2, grow, v2}, {}), steps(q2, k2, &grow, v2, {}, {}));
}

TEST(GraphOps, GemmTransposesScalesAndBroadcastsC) {
  const Tensor a = iota({2, 3}), b = iota({2, 3}), c = F({2}, {1, -1});
  // A B^T = [[5,14],[14,50]]; alpha 2, beta 3
  expect_f(run1("Gemm", {a, b, c}, {{"transB", ai(1)}, {"alpha", af(2)}, {"beta", af(3)}}), {2, 2}, {13, 25, 31, 97});
  const Tensor at = iota({3, 2});
  expect_f(run1("Gemm", {at, iota({3, 1})}, {{"transA", ai(1)}}), {2, 1}, {0 * 0 + 2 * 1 + 4 * 2, 1 * 0 + 3 * 1 + 5 * 2});
  const Tensor bad = F({3}, {1, 2, 3});
  EXPECT_THROW(run1("Gemm", {a, b, bad}, {{"transB", ai(1)}}), loom::rt::Error);
}

TEST(GraphOps, SoftmaxOnAnyAxisAndLogSoftmax) {
  const Tensor x = F({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  const Tensor s = run1("Softmax", {x}, {{"axis", ai(1)}});
  const float lo = 1 / (1 + std::exp(2.0f)), hi = 1 - lo;
  expect_f(s, {2, 2, 2}, {lo, lo, hi, hi, lo, lo, hi, hi});
  const Tensor l = run1("LogSoftmax", {x});
  expect_f(l, {2, 2, 2}, {std::log(1 / (1 + std::exp(1.0f))), std::log(1 / (1 + std::exp(-1.0f)))});
}

TEST(GraphOps, ReductionsKeepOrDropAxes) {
  const Tensor x = iota({2, 3, 2});
  expect_f(run1("ReduceMean", {x}, {{"axes", ints({-1})}}), {2, 3, 1}, {0.5, 2.5, 4.5, 6.5, 8.5, 10.5});
  expect_f(run1("ReduceMean", {x}, {{"axes", ints({1})}, {"keepdims", ai(0)}}), {2, 2}, {2, 3, 8, 9});
  const Tensor axes = I({2}, {0, 2});
  expect_f(run1("ReduceSum", {x, axes}), {1, 3, 1}, {0 + 1 + 6 + 7, 2 + 3 + 8 + 9, 4 + 5 + 10 + 11});
  expect_f(run1("ReduceMax", {x}, {{"keepdims", ai(0)}}), {}, {11});
}

TEST(GraphOps, LayerNormalizationMatchesItsDefinition) {
  const Tensor x = F({2, 3}, {1, 2, 3, 2, 4, 9}), g = F({3}, {1, 2, 3}), b = F({3}, {0, 0, 1});
  const auto out = run("LayerNormalization", {x, g, b}, {{"epsilon", af(0)}}, 3);
  const float s1 = std::sqrt(2.0f / 3.0f);
  const float m2 = 5, s2 = std::sqrt((9.0f + 1.0f + 16.0f) / 3.0f);
  expect_f(out[0], {2, 3}, {-1 / s1, 0, 3 / s1 + 1, (2 - m2) / s2, 2 * (4 - m2) / s2, 3 * (9 - m2) / s2 + 1});
  expect_f(out[1], {2, 1}, {2, 5});
  expect_f(out[2], {2, 1}, {1 / s1, 1 / s2});
  const Tensor g4 = F({4}, {1, 1, 1, 1});
  EXPECT_THROW(run1("LayerNormalization", {x, g4}), loom::rt::Error);
}

// A naive convolution: the reference for im2col + GEMM.
std::vector<float> naive_conv(const Tensor& x, const Tensor& w, int64_t g, int64_t s, int64_t p, int64_t d, int64_t* oh) {
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), M = w.dim(0), K = w.dim(2);
  const int64_t O = (H + 2 * p - d * (K - 1) - 1) / s + 1;
  *oh = O;
  std::vector<float> y(static_cast<size_t>(N * M * O * O), 0.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oy = 0; oy < O; ++oy)
        for (int64_t ox = 0; ox < O; ++ox) {
          float acc = 0;
          const int64_t gi = m / (M / g);
          for (int64_t c = 0; c < C / g; ++c)
            for (int64_t i = 0; i < K; ++i)
              for (int64_t j = 0; j < K; ++j) {
                const int64_t iy = oy * s - p + i * d, ix = ox * s - p + j * d;
                if (iy < 0 || ix < 0 || iy >= H || ix >= W) continue;
                acc += x.f32()[((n * C + gi * (C / g) + c) * H + iy) * W + ix] * w.f32()[((m * (C / g) + c) * K + i) * K + j];
              }
          y[static_cast<size_t>(((n * M + m) * O + oy) * O + ox)] = acc;
        }
  return y;
}

TEST(GraphOps, ConvWithGroupsStridesPadsAndDilations) {
  const Tensor x = iota({2, 4, 7, 7}, 0.01f);
  Tensor w = iota({6, 2, 3, 3}, 0.003f);
  for (int64_t i = 0; i < w.numel(); i += 3) w.f32()[i] = -w.f32()[i];
  for (int64_t s : {1, 2})
    for (int64_t d : {1, 2}) {
      int64_t o = 0;
      const auto want = naive_conv(x, w, 2, s, 1, d, &o);
      const Tensor y = run1("Conv", {x, w}, {{"group", ai(2)}, {"strides", ints({s, s})}, {"pads", ints({1, 1, 1, 1})},
                                               {"dilations", ints({d, d})}, {"kernel_shape", ints({3, 3})}});
      expect_f(y, {2, 6, o, o}, want, 1e-4f);
    }
  const Tensor w1 = iota({3, 4, 1, 1}), bias = F({3}, {1, 2, 3});
  const Tensor y1 = run1("Conv", {x, w1, bias});
  EXPECT_NEAR(y1.f32()[0], 1 + 0.01f * (0 * 0 + 1 * 49 + 2 * 98 + 3 * 147), 1e-4);
  const Tensor wbad = iota({6, 3, 3, 3});
  EXPECT_THROW(run1("Conv", {x, wbad}, {{"group", ai(2)}}), loom::rt::Error);
}

// A zero Pad on height and width goes into the Conv (or count-including AveragePool) that reads
// it alone, and the padded convolution answers as before; a nonzero value, a pad on the channels
// or a second reader keeps the Pad.
TEST(GraphFuse, ZeroPadIntoConvAndAveragePool) {
  const Tensor x = iota({1, 2, 5, 5}, 0.01f), w = iota({3, 2, 3, 3}, 0.002f);
  Tensor pads = Tensor::empty({8}, DType::kI64);
  const int64_t p[8] = {0, 0, 1, 0, 0, 0, 0, 2};
  std::copy(p, p + 8, pads.data<int64_t>());
  auto graph = [&](const std::string& reader, float value, int readers) {
    std::vector<Tensor> constants(6);
    constants[1] = w, constants[2] = pads, constants[3] = Tensor::empty({});
    constants[3].f32()[0] = value;
    Node pad, conv, other;
    pad.op = "Pad", pad.in = {0, 2, 3}, pad.out = {4};
    conv.op = reader, conv.in = reader == "Conv" ? std::vector<int>{4, 1} : std::vector<int>{4}, conv.out = {5};
    conv.attrs["kernel_shape"] = ints({3, 3});
    std::vector<Node> nodes{pad, conv};
    if (readers > 1) other.op = "Relu", other.in = {4}, other.out = {5}, nodes.push_back(other);
    const int fused = fuse_nodes(nodes, constants, {5});
    nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [](const Node& n) { return n.op.empty(); }), nodes.end());
    return std::make_pair(fused, nodes);
  };
  auto [fused, nodes] = graph("Conv", 0, 1);
  ASSERT_EQ(fused, 1);
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].attrs.at("pads").ints, (std::vector<int64_t>{1, 0, 0, 2}));
  EXPECT_EQ(nodes[0].in[0], 0);
  const Tensor padded = run1("Pad", {x, pads});
  const Tensor want = run1("Conv", {padded, w}), got = run1("Conv", {x, w}, {{"pads", ints({1, 0, 0, 2})}});
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got.f32()[i], want.f32()[i], 1e-5f);
  auto [pooled, pool_nodes] = graph("AveragePool", 0, 1);
  EXPECT_EQ(pooled, 1);
  EXPECT_EQ(pool_nodes[0].attrs.at("count_include_pad").i, 1);
  EXPECT_EQ(graph("Conv", 0.5f, 1).first, 0);
  EXPECT_EQ(graph("Conv", 0, 2).first, 0);
  pads.data<int64_t>()[1] = 1;  // the channels
  EXPECT_EQ(graph("Conv", 0, 1).first, 0);
}

// The operators that spread over the threads (softmax and layer norm rows in blocks, the unary
// functions, convolution and pools image by image, attention's per-head GEMMs) answer the same on
// 2 threads as on 1, on sizes past the thresholds and the blocks' edges.
TEST(GraphOps, SpreadOverThreadsAnswersAsOneThread) {
  auto with_threads = [](int threads, const std::function<std::vector<Tensor>()>& f) {
    const int before = loom::rt::cpu::threads();
    loom::rt::cpu::set_threads(threads);
    auto out = f();
    loom::rt::cpu::set_threads(before);
    return out;
  };
  auto noisy = [](std::vector<int64_t> shape, float scale) {
    Tensor t = Tensor::empty(std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = std::sin(static_cast<float>(i) * 0.37f) * scale;
    return t;
  };
  const Tensor rows = noisy({301, 70}, 4.0f), g = noisy({70}, 1.0f), b = noisy({70}, 0.5f);
  const Tensor img = noisy({5, 6, 17, 17}, 1.0f), w = noisy({8, 3, 3, 3}, 0.2f), w1 = noisy({8, 6, 3, 3}, 0.2f);
  const Tensor q = noisy({3, 5, 40, 32}, 1.0f), k = noisy({3, 5, 40, 32}, 1.0f);
  auto all = [&] {
    return std::vector<Tensor>{
        run1("Softmax", {rows}),
        run1("LogSoftmax", {rows}),
        run("LayerNormalization", {rows, g, b}, {}, 3)[0],
        run1("Tanh", {rows}),
        run1("Conv", {img, w}, {{"group", ai(2)}, {"pads", ints({1, 1, 1, 1})}}),
        run1("Conv", {img, w1}, {{"pads", ints({1, 1, 1, 1})}, {"strides", ints({2, 2})}}),
        run1("MaxPool", {img}, {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}}),
        run1("MatMul", {q, k}, {{"loom.perm_b", ints({0, 1, 3, 2})}}),
    };
  };
  const auto one = with_threads(1, all), two = with_threads(2, all);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(one[i].shape(), two[i].shape()) << i;
    for (int64_t j = 0; j < one[i].numel(); ++j)
      ASSERT_NEAR(one[i].f32()[j], two[i].f32()[j], 1e-5f * std::max(1.0f, std::fabs(one[i].f32()[j]))) << i << " at " << j;
  }
  // Softmax rows sum to 1 across the blocks of 64 rows (301 = four blocks and a part).
  for (int64_t r = 0; r < 301; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < 70; ++c) sum += two[0].f32()[r * 70 + c];
    ASSERT_NEAR(sum, 1.0, 1e-5) << r;
  }
}

TEST(GraphOps, BatchNormAndPools) {
  const Tensor x = iota({1, 2, 3, 3});
  const Tensor s = F({2}, {1, 2}), b = F({2}, {0, 1}), m = F({2}, {4, 13}), v = F({2}, {1, 4});
  const Tensor bn = run1("BatchNormalization", {x, s, b, m, v}, {{"epsilon", af(0)}});
  EXPECT_FLOAT_EQ(bn.f32()[0], -4);
  EXPECT_FLOAT_EQ(bn.f32()[9], 2 * (9 - 13) / 2.0f + 1);
  // 3x3 max pool, stride 2, pad 1 on 3x3: windows centred on (0,0), (0,2), (2,0), (2,2)
  expect_f(run1("MaxPool", {x}, {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}),
           {1, 2, 2, 2}, {4, 5, 7, 8, 13, 14, 16, 17});
  // ceil_mode: a 2x2 window, stride 2 over 3 -> 2 outputs, the last window half outside
  expect_f(run1("MaxPool", {x}, {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}, {"ceil_mode", ai(1)}}),
           {1, 2, 2, 2}, {4, 5, 7, 8, 13, 14, 16, 17});
  const Tensor avg = run1("AveragePool", {x}, {{"kernel_shape", ints({2, 2})}, {"pads", ints({1, 1, 0, 0})}});
  EXPECT_FLOAT_EQ(avg.f32()[0], 0);  // only x[0][0] inside: counted alone
  const Tensor avgp = run1("AveragePool", {x}, {{"kernel_shape", ints({2, 2})}, {"pads", ints({1, 1, 0, 0})}, {"count_include_pad", ai(1)}});
  EXPECT_FLOAT_EQ(avgp.f32()[1], (0 + 1) / 4.0f);
  expect_f(run1("GlobalAveragePool", {x}), {1, 2, 1, 1}, {4, 13});
}

// Max and average pools against their definition, window by window, over strides, dilations,
// uneven pads, ceil_mode and count_include_pad, with more planes than one run of frames holds.
float pool_reference(const Tensor& x, int64_t plane, int64_t oy, int64_t ox, bool mx, const std::vector<int64_t>& k,
                     const std::vector<int64_t>& s, const std::vector<int64_t>& d, const std::vector<int64_t>& p, bool include) {
  const int64_t H = x.dim(2), W = x.dim(3);
  float acc = mx ? -INFINITY : 0.0f;
  int64_t inside = 0, padded = 0;
  for (int64_t i = 0; i < k[0]; ++i)
    for (int64_t j = 0; j < k[1]; ++j) {
      const int64_t iy = oy * s[0] - p[0] + i * d[0], ix = ox * s[1] - p[1] + j * d[1];
      if (iy >= -p[0] && iy < H + p[2] && ix >= -p[1] && ix < W + p[3]) ++padded;
      if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
      const float v = x.f32()[(plane * H + iy) * W + ix];
      acc = mx ? std::max(acc, v) : acc + v;
      ++inside;
    }
  return mx ? acc : acc / static_cast<float>(std::max<int64_t>(1, include ? padded : inside));
}

TEST(GraphOps, PoolsAnswerAsTheirDefinition) {
  struct Case {
    std::vector<int64_t> shape, k, s, d, p;
    bool ceil;
  };
  const std::vector<Case> cases = {
      {{2, 3, 16, 16}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, false}, {{2, 3, 5, 5}, {2, 2}, {1, 1}, {1, 1}, {1, 1, 1, 1}, false},
      {{1, 2, 9, 11}, {3, 2}, {3, 2}, {2, 1}, {2, 0, 1, 1}, true},   {{40, 9, 7, 6}, {2, 3}, {1, 3}, {1, 2}, {0, 1, 1, 0}, true},
      {{1, 1, 1, 8}, {1, 3}, {5, 2}, {1, 1}, {0, 2, 0, 2}, false},   {{3, 2, 6, 6}, {6, 6}, {1, 1}, {1, 1}, {0, 0, 0, 0}, false}};
  for (const Case& c : cases) {
    const Tensor x = iota(c.shape, 0.37f);
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = std::sin(x.f32()[i] * 7.0f);  // no window sorted
    for (const char* op : {"MaxPool", "AveragePool"})
      for (int include : {0, 1}) {
        std::map<std::string, Attr> a = {{"kernel_shape", ints(c.k)}, {"strides", ints(c.s)}, {"pads", ints(c.p)}, {"ceil_mode", ai(c.ceil)}};
        const bool mx = std::string(op) == "MaxPool";
        if (mx) a["dilations"] = ints(c.d);
        if (!mx) a["count_include_pad"] = ai(include);
        const std::vector<int64_t> d = mx ? c.d : std::vector<int64_t>{1, 1};
        const Tensor y = run1(op, {x}, a);
        for (int64_t pl = 0; pl < y.dim(0) * y.dim(1); ++pl)
          for (int64_t oy = 0; oy < y.dim(2); ++oy)
            for (int64_t ox = 0; ox < y.dim(3); ++ox)
              ASSERT_EQ(y.f32()[(pl * y.dim(2) + oy) * y.dim(3) + ox], pool_reference(x, pl, oy, ox, mx, c.k, c.s, d, c.p, include))
                  << op << " " << x.shape_str() << " plane " << pl << " at " << oy << ", " << ox;
      }
  }
}

TEST(GraphOps, ReshapeFlattenSqueezeUnsqueeze) {
  const Tensor x = iota({2, 3, 4});
  EXPECT_EQ(run1("Reshape", {x, I({3}, {0, -1, 2})}).shape(), (std::vector<int64_t>{2, 6, 2}));
  EXPECT_THROW(run1("Reshape", {x, I({2}, {-1, -1})}), loom::rt::Error);
  EXPECT_THROW(run1("Reshape", {x, I({2}, {5, -1})}), loom::rt::Error);
  EXPECT_EQ(run1("Flatten", {x}, {{"axis", ai(2)}}).shape(), (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(run1("Flatten", {x}, {{"axis", ai(0)}}).shape(), (std::vector<int64_t>{1, 24}));
  const Tensor u = run1("Unsqueeze", {x, I({2}, {0, -1})});
  EXPECT_EQ(u.shape(), (std::vector<int64_t>{1, 2, 3, 4, 1}));
  EXPECT_EQ(run1("Squeeze", {u}).shape(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(run1("Squeeze", {u, I({1}, {-1})}).shape(), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_THROW(run1("Squeeze", {u, I({1}, {1})}), loom::rt::Error);
}

TEST(GraphOps, TransposeSliceGatherConcatSplitExpand) {
  const Tensor x = iota({2, 3});
  expect_f(run1("Transpose", {x}), {3, 2}, {0, 3, 1, 4, 2, 5});
  const Tensor y = iota({2, 2, 2});
  expect_f(run1("Transpose", {y}, {{"perm", ints({1, 0, 2})}}), {2, 2, 2}, {0, 1, 4, 5, 2, 3, 6, 7});
  // x[:, ::-2] and x[-1:, 1:100]
  expect_f(run1("Slice", {x, I({1}, {-1}), I({1}, {INT64_MIN}), I({1}, {1}), I({1}, {-2})}), {2, 2}, {2, 0, 5, 3});
  expect_f(run1("Slice", {x, I({2}, {-1, 1}), I({2}, {100, 100})}), {1, 2}, {4, 5});
  expect_f(run1("Gather", {x, I({2}, {-1, 0})}, {{"axis", ai(1)}}), {2, 2}, {2, 0, 5, 3});
  const Tensor emb = iota({4, 2});
  expect_f(run1("Gather", {emb, I({2, 1}, {3, 1})}), {2, 1, 2}, {6, 7, 2, 3});
  EXPECT_THROW(run1("Gather", {emb, I({1}, {4})}), loom::rt::Error);
  expect_f(run1("Concat", {x, x}, {{"axis", ai(-1)}}), {2, 6}, {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5});
  const auto parts = run("Split", {x, I({2}, {1, 2})}, {{"axis", ai(1)}}, 2);
  expect_f(parts[0], {2, 1}, {0, 3});
  expect_f(parts[1], {2, 2}, {1, 2, 4, 5});
  expect_f(run1("Expand", {F({2, 1}, {1, 2}), I({3}, {2, 1, 3})}), {2, 2, 3}, {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2});
}

TEST(GraphOps, ShapeRangeConstantOfShapeTriluPad) {
  const Tensor x = iota({2, 3, 4});
  expect_i(run1("Shape", {x}), {3}, {2, 3, 4});
  expect_i(run1("Shape", {x}, {{"start", ai(-2)}}), {2}, {3, 4});
  expect_i(run1("Range", {I({}, {5}), I({}, {-1}), I({}, {-2})}), {3}, {5, 3, 1});
  expect_f(run1("Range", {F({}, {0}), F({}, {1}), F({}, {0.25})}), {4}, {0, 0.25, 0.5, 0.75});
  Attr v;
  v.kind = Attr::kTensor, v.t = I({1}, {7});
  expect_i(run1("ConstantOfShape", {I({2}, {2, 2})}, {{"value", v}}), {2, 2}, {7, 7, 7, 7});
  const Tensor m = F({3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1});
  expect_f(run1("Trilu", {m}, {{"upper", ai(0)}}), {3, 3}, {1, 0, 0, 1, 1, 0, 1, 1, 1});
  expect_f(run1("Trilu", {m, I({}, {1})}), {3, 3}, {0, 1, 1, 0, 0, 1, 0, 0, 0});
  const Tensor p = F({1, 2}, {1, 2});
  expect_f(run1("Pad", {p, I({4}, {0, 1, 1, 0}), F({}, {9})}), {2, 3}, {9, 1, 2, 9, 9, 9});
  expect_f(run1("Pad", {p, I({4}, {0, -1, 0, 0})}), {1, 1}, {2});
  EXPECT_THROW(run1("Pad", {p, I({4}, {0, 0, 0, 0})}, {{"mode", as("reflect")}}), loom::rt::Error);
}

// EyeLike and the window functions write their ones and weights in whatever type the graph
// asks for (an int64 identity, a float16 window), not only float32 and int32.
// Tile copies each input row whole, repeated; numpy's tile is the reference.
TEST(GraphOps, TileRepeatsRows) {
  expect_f(run1("Tile", {F({2, 3}, {1, 2, 3, 4, 5, 6}), I({2}, {2, 2})}), {4, 6},
           {1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6, 1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6});
  expect_f(run1("Tile", {F({2, 1, 2}, {1, 2, 3, 4}), I({3}, {1, 2, 1})}), {2, 2, 2}, {1, 2, 1, 2, 3, 4, 3, 4});
  const Tensor t = run1("Tile", {I({3}, {7, 8, 9}), I({1}, {2})});
  EXPECT_EQ(std::vector<int64_t>(t.data<int64_t>(), t.data<int64_t>() + t.numel()), (std::vector<int64_t>{7, 8, 9, 7, 8, 9}));
  EXPECT_EQ(run1("Tile", {F({2, 3}, {1, 2, 3, 4, 5, 6}), I({2}, {0, 2})}).shape(), (std::vector<int64_t>{0, 6}));
  EXPECT_THROW(run1("Tile", {F({2, 3}, {1, 2, 3, 4, 5, 6}), I({2}, {1, -1})}), loom::rt::Error);
}

// CumSum as PyTorch's exporter writes torch.cumsum (HF's position ids): along the axis input,
// exclusive and reverse; integers wrap.
TEST(GraphOps, CumSumAlongAnAxis) {
  const Tensor x = F({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_f(run1("CumSum", {x, I({}, {1})}), {2, 3}, {1, 3, 6, 4, 9, 15});
  expect_f(run1("CumSum", {x, I({1}, {-2})}), {2, 3}, {1, 2, 3, 5, 7, 9});
  expect_f(run1("CumSum", {x, I({}, {1})}, {{"exclusive", ai(1)}}), {2, 3}, {0, 1, 3, 0, 4, 9});
  expect_f(run1("CumSum", {x, I({}, {1})}, {{"reverse", ai(1)}}), {2, 3}, {6, 5, 3, 15, 11, 6});
  expect_f(run1("CumSum", {x, I({}, {1})}, {{"reverse", ai(1)}, {"exclusive", ai(1)}}), {2, 3}, {5, 3, 0, 11, 6, 0});
  const Tensor big = run1("CumSum", {I({2}, {INT64_MAX, 1}), I({}, {0})});
  EXPECT_EQ(big.data<int64_t>()[1], INT64_MIN);
  EXPECT_THROW(run1("CumSum", {x, I({}, {2})}), loom::rt::Error);
}

// Opset 20's Gelu: exact (erf) by default, its tanh form when asked; another form is refused.
TEST(GraphOps, GeluExactAndTanh) {
  const std::vector<float> x = {-3, -1, -0.25f, 0, 0.5f, 2};
  std::vector<float> exact, tanh_form;
  for (float v : x) {
    exact.push_back(0.5f * v * (1 + std::erf(v / std::sqrt(2.0f))));
    tanh_form.push_back(0.5f * v * (1 + std::tanh(std::sqrt(2 / 3.14159265f) * (v + 0.044715f * v * v * v))));
  }
  expect_f(run1("Gelu", {F({2, 3}, x)}), {2, 3}, exact);
  expect_f(run1("Gelu", {F({2, 3}, x)}, {{"approximate", Attr::of(std::string("tanh"))}}), {2, 3}, tanh_form);
  EXPECT_THROW(run1("Gelu", {F({2, 3}, x)}, {{"approximate", Attr::of(std::string("sigmoid"))}}), loom::rt::Error);
}

TEST(GraphOps, EyeLikeAndWindowsInTheTypeAsked) {
  expect_i(run1("EyeLike", {I({2, 3}, {0, 0, 0, 0, 0, 0})}, {{"k", ai(1)}}), {2, 3}, {0, 1, 0, 0, 0, 1});
  const Tensor w = run1("HannWindow", {I({}, {4})}, {{"output_datatype", ai(10)}});
  ASSERT_EQ(w.dtype(), loom::rt::DType::kF16);
  expect_f(w.to(loom::rt::DType::kF32), {4}, {0, 0.5f, 1, 0.5f});
}

// Issue 33: shapes computed from a request. A product that wraps (2^62 * 4 = 4 after wrapping)
// must be refused before anything is allocated or indexed, not answered with a 4-value tensor
// or read past a buffer.
TEST(GraphHardening, ShapesFromDataNeverWrap) {
  Attr v;
  v.kind = Attr::kTensor, v.t = F({1}, {1});
  EXPECT_THROW(run1("ConstantOfShape", {I({2}, {4611686018427387905LL, 4})}, {{"value", v}}), loom::rt::AllocationRefused);
  EXPECT_THROW(run1("ConstantOfShape", {I({2}, {int64_t{1} << 56, 255})}, {{"value", v}}), loom::rt::AllocationRefused);
  EXPECT_THROW(run1("Expand", {F({1}, {1}), I({2}, {int64_t{1} << 40, int64_t{1} << 40})}), loom::rt::AllocationRefused);
  EXPECT_THROW(loom::rt::checked_numel({int64_t{1} << 62, 3}), loom::rt::AllocationRefused);
  EXPECT_THROW(loom::rt::checked_numel({3, -1}), loom::rt::Error);
  EXPECT_EQ(loom::rt::checked_numel({int64_t{1} << 61, 2}), int64_t{1} << 62);
  EXPECT_EQ(loom::rt::checked_numel({0, int64_t{1} << 20, 7}), 0);
}

// An empty tensor costs no memory, but loops over its other dimensions still run: a Reshape of
// nothing to [0, 2^62] then a Softmax over the empty axis spun for years. Refused at the shape.
TEST(GraphHardening, EmptyTensorsCannotHoldHugeDimensions) {
  EXPECT_THROW(loom::rt::checked_numel({0, int64_t{1} << 62, 7}), loom::rt::AllocationRefused);
  EXPECT_THROW(loom::rt::checked_numel({int64_t{1} << 20, 0, int64_t{1} << 20}), loom::rt::AllocationRefused);
  EXPECT_THROW(run1("Reshape", {F({0}, {}), I({2}, {0, int64_t{1} << 62})}), loom::rt::AllocationRefused);
  EXPECT_THROW(run1("Expand", {F({1}, {1}), I({3}, {int64_t{1} << 30, 0, 4})}), loom::rt::AllocationRefused);
  EXPECT_EQ(run1("Expand", {F({1}, {1}), I({3}, {1 << 10, 0, 4})}).shape(), (std::vector<int64_t>{1 << 10, 0, 4}));
}

// A rank-0 tensor has no axis: Gather, Concat, Split, Softmax and the Reduce ops on one are an
// error naming the node, never a read of shape()[0] (which aborted the server).
TEST(GraphHardening, AScalarHasNoAxis) {
  const Tensor scalar = F({}, {3});
  EXPECT_THROW(run1("Gather", {scalar, I({1}, {0})}), loom::rt::Error);
  EXPECT_THROW(run1("Concat", {scalar, scalar}, {{"axis", ai(0)}}), loom::rt::Error);
  EXPECT_THROW(run("Split", {scalar}, {{"axis", ai(0)}}, 1), loom::rt::Error);
  EXPECT_THROW(run1("Softmax", {scalar}, {{"axis", ai(0)}}), loom::rt::Error);
  EXPECT_THROW(run1("Squeeze", {scalar, I({1}, {0})}), loom::rt::Error);
  EXPECT_THROW(run1("Slice", {scalar, I({1}, {0}), I({1}, {1})}), loom::rt::Error);
  EXPECT_THROW(run1("ReduceSum", {scalar, I({1}, {0})}), loom::rt::Error);
  expect_f(run1("Unsqueeze", {scalar, I({1}, {0})}), {1}, {3});  // an axis of the output: fine
}

// The memory budget counts the tensors alive at once and refuses the one that would pass it
// before it is allocated; what is freed is given back.
TEST(GraphHardening, TheBudgetRefusesBeforeAllocating) {
  loom::rt::AllocationBudget budget(1 << 20);
  {
    Tensor a = Tensor::empty({128, 1024});  // 512 KiB
    EXPECT_EQ(budget.live(), size_t{512} << 10);
    EXPECT_THROW(Tensor::empty({160, 1024}), loom::rt::AllocationRefused);  // 640 KiB more
    EXPECT_THROW(run1("Expand", {F({1}, {1}), I({2}, {8192, 8192})}), loom::rt::AllocationRefused);
  }
  EXPECT_EQ(budget.live(), 0u);
  Tensor b = Tensor::empty({256, 1024});  // 1 MiB fits once the first is gone
  EXPECT_EQ(budget.live(), size_t{1} << 20);
}

TEST(GraphOps, QuantizeDequantizeAndClip) {
  const Tensor x = F({2, 3}, {-1, 0.5, 1.5, 2.5, 100, 0.25});
  Tensor zp = Tensor::empty({}, DType::kU8);
  zp.data<uint8_t>()[0] = 10;
  const Tensor q = run1("QuantizeLinear", {x, F({}, {0.5}), zp});
  ASSERT_EQ(q.dtype(), DType::kU8);
  // round half to even: 1.0 -> 1, 3 -> 3, 5 -> 5, 0.5 -> 0; 200 + 10 saturates at 255
  EXPECT_EQ(std::vector<int>(q.data<uint8_t>(), q.data<uint8_t>() + 6), (std::vector<int>{8, 11, 13, 15, 210, 10}));
  expect_f(run1("DequantizeLinear", {q, F({}, {0.5}), zp}), {2, 3}, {-1, 0.5, 1.5, 2.5, 100, 0});
  Tensor w = Tensor::empty({2, 2}, DType::kI8);
  w.data<int8_t>()[0] = -128, w.data<int8_t>()[1] = 1, w.data<int8_t>()[2] = 2, w.data<int8_t>()[3] = 127;
  const Tensor z = Tensor::zeros({2}, DType::kI8);
  expect_f(run1("DequantizeLinear", {w, F({2}, {1, 0.5}), z}, {{"axis", ai(0)}}), {2, 2}, {-128, 1, 1, 63.5});
  EXPECT_THROW(run1("DequantizeLinear", {w, F({3}, {1, 1, 1}), Tensor::zeros({3}, DType::kI8)}, {{"axis", ai(0)}}),
               loom::rt::Error);
  EXPECT_THROW(run1("QuantizeLinear", {x, F({}, {0})}), loom::rt::Error);
  expect_f(run1("Clip", {x, F({}, {0}), F({}, {2})}), {2, 3}, {0, 0.5, 1.5, 2, 2, 0.25});
}

TEST(GraphModel, RefusesAFileThatIsNotOnnx) {
  const std::string path = "/tmp/loom-graph-test-not-onnx.onnx";
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fputs("this is not a protobuf \xff\xff\xff", f);
  std::fclose(f);
  try {
    loom::rt::graph::Model::load(path);
    FAIL() << "text loaded as ONNX";
  } catch (const loom::rt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not an ONNX model"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
  EXPECT_THROW(loom::rt::graph::Model::load("/nonexistent/model.onnx"), loom::rt::Error);
}

// PyTorch 2.9+'s exporter writes IR 10 (Debian's libonnx 1.12 knows IR 8) and its weights as
// external data beside the file: such a model loads, is checked where its data lies, and runs;
// a datatype the newer IRs added (FLOAT8) is refused naming the tensor.
TEST(GraphModel, LoadsAModelOfANewerIrWithItsWeightsBesideIt) {
  char tmpl[] = "/tmp/loom-graph-ir10-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  auto write = [&](int32_t weight_type) {
    onnx::ModelProto m;
    m.set_ir_version(10);
    auto* op = m.add_opset_import();
    op->set_domain("");
    op->set_version(17);
    auto* g = m.mutable_graph();
    g->set_name("g");
    auto* n = g->add_node();
    n->set_op_type("Add");
    n->add_input("x");
    n->add_input("w");
    n->add_output("y");
    auto* w = g->add_initializer();
    w->set_name("w");
    w->set_data_type(weight_type);
    w->add_dims(2);
    w->set_data_location(onnx::TensorProto::EXTERNAL);
    for (auto [k, v] : {std::pair<const char*, const char*>{"location", "model.onnx.data"}, {"offset", "0"}, {"length", "8"}}) {
      auto* e = w->add_external_data();
      e->set_key(k);
      e->set_value(v);
    }
    for (const char* name : {"x", "y"}) {
      auto* v = name[0] == 'x' ? g->add_input() : g->add_output();
      v->set_name(name);
      auto* t = v->mutable_type()->mutable_tensor_type();
      t->set_elem_type(1);
      t->mutable_shape()->add_dim()->set_dim_param("batch");
      t->mutable_shape()->add_dim()->set_dim_value(2);
    }
    std::ofstream(dir + "/model.onnx", std::ios::binary) << m.SerializeAsString();
    const float data[2] = {1.0f, 2.0f};
    std::ofstream(dir + "/model.onnx.data", std::ios::binary).write(reinterpret_cast<const char*>(data), sizeof data);
  };
  write(1);
  const auto model = loom::rt::graph::Model::load(dir + "/model.onnx");
  EXPECT_TRUE(model.row_independent()) << model.why_not_row_independent();
  expect_f(model.run({F({1, 2}, {10, 20})}).at(0), {1, 2}, {11, 22});
  write(17);  // FLOAT8E4M3FN: IR 9
  try {
    loom::rt::graph::Model::load(dir + "/model.onnx");
    ADD_FAILURE() << "a FLOAT8 weight loaded";
  } catch (const loom::rt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
  }
  std::remove((dir + "/model.onnx").c_str());
  std::remove((dir + "/model.onnx.data").c_str());
  ::rmdir(dir.c_str());
}

}  // namespace

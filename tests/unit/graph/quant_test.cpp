// quant_test.cpp — the kernels and fusions of quantized models: QuantizeLinear, DequantizeLinear
// and DynamicQuantizeLinear against ONNX's formulas computed naively (ties rounded half to even,
// saturation, per-axis scales), and the fused forms of onnxruntime.quantization's patterns against
// the nodes they replace, bit for bit: quantize_dynamic's MatMulInteger -> Cast -> Mul -> Add
// chain (sums past 2^24 in chunks) and QDQ pairs; and GPT-2's spelled-out tanh GELU (what those
// GEMMs feed in a quantized GPT-2 as in a float one) fused into one node.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "loom/rt/graph/graph.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "nodes.hpp"
#include "ops.hpp"

namespace {

using loom::rt::DType;
using loom::rt::Tensor;
using loom::rt::graph::Attr;
using loom::rt::graph::Node;
using loom_test::node;
using loom_test::noisy;
using loom_test::run_nodes;

template <class T>
Tensor ints_of(std::vector<int64_t> shape, DType dt, int lo, int hi) {
  Tensor t = Tensor::empty(std::move(shape), dt);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<T>()[i] = static_cast<T>(lo + (i * 7919 + 13) % (hi - lo + 1));
  return t;
}

void expect_same_bits(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.dtype(), b.dtype());
  const size_t es = a.bytes() / static_cast<size_t>(std::max<int64_t>(1, a.numel()));
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(a.data<char>() + i * es, b.data<char>() + i * es, es) != 0) {
      ADD_FAILURE() << "first difference at " << i << (a.dtype() == DType::kF32 ? ": " + std::to_string(a.f32()[i]) + " against " + std::to_string(b.f32()[i]) : "");
      return;
    }
}

// ONNX's QuantizeLinear, one value: saturate(round half to even(x / scale) + zero).
int quantize_ref(float x, float scale, int zero, int lo, int hi) {
  return static_cast<int>(std::clamp(std::nearbyint(x / scale) + static_cast<float>(zero), static_cast<float>(lo), static_cast<float>(hi)));
}

TEST(GraphQuant, QuantizeAndDequantizeAsOnnxWritesThem) {
  // Ties (k + 0.5 steps) go to the even neighbour; values far past the range saturate.
  Tensor x = Tensor::empty({2, 3, 7});
  const float step = 0.25f;
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = (static_cast<float>(i) - 20.5f) * step * (i % 5 == 0 ? 1000.0f : 1.0f);
  Tensor scale = Tensor::empty({3}), zero = Tensor::empty({3}, DType::kI8);
  const float scales[3] = {step, 0.1f, 3.0f};
  const int8_t zeros[3] = {0, -7, 100};
  std::copy(scales, scales + 3, scale.f32());
  std::copy(zeros, zeros + 3, zero.data<int8_t>());
  std::vector<const Tensor*> in{&x, &scale, &zero};
  Node q = node("QuantizeLinear", {}, {});
  q.attrs["axis"] = Attr::of(int64_t{1});
  std::vector<Tensor> out(1);
  q.fn(q, in, out);
  const Tensor y = out[0];
  ASSERT_EQ(y.dtype(), DType::kI8);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int c = static_cast<int>((i / 7) % 3);
    ASSERT_EQ(y.data<int8_t>()[i], quantize_ref(x.f32()[i], scales[c], zeros[c], -128, 127)) << "at " << i;
  }
  Node d = node("DequantizeLinear", {}, {});
  d.attrs["axis"] = Attr::of(int64_t{1});
  std::vector<const Tensor*> din{&y, &scale, &zero};
  d.fn(d, din, out);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int c = static_cast<int>((i / 7) % 3);
    ASSERT_EQ(out[0].f32()[i], static_cast<float>(y.data<int8_t>()[i] - zeros[c]) * scales[c]) << "at " << i;
  }
}

TEST(GraphQuant, DynamicQuantizeLinearAsOnnxWritesIt) {
  for (float shift : {0.0f, 3.0f, -3.0f}) {  // both signs, all positive, all negative
    Tensor x = noisy({5, 33}, 2.0f);
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] += shift;
    std::vector<const Tensor*> in{&x};
    std::vector<Tensor> out(3);
    Node n = node("DynamicQuantizeLinear", {}, {});
    n.fn(n, in, out);
    float lo = 0, hi = 0;
    for (int64_t i = 0; i < x.numel(); ++i) lo = std::min(lo, x.f32()[i]), hi = std::max(hi, x.f32()[i]);
    const float scale = (hi - lo) / 255.0f, zp = std::nearbyint(std::clamp(-lo / scale, 0.0f, 255.0f));
    EXPECT_EQ(out[1].f32()[0], scale);
    EXPECT_EQ(out[2].data<uint8_t>()[0], static_cast<uint8_t>(zp));
    for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(out[0].data<uint8_t>()[i], quantize_ref(x.f32()[i], scale, static_cast<int>(zp), 0, 255));
  }
  Tensor nan = noisy({4}, 1.0f);
  nan.f32()[2] = NAN;
  std::vector<const Tensor*> in{&nan};
  std::vector<Tensor> out(3);
  Node n = node("DynamicQuantizeLinear", {}, {});
  EXPECT_THROW(n.fn(n, in, out), loom::rt::Error);
}

// ORT's QLinearAdd and QLinearMul in one pass against the formula (each operand dequantized, the
// float sum or product quantized): same shapes, a row repeated, one value, the repeated operand
// first; uint8 and int8.
TEST(GraphQuant, QLinearAddAndMulAsTheirFormula) {
  for (const char* op : {"com.microsoft:QLinearAdd", "com.microsoft:QLinearMul"})
    for (DType dt : {DType::kU8, DType::kI8})
      for (std::vector<int64_t> rshape : std::vector<std::vector<int64_t>>{{3, 4, 5}, {5}, {1, 1, 5}, {}}) {
        const bool u8 = dt == DType::kU8, add = std::string(op).find("Add") != std::string::npos;
        const Tensor x = u8 ? ints_of<uint8_t>({3, 4, 5}, dt, 0, 255) : ints_of<int8_t>({3, 4, 5}, dt, -128, 127);
        const Tensor r = u8 ? ints_of<uint8_t>(rshape, dt, 3, 250) : ints_of<int8_t>(rshape, dt, -100, 120);
        const float sx = 0.05f, sr = 0.02f, sy = add ? 0.07f : 0.3f;
        const int zx = u8 ? 128 : 3, zr = u8 ? 100 : -5, zy = u8 ? 120 : -2;
        auto scalar = [](float v) { Tensor t = Tensor::empty({}); t.fill(v); return t; };
        auto zero = [&](int v) {
          Tensor t = Tensor::empty({}, dt);
          if (u8) t.data<uint8_t>()[0] = static_cast<uint8_t>(v);
          else t.data<int8_t>()[0] = static_cast<int8_t>(v);
          return t;
        };
        const Tensor tsx = scalar(sx), tsr = scalar(sr), tsy = scalar(sy), tzx = zero(zx), tzr = zero(zr), tzy = zero(zy);
        for (bool r_first : {false, true}) {
          std::vector<const Tensor*> in = r_first ? std::vector<const Tensor*>{&r, &tsr, &tzr, &x, &tsx, &tzx, &tsy, &tzy}
                                                  : std::vector<const Tensor*>{&x, &tsx, &tzx, &r, &tsr, &tzr, &tsy, &tzy};
          std::vector<Tensor> out(1);
          Node n = node(op, {}, {});
          n.fn(n, in, out);
          ASSERT_EQ(out[0].shape(), x.shape());
          ASSERT_EQ(out[0].dtype(), dt);
          for (int64_t i = 0; i < x.numel(); ++i) {
            const int64_t j = r.numel() == 1 ? 0 : i % r.numel();
            const auto at = [&](const Tensor& t, int64_t k) { return u8 ? t.data<uint8_t>()[k] : t.data<int8_t>()[k]; };
            const float fx = static_cast<float>(at(x, i) - zx) * sx, fr = static_cast<float>(at(r, j) - zr) * sr;
            const float v = add ? (r_first ? fr + fx : fx + fr) : (r_first ? fr * fx : fx * fr);
            ASSERT_EQ(at(out[0], i), quantize_ref(v, sy, zy, u8 ? 0 : -128, u8 ? 255 : 127)) << op << " at " << i;
          }
        }
      }
}

// ConvInteger's sums against a naive loop: pads (which hold the zero point, so add nothing),
// strides, dilations, groups, one image and several (one GEMM for all), uint8 and int8 weights.
TEST(GraphQuant, ConvIntegerSumsAsANaiveLoop) {
  struct Case {
    int64_t n, c, m, k, stride, dil, pad, group;
    bool u8_weights;
  };
  for (const Case& t : {Case{1, 3, 4, 3, 1, 1, 1, 1, false}, Case{3, 4, 6, 3, 2, 1, 1, 1, true}, Case{2, 4, 4, 3, 1, 2, 2, 2, false},
                        Case{2, 40, 5, 3, 1, 1, 1, 1, false}})
    for (bool per_channel : {false, true}) {  // a zero point per output channel: the float GEMMs in chunks
    const int64_t H = 7, W = 6;
    const Tensor x = ints_of<uint8_t>({t.n, t.c, H, W}, DType::kU8, 0, 255);
    const Tensor w = t.u8_weights ? ints_of<uint8_t>({t.m, t.c / t.group, t.k, t.k}, DType::kU8, 0, 255)
                                  : ints_of<int8_t>({t.m, t.c / t.group, t.k, t.k}, DType::kI8, -128, 127);
    const Tensor xz = ints_of<uint8_t>({}, DType::kU8, 131, 131);
    Tensor wz = t.u8_weights ? ints_of<uint8_t>({}, DType::kU8, 120, 120) : ints_of<int8_t>({}, DType::kI8, -3, -3);
    if (per_channel) wz = t.u8_weights ? ints_of<uint8_t>({t.m}, DType::kU8, 100, 140) : ints_of<int8_t>({t.m}, DType::kI8, -20, 20);
    const auto w_zero = [&](int64_t m) {
      const int64_t at = per_channel ? m : 0;
      return t.u8_weights ? wz.data<uint8_t>()[at] : wz.data<int8_t>()[at];
    };
    Node n = node("ConvInteger", {}, {});
    n.attrs["strides"] = Attr::of(std::vector<int64_t>{t.stride, t.stride});
    n.attrs["dilations"] = Attr::of(std::vector<int64_t>{t.dil, t.dil});
    n.attrs["pads"] = Attr::of(std::vector<int64_t>{t.pad, t.pad, t.pad, t.pad});
    n.attrs["group"] = Attr::of(t.group);
    std::vector<const Tensor*> in{&x, &w, &xz, &wz};
    std::vector<Tensor> out(1);
    n.fn(n, in, out);
    const Tensor& y = out[0];
    ASSERT_EQ(y.dtype(), DType::kI32);
    const int64_t oh = y.dim(2), ow = y.dim(3), cg = t.c / t.group, mg = t.m / t.group;
    ASSERT_EQ(oh, (H + 2 * t.pad - (t.k - 1) * t.dil - 1) / t.stride + 1);
    const auto wv = [&](int64_t i, int64_t m) { return (t.u8_weights ? w.data<uint8_t>()[i] : w.data<int8_t>()[i]) - w_zero(m); };
    for (int64_t b = 0; b < t.n; ++b)
      for (int64_t m = 0; m < t.m; ++m)
        for (int64_t oy = 0; oy < oh; ++oy)
          for (int64_t ox = 0; ox < ow; ++ox) {
            int64_t sum = 0;
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t i = 0; i < t.k; ++i)
                for (int64_t j = 0; j < t.k; ++j) {
                  const int64_t iy = oy * t.stride - t.pad + i * t.dil, ix = ox * t.stride - t.pad + j * t.dil;
                  if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                  const int64_t ch = (m / mg) * cg + c;
                  sum += (x.data<uint8_t>()[((b * t.c + ch) * H + iy) * W + ix] - 131) * wv(((m * cg + c) * t.k + i) * t.k + j, m);
                }
            ASSERT_EQ(y.data<int32_t>()[((b * t.m + m) * oh + oy) * ow + ox], sum) << "case c " << t.c << " at " << b << "," << m << "," << oy << "," << ox;
          }
    }
}

// QLinearConv: with weights given per call, the int32 sums (as ConvInteger's) plus the bias
// requantized by x_scale * w_scale[m] / y_scale; with its float weights made at load, the float
// Conv, within one quantization step of that.
TEST(GraphQuant, QLinearConvRequantizesItsSums) {
  const Tensor x = ints_of<int8_t>({2, 3, 6, 5}, DType::kI8, -128, 127), w = ints_of<int8_t>({4, 3, 3, 3}, DType::kI8, -128, 127);
  const Tensor xz = ints_of<int8_t>({}, DType::kI8, 4, 4), wz = ints_of<int8_t>({}, DType::kI8, 0, 0), yz = ints_of<int8_t>({}, DType::kI8, -7, -7);
  Tensor xs = Tensor::empty({}), ys = Tensor::empty({}), ws = noisy({4}, 0.01f, 0.8f), b = ints_of<int32_t>({4}, DType::kI32, -900, 900);
  xs.fill(0.02f), ys.fill(0.9f);
  for (int64_t m = 0; m < 4; ++m) ws.f32()[m] = std::fabs(ws.f32()[m]) + 1e-3f;
  const std::map<std::string, Attr> attrs{{"pads", Attr::of(std::vector<int64_t>{1, 1, 1, 1})}};
  Node ci = node("ConvInteger", {}, {}), qc = node("QLinearConv", {}, {});
  ci.attrs = qc.attrs = attrs;
  std::vector<Tensor> sums(1), y(1), y_made(1);
  ci.fn(ci, {&x, &w, &xz, &wz}, sums);
  const std::vector<const Tensor*> in{&x, &xs, &xz, &w, &ws, &wz, &ys, &yz, &b};
  qc.fn(qc, in, y);
  loom::rt::graph::qlinear_conv_weights(qc, in, &qc.attrs);
  qc.fn(qc, in, y_made);
  ASSERT_EQ(y[0].shape(), sums[0].shape());
  const int64_t ohw = y[0].dim(2) * y[0].dim(3);
  for (int64_t i = 0; i < y[0].numel(); ++i) {
    const int64_t m = (i / ohw) % 4;
    const float f = 0.02f * ws.f32()[m] / 0.9f;
    const double v = std::nearbyint(static_cast<float>(sums[0].data<int32_t>()[i] + b.data<int32_t>()[m]) * f) - 7;  // in float, as ORT
    ASSERT_EQ(y[0].data<int8_t>()[i], static_cast<int8_t>(std::clamp(v, -128.0, 127.0))) << "at " << i;
    ASSERT_LE(std::abs(y_made[0].data<int8_t>()[i] - y[0].data<int8_t>()[i]), 1) << "at " << i;
  }
}

// QLinearMatMul requantizes as ONNX Runtime does, in float: 3 x (1/6 as a float) is 0.5 in float
// and rounds to the even 0; in double it is 0.50000001 and would round to 1.
TEST(GraphQuant, QLinearMatMulRequantizesInFloatAsOnnxRuntime) {
  const Tensor a = ints_of<uint8_t>({1, 1}, DType::kU8, 3, 3), b = ints_of<uint8_t>({1, 2}, DType::kU8, 1, 1);
  const Tensor az = ints_of<uint8_t>({}, DType::kU8, 0, 0), bz = ints_of<uint8_t>({}, DType::kU8, 0, 0);
  const Tensor yz = ints_of<uint8_t>({}, DType::kU8, 10, 10);
  Tensor as = Tensor::empty({}), bs = Tensor::empty({2}), ys = Tensor::empty({});
  as.fill(1.0f / 6.0f), ys.fill(1.0f);
  bs.f32()[0] = 1.0f, bs.f32()[1] = 3.0f;  // 3 x 3 x (1/6) = 1.5: the even 2
  Node qm = node("QLinearMatMul", {}, {});
  std::vector<Tensor> y(1);
  qm.fn(qm, {&a, &as, &az, &b, &bs, &bz, &ys, &yz}, y);
  ASSERT_EQ(y[0].numel(), 2);
  EXPECT_EQ(y[0].data<uint8_t>()[0], 10);
  EXPECT_EQ(y[0].data<uint8_t>()[1], 12);
}

// quantize_dynamic's chain, as ORT writes it: values 0 x, 1 W, 2 W_zero, 3 W_scale, 4 bias;
// DQL(x) -> 5 q, 6 x_scale, 7 x_zero; Mul(x_scale, W_scale) -> 8; MatMulInteger -> 9; Cast -> 10;
// Mul(10, 8) -> 11; Add(bias, 11) -> 12.
TEST(GraphFuse, QuantizeDynamicChainIsOneGemmAnsweringAsItsNodes) {
  for (int64_t K : {5, 40, 600}) {  // 600: the int8 weight's sums in two chunks
    for (bool u8 : {false, true}) {
      const int64_t N = 6;
      std::vector<Tensor> vals(13);
      vals[0] = noisy({2, 3, K}, 1.5f);
      vals[1] = u8 ? ints_of<uint8_t>({K, N}, DType::kU8, 0, 255) : ints_of<int8_t>({K, N}, DType::kI8, -127, 127);
      vals[2] = u8 ? ints_of<uint8_t>({N}, DType::kU8, 100, 140) : ints_of<int8_t>({}, DType::kI8, 0, 0);
      vals[3] = noisy({N}, 0.01f, 1.1f);
      for (int64_t i = 0; i < N; ++i) vals[3].f32()[i] = std::fabs(vals[3].f32()[i]) + 1e-3f;
      vals[4] = noisy({N}, 0.5f, 0.7f);
      std::vector<Node> nodes{node("DynamicQuantizeLinear", {0}, {5, 6, 7}), node("Mul", {6, 3}, {8}),
                              node("MatMulInteger", {5, 1, 7, 2}, {9}), node("Cast", {9}, {10}), node("Mul", {10, 8}, {11}),
                              node("Add", {4, 11}, {12})};
      nodes[3].attrs["to"] = Attr::of(int64_t{1});
      const Tensor want = run_nodes(nodes, vals)[12];
      std::vector<Tensor> constants = vals;
      constants[0] = Tensor();  // the input
      ASSERT_EQ(loom::rt::graph::fuse_nodes(nodes, constants, {12}), 4) << "K " << K;
      nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [](const Node& n) { return n.op.empty(); }), nodes.end());
      ASSERT_EQ(nodes.size(), 2u);
      EXPECT_EQ(nodes[1].op, "Loom.MatMulIntegerToFloat");
      // uint8 weights with a zero point per column: the float GEMM; int8 ones: the int8 GEMM where exact.
      const bool int8_gemm = !u8 && loom::rt::cpu::exact_int8_gemm();
      EXPECT_EQ(nodes[1].attrs.count("loom.weights_s8"), int8_gemm ? 1u : 0u);
      if (K == 600 && !int8_gemm) {
        EXPECT_LT(nodes[1].attrs.at("loom.chunk").i, 600);
      }
      expect_same_bits(run_nodes(nodes, vals)[12], want);
    }
  }
}

// Sums past 2^24, where a float GEMM of the whole row would round: every product 255 * 127.
TEST(GraphFuse, IntegerSumsPastTwoToTheTwentyFourAreExact) {
  const int64_t K = 600, N = 2;
  std::vector<Tensor> vals(13);
  vals[0] = Tensor::empty({1, K});
  vals[0].fill(1.0f);  // quantized to 255 with zero point 0
  vals[1] = Tensor::empty({K, N}, DType::kI8);
  std::fill_n(vals[1].data<int8_t>(), K * N, int8_t{127});
  vals[1].data<int8_t>()[0] = 126;  // an odd sum: 2^24 < 600 * 255 * 127 - 255 < 2^25
  vals[2] = ints_of<int8_t>({}, DType::kI8, 0, 0);
  vals[3] = Tensor::empty({});
  vals[3].fill(1.0f);
  vals[4] = Tensor::zeros({N}, DType::kF32);
  std::vector<Node> nodes{node("DynamicQuantizeLinear", {0}, {5, 6, 7}), node("Mul", {6, 3}, {8}),
                          node("MatMulInteger", {5, 1, 7, 2}, {9}), node("Cast", {9}, {10}), node("Mul", {10, 8}, {11}),
                          node("Add", {4, 11}, {12})};
  nodes[3].attrs["to"] = Attr::of(int64_t{1});
  const std::vector<Tensor> want = run_nodes(nodes, vals);
  EXPECT_EQ(want[9].data<int32_t>()[0], 600 * 255 * 127 - 255);
  EXPECT_EQ(want[9].data<int32_t>()[1], 600 * 255 * 127);
  std::vector<Tensor> constants = vals;
  constants[0] = Tensor();
  ASSERT_EQ(loom::rt::graph::fuse_nodes(nodes, constants, {12}), 4);
  expect_same_bits(run_nodes(nodes, vals)[12], want[12]);
}

// int8 activations (a hand-written model; DynamicQuantizeLinear writes uint8) with int8 weights:
// the fused kernel takes its float path from weights held for the int8 GEMM.
TEST(GraphFuse, MatMulIntegerChainOfInt8ActivationsAnswersAsItsNodes) {
  std::vector<Tensor> vals(9);
  vals[0] = ints_of<int8_t>({3, 300}, DType::kI8, -128, 127);
  vals[1] = ints_of<int8_t>({300, 4}, DType::kI8, -128, 127);
  vals[2] = ints_of<int8_t>({}, DType::kI8, 5, 5);
  vals[3] = ints_of<int8_t>({}, DType::kI8, -3, -3);
  vals[4] = Tensor::empty({});
  vals[4].fill(0.0625f);
  std::vector<Node> nodes{node("MatMulInteger", {0, 1, 2, 3}, {5}), node("Cast", {5}, {6}), node("Mul", {6, 4}, {7})};
  nodes[1].attrs["to"] = Attr::of(int64_t{1});
  const Tensor want = run_nodes(nodes, vals)[7];
  std::vector<Tensor> constants = vals;
  constants[0] = Tensor();
  ASSERT_EQ(loom::rt::graph::fuse_nodes(nodes, constants, {7}), 2);
  expect_same_bits(run_nodes(nodes, vals)[7], want);
}

// A second reader of the integer sums keeps the chain as it is.
TEST(GraphFuse, QuantizeDynamicChainWithAnotherReaderStays) {
  std::vector<Node> nodes{node("MatMulInteger", {0, 1, 2, 3}, {4}), node("Cast", {4}, {5}), node("Mul", {5, 6}, {7}),
                          node("Identity", {4}, {8})};
  nodes[1].attrs["to"] = Attr::of(int64_t{1});
  std::vector<Tensor> constants(9);
  constants[1] = ints_of<int8_t>({4, 3}, DType::kI8, -5, 5);
  EXPECT_EQ(loom::rt::graph::fuse_nodes(nodes, constants, {7, 8}), 0);
}

// QuantizeLinear -> DequantizeLinear (two of them), per axis, int8 and uint8: one pass each,
// the same bits; a DequantizeLinear of another scale keeps the pair.
TEST(GraphFuse, QdqPairIsOnePassAnsweringAsItsNodes) {
  for (DType dt : {DType::kU8, DType::kI8}) {
    std::vector<Tensor> vals(7);
    vals[0] = noisy({2, 4, 9}, 3.0f);
    vals[1] = noisy({4}, 0.05f, 0.9f);
    for (int64_t i = 0; i < 4; ++i) vals[1].f32()[i] = std::fabs(vals[1].f32()[i]) + 0.01f;
    vals[2] = dt == DType::kU8 ? ints_of<uint8_t>({4}, dt, 120, 135) : ints_of<int8_t>({4}, dt, -9, 9);
    std::vector<Node> nodes{node("QuantizeLinear", {0, 1, 2}, {3}), node("DequantizeLinear", {3, 1, 2}, {4}),
                            node("DequantizeLinear", {3, 1, 2}, {5}), node("Add", {4, 5}, {6})};
    for (int i = 0; i < 3; ++i) nodes[static_cast<size_t>(i)].attrs["axis"] = Attr::of(int64_t{1});
    const Tensor want = run_nodes(nodes, vals)[6];
    std::vector<Tensor> constants = vals;
    constants[0] = Tensor();
    std::vector<Node> other = nodes;
    other[2].in[1] = 0;  // another scale
    ASSERT_EQ(loom::rt::graph::fuse_nodes(other, constants, {6}), 0);
    ASSERT_EQ(loom::rt::graph::fuse_nodes(nodes, constants, {6}), 1);
    nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [](const Node& n) { return n.op.empty(); }), nodes.end());
    ASSERT_EQ(nodes.size(), 3u);
    EXPECT_EQ(nodes[0].op, "Loom.QuantizeDequantize");
    expect_same_bits(run_nodes(nodes, vals)[6], want);
  }
}

// A QDQ model's MatMul: the activation through QuantizeLinear -> DequantizeLinear (uint8 or int8),
// the weight an int8 constant through a DequantizeLinear folded at load (one scale, or one per
// column): Loom.MatMulIntegerToFloat quantizing the activation itself, answering as the nodes
// within the float sum's rounding (the int8 GEMM's sum is exact, the float one is not); a second
// reader of the fake-quantized activation (a residual Add) keeps its QuantizeDequantize.
TEST(GraphFuse, QdqMatMulRunsOnTheInt8Gemm) {
  const int64_t K = 160, N = 128;
  for (DType act : {DType::kU8, DType::kI8})
    for (bool per_column : {false, true})
      for (bool residual : {false, true}) {
        SCOPED_TRACE(std::string(act == DType::kU8 ? "uint8" : "int8") + (per_column ? ", per column" : "") + (residual ? ", residual" : ""));
        std::vector<Tensor> vals(12);
        vals[0] = noisy({2, 5, K}, 2.0f);
        vals[1] = Tensor::empty({}), vals[1].fill(0.02f);
        vals[2] = act == DType::kU8 ? ints_of<uint8_t>({}, act, 131, 131) : ints_of<int8_t>({}, act, -3, -3);
        vals[5] = ints_of<int8_t>({K, N}, DType::kI8, -127, 127);
        vals[6] = noisy({per_column ? N : 1}, 0.004f, 0.9f);
        for (int64_t i = 0; i < vals[6].numel(); ++i) vals[6].f32()[i] = std::fabs(vals[6].f32()[i]) + 1e-3f;
        if (!per_column) vals[6] = vals[6].reshape({});
        vals[7] = per_column ? ints_of<int8_t>({N}, DType::kI8, 0, 0) : ints_of<int8_t>({}, DType::kI8, 0, 0);
        const Node weight = node("DequantizeLinear", {5, 6, 7}, {8});  // folded at load
        vals[8] = run_nodes({weight}, vals)[8];
        std::vector<Node> nodes{node("QuantizeLinear", {0, 1, 2}, {3}), node("DequantizeLinear", {3, 1, 2}, {4}),
                                node("MatMul", {4, 8}, {9})};
        std::vector<int> outputs{9};
        if (residual) nodes.push_back(node("Add", {4, 0}, {10})), outputs.push_back(10);
        const std::vector<Tensor> want = run_nodes(nodes, vals);
        std::vector<Tensor> constants = vals;
        constants[0] = Tensor();
        loom::rt::graph::fuse_nodes(nodes, constants, outputs, {weight});
        std::vector<std::string> ops;
        for (const Node& n : nodes) ops.push_back(n.op);
        const std::vector<std::string> fused = residual ? std::vector<std::string>{"Loom.QuantizeDequantize", "Loom.MatMulIntegerToFloat", "Add"}
                                                        : std::vector<std::string>{"Loom.MatMulIntegerToFloat"};
        ASSERT_EQ(ops, fused);
        const std::vector<Tensor> got = run_nodes(nodes, vals);
        for (int64_t i = 0; i < want[9].numel(); ++i)
          ASSERT_NEAR(got[9].f32()[i], want[9].f32()[i], 1e-5f * std::max(1.0f, std::fabs(want[9].f32()[i]))) << "at " << i;
        if (residual) expect_same_bits(got[10], want[10]);
      }
}

// GPT-2's tanh GELU spelled out as PyTorch exports it: one Gelu (approximate tanh) node answering
// as the seven it replaces, within float rounding; a second reader of an inner value keeps them.
TEST(GraphFuse, SpelledOutTanhGeluIsOneNode) {
  for (bool shared : {false, true}) {
    std::vector<Tensor> vals(20);
    vals[0] = noisy({3, 37}, 4.0f);
    const float k[6] = {0.5f, 3.0f, 0.044715f, 0.7978845608f, 1.0f, 0.0f};
    for (int i = 0; i < 5; ++i) vals[static_cast<size_t>(1 + i)] = Tensor::empty({}), vals[static_cast<size_t>(1 + i)].fill(k[i]);
    std::vector<Node> nodes{node("Mul", {0, 1}, {6}),   node("Pow", {0, 2}, {7}),  node("Mul", {7, 3}, {8}), node("Add", {0, 8}, {9}),
                            node("Mul", {9, 4}, {10}), node("Tanh", {10}, {11}), node("Add", {11, 5}, {12}), node("Mul", {6, 12}, {13})};
    std::vector<int> outputs{13};
    if (shared) nodes.push_back(node("Identity", {10}, {14})), outputs.push_back(14);
    const Tensor want = run_nodes(nodes, vals)[13];
    std::vector<Tensor> constants = vals;
    constants[0] = Tensor();
    const int fused = loom::rt::graph::fuse_nodes(nodes, constants, outputs);
    if (shared) {
      EXPECT_EQ(fused, 0);
      continue;
    }
    ASSERT_EQ(fused, 7);
    nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [](const Node& n) { return n.op.empty(); }), nodes.end());
    ASSERT_EQ(nodes.size(), 1u);
    EXPECT_EQ(nodes[0].attrs.at("approximate").s, "tanh");
    const Tensor got = run_nodes(nodes, vals)[13];
    for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got.f32()[i], want.f32()[i], 2e-6f * std::max(1.0f, std::fabs(want.f32()[i])));
  }
}

}  // namespace

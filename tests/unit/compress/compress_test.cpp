// compress_test.cpp — INT8 arithmetic and loom-compress's parts: the int8 GEMM (oneDNN)
// against exact int32 references for odd shapes and zero points, PyTorch's rounding, the INT8
// MLP against its float model, pruning against zeroed neurons, the observers, the
// distillation loss's gradient, QAT's fake quantization, and INT8 files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <random>

#include "calibrate.hpp"
#include "loom/rt/io/quant_model.hpp"
#include "loom/rt/nn/decoder.hpp"
#include "loom/rt/nn/quant_mlp.hpp"
#include "loom/rt/tensor/int8.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "prune.hpp"

namespace loom {
namespace {

using rt::int8::Epilogue;
using rt::int8::Out;

std::string tmp_path(const std::string& name) {
  return std::string(::testing::TempDir()) + "/loomc-" + std::to_string(getpid()) + "-" + name;
}

TEST(Int8, QuantizeRoundsHalfToEvenAndClamps) {
  EXPECT_EQ(rt::int8::quantize_value(2.5f, 1.0f, 0, -128, 127), 2);
  EXPECT_EQ(rt::int8::quantize_value(3.5f, 1.0f, 0, -128, 127), 4);
  EXPECT_EQ(rt::int8::quantize_value(-2.5f, 1.0f, 0, -128, 127), -2);
  EXPECT_EQ(rt::int8::quantize_value(1.25f, 0.5f, 3, -128, 127), 5);  // 2.5 -> 2, + 3
  EXPECT_EQ(rt::int8::quantize_value(1.75f, 0.5f, 3, -128, 127), 7);  // 3.5 -> 4, + 3
  EXPECT_EQ(rt::int8::quantize_value(1000.0f, 1.0f, 0, -128, 127), 127);
  EXPECT_EQ(rt::int8::quantize_value(-1000.0f, 1.0f, 0, -128, 127), -128);
  std::vector<float> x{0.5f, 1.5f, 2.5f, -3.0f, 200.0f};
  std::vector<uint8_t> q(x.size());
  rt::int8::quantize_u8(x.data(), 5, {1.0f, 0}, q.data());
  EXPECT_EQ(std::vector<int>(q.begin(), q.end()), (std::vector<int>{0, 2, 2, 0, rt::int8::kActMax}));
}

TEST(Int8, SymmetricScalesPerChannelAndPerTensor) {
  const std::vector<float> w{0.5f, -1.0f, 0.25f, 0.1f, -0.2f, 0.05f};  // rows of max |w| 1.0 and 0.2
  const auto pc = rt::int8::symmetric_scales(w.data(), 2, 3), pt = rt::int8::symmetric_scales(w.data(), 2, 3, true);
  EXPECT_FLOAT_EQ(pc[0], 1.0f / 127.5f);
  EXPECT_FLOAT_EQ(pc[1], 0.2f / 127.5f);
  EXPECT_EQ(pt, (std::vector<float>{1.0f / 127.5f, 1.0f / 127.5f}));
  std::vector<int8_t> q(6);
  rt::int8::quantize_per_channel(w.data(), 2, 3, pc.data(), q.data());
  // -1.0f * (1.0f / scale) is -127.49999 in float (PyTorch multiplies by the float inverse too),
  // so -127; row 2's -127.5 rounds to even, -128.
  EXPECT_EQ(std::vector<int>(q.begin(), q.end()), (std::vector<int>{64, -127, 32, 64, -128, 32}));
}

TEST(Int8, AffineRangeHoldsZero) {
  auto q = rt::int8::affine_from_range(0.0f, 12.7f);
  EXPECT_EQ(q.zero_point, 0);
  EXPECT_NEAR(q.scale, 0.1f, 1e-6);
  q = rt::int8::affine_from_range(-1.0f, 1.0f);
  EXPECT_EQ(q.zero_point, 64);  // round(1 / (2/127)) = round(63.5) = 64 (even)
  q = rt::int8::affine_from_range(2.0f, 3.0f);  // widened to [0, 3]
  EXPECT_EQ(q.zero_point, 0);
}

// The int8 GEMM and its fused epilogues against the reference loops, for odd shapes.
TEST(Int8, LinearMatchesExactReference) {
  std::mt19937 rng(7);
  for (auto [m, n, k] : std::vector<std::tuple<int, int, int>>{{1, 1, 1}, {3, 5, 7}, {37, 53, 129}, {64, 10, 784}}) {
    for (int zp : {0, 3, 64}) {
      std::vector<uint8_t> x(static_cast<size_t>(m) * k);
      std::vector<int8_t> w(static_cast<size_t>(n) * k);
      for (auto& v : x) v = static_cast<uint8_t>(rng() % (rt::int8::kActMax + 1));
      for (auto& v : w) v = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
      rt::int8::Linear raw(n, k, w.data(), zp, {});
      std::vector<int32_t> a(static_cast<size_t>(m) * n), b(a.size());
      raw.run(x.data(), m, a.data());
      raw.run_reference(x.data(), m, b.data());
      ASSERT_EQ(a, b) << m << "x" << n << "x" << k << " zp " << zp;
      Epilogue e;
      for (int j = 0; j < n; ++j) e.scale.push_back(1e-4f * (1 + j % 7)), e.bias.push_back(0.05f * (j % 5) - 0.1f);
      e.out = Out::kF32;
      e.relu = zp == 3;
      rt::int8::Linear lf(n, k, w.data(), zp, e);
      std::vector<float> f(a.size()), g(a.size());
      lf.run(x.data(), m, f.data());
      lf.run_reference(x.data(), m, g.data());
      for (size_t i = 0; i < f.size(); ++i) ASSERT_NEAR(f[i], g[i], 1e-4f * (1 + std::fabs(g[i])));
      e.out = Out::kU8;
      e.relu = true;
      e.out_zero_point = zp == 64 ? 5 : 0;
      for (auto& s : e.scale) s *= 20;
      rt::int8::Linear lu(n, k, w.data(), zp, e);
      std::vector<uint8_t> u(a.size()), v(a.size());
      lu.run(x.data(), m, u.data());
      lu.run_reference(x.data(), m, v.data());
      int spread = 0;
      for (size_t i = 0; i < u.size(); ++i) {
        ASSERT_LE(u[i], rt::int8::kActMax);
        spread = std::max(spread, std::abs(u[i] - v[i]));
      }
      EXPECT_LE(spread, 1) << "requantized outputs differ by more than one step (float rounding ties only)";
    }
  }
}

// One layer run at several batch sizes (one primitive each, the reordered weights shared).
TEST(Int8, LinearServesEveryBatchSize) {
  std::mt19937 rng(3);
  const int n = 24, k = 40;
  std::vector<int8_t> w(static_cast<size_t>(n) * k);
  for (auto& v : w) v = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
  rt::int8::Linear lin(n, k, w.data(), 2, {});
  for (int m : {1, 7, 32, 7, 1, 33}) {
    std::vector<uint8_t> x(static_cast<size_t>(m) * k);
    for (auto& v : x) v = static_cast<uint8_t>(rng() % (rt::int8::kActMax + 1));
    std::vector<int32_t> a(static_cast<size_t>(m) * n), b(a.size());
    lin.run(x.data(), m, a.data());
    lin.run_reference(x.data(), m, b.data());
    ASSERT_EQ(a, b) << "batch " << m;
  }
}

TEST(Int8, LinearRejectsBadEpilogues) {
  std::vector<int8_t> w(6, 1);
  Epilogue e;
  e.out = Out::kF32;
  e.scale = {1.0f};  // 1 scale for 2 channels
  EXPECT_THROW(rt::int8::Linear(2, 3, w.data(), 0, e), rt::Error);
  e.scale = {1.0f, -1.0f};
  EXPECT_THROW(rt::int8::Linear(2, 3, w.data(), 0, e), rt::Error);
  EXPECT_THROW(rt::int8::Linear(2, 3, w.data(), 200, Epilogue{}), rt::Error);
}

// Dynamic quantization (a range per input row): oneDNN equals the reference loops, and the result
// stays within the quantization error of the float product, for rows of very different ranges.
TEST(Int8, DynamicLinearTracksTheFloatProduct) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int n = 48, k = 64, m = 5;
  std::vector<float> w(static_cast<size_t>(n) * k), x(static_cast<size_t>(m) * k), bias(n);
  for (auto& v : w) v = 0.1f * g(rng);
  for (int i = 0; i < m; ++i)  // row i spans about 10^(i-2): one scale for all would flatten the small rows
    for (int c = 0; c < k; ++c) x[static_cast<size_t>(i * k + c)] = std::pow(10.0f, static_cast<float>(i - 2)) * (g(rng) + (i == 3 ? 2.0f : 0.0f));
  for (auto& v : bias) v = g(rng);
  auto scale = rt::int8::symmetric_scales(w.data(), n, k);
  std::vector<int8_t> q(w.size());
  rt::int8::quantize_per_channel(w.data(), n, k, scale.data(), q.data());
  rt::int8::DynamicLinear lin(n, k, q.data(), scale);
  std::vector<float> y(static_cast<size_t>(m) * n), ref(y.size());
  lin.run(x.data(), m, bias.data(), y.data());
  lin.run_reference(x.data(), m, bias.data(), ref.data());
  EXPECT_EQ(y, ref);
  for (int i = 0; i < m; ++i) {
    double err = 0, norm = 0;
    for (int j = 0; j < n; ++j) {
      double exact = bias[static_cast<size_t>(j)];
      for (int c = 0; c < k; ++c) exact += double{x[static_cast<size_t>(i * k + c)]} * w[static_cast<size_t>(j * k + c)];
      err += std::pow(y[static_cast<size_t>(i * n + j)] - exact, 2);
      norm += std::pow(exact - bias[static_cast<size_t>(j)], 2);
    }
    EXPECT_LT(std::sqrt(err / norm), 0.03) << "row " << i;  // 7-bit rows, 8-bit weights: ~1-2% relative error
  }
  EXPECT_THROW(rt::int8::DynamicLinear(n, k, q.data(), std::vector<float>(3, 1.0f)), rt::Error);
}

rt::Tensor random_input(int rows, int cols, uint64_t seed) {
  rt::Tensor x = rt::Tensor::empty({rows, cols});
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = u(rng);
  return x;
}

TEST(QuantMlp, LogitsStayNearTheFloatModel) {
  rt::Mlp m({20, 32, 16, 4}, 3);
  const rt::Tensor x = random_input(64, 20, 1);
  const auto q = rt::QuantMlp::quantize(m, compress::calibrate(m, x, "minmax"));
  const rt::Tensor yf = m.forward(x).clone(), yq = q.forward(x);
  double max_abs = 0, max_diff = 0;
  for (int64_t i = 0; i < yf.numel(); ++i)
    max_abs = std::max<double>(max_abs, std::fabs(yf.f32()[i])), max_diff = std::max<double>(max_diff, std::fabs(yf.f32()[i] - yq.f32()[i]));
  EXPECT_LT(max_diff, 0.05 * max_abs + 0.02) << "int8 logits drifted from fp32: " << max_diff;
}

TEST(QuantMlp, FileRoundTripsAndRefusesBrokenQuant) {
  rt::Mlp m({8, 6, 3}, 2);
  const rt::Tensor x = random_input(16, 8, 2);
  const auto q = rt::QuantMlp::quantize(m, compress::calibrate(m, x, "percentile"));
  const std::string p = tmp_path("q.h5");
  rt::save_quant_mlp(p, q, m.config_json(), "percentile");
  const rt::ModelFile f = rt::load_model(p);
  EXPECT_EQ(rt::model_precision(p, f), "int8");
  EXPECT_EQ(f.params.size(), 4u);
  const rt::QuantMlp back = rt::load_quant_mlp(p, f);
  const rt::Tensor a = q.forward(x), b = back.forward(x);
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.f32()[i], b.f32()[i]);
  // load_mlp dequantizes: a float model of the integers times the scales.
  const rt::Mlp deq = rt::load_mlp(p, f);
  EXPECT_NEAR(deq.params()[0].value.f32()[0],
              q.layers()[0].w.data<int8_t>()[0] * q.layers()[0].w_scale[0], 1e-7);
  rt::ModelFile broken = f;
  broken.config_json = m.config_json();  // int8 tensors, no quant
  EXPECT_THROW(rt::model_precision(p, broken), rt::Error);
  std::remove(p.c_str());
}

// A pruned model equals the original with the removed neurons zeroed (rows and biases).
TEST(Prune, EqualsOriginalWithNeuronsZeroed) {
  rt::Mlp m({12, 10, 8, 3}, 5);
  const auto r = compress::prune_mlp(m, 0.3, "l1");
  EXPECT_EQ(r.model.widths(), (std::vector<int>{12, 7, 6, 3}));
  EXPECT_LT(r.model.num_params(), m.num_params());
  rt::Mlp zeroed({12, 10, 8, 3}, 5);
  for (size_t h = 0; h < r.kept.size(); ++h) {
    const int width = zeroed.widths()[h + 1], in = zeroed.widths()[h];
    for (int n = 0; n < width; ++n) {
      if (std::find(r.kept[h].begin(), r.kept[h].end(), n) != r.kept[h].end()) continue;
      for (int c = 0; c < in; ++c) zeroed.params()[2 * h].value.f32()[n * in + c] = 0;
      zeroed.params()[2 * h + 1].value.f32()[n] = 0;
    }
  }
  const rt::Tensor x = random_input(9, 12, 4);
  rt::Mlp pruned = r.model;
  const rt::Tensor a = pruned.forward(x).clone(), b = zeroed.forward(x);
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_NEAR(a.f32()[i], b.f32()[i], 1e-5);
  // The neurons kept are those of largest L1 norm.
  const float* w = m.params()[0].value.f32();
  auto l1 = [&](int n) {
    double s = 0;
    for (int c = 0; c < 12; ++c) s += std::fabs(w[n * 12 + c]);
    return s;
  };
  double kept_min = 1e30, cut_max = 0;
  for (int n = 0; n < 10; ++n) {
    const bool kept = std::find(r.kept[0].begin(), r.kept[0].end(), n) != r.kept[0].end();
    (kept ? kept_min : cut_max) = kept ? std::min(kept_min, l1(n)) : std::max(cut_max, l1(n));
  }
  EXPECT_GE(kept_min, cut_max);
}

TEST(Prune, RejectsBadSparsityAndCriterion) {
  rt::Mlp m({4, 4, 2}, 1);
  EXPECT_THROW(compress::prune_mlp(m, 0.0, "l1"), rt::Error);
  EXPECT_THROW(compress::prune_mlp(m, 1.0, "l1"), rt::Error);
  EXPECT_THROW(compress::prune_mlp(m, 0.5, "l3"), rt::Error);
  EXPECT_THROW(compress::prune_mlp(rt::Mlp({4, 2}, 1), 0.5, "l1"), rt::Error);
}

// A pruned gpt computes what the original computes with the pruned heads' and neurons' outputs
// zeroed (their columns of attn.c_proj and mlp.c_proj), and the heads kept are the largest by L1.
TEST(Prune, GptEqualsOriginalWithHeadsAndNeuronsZeroed) {
  rt::GptConfig c;
  c.vocab = 23, c.context = 8, c.layers = 2, c.heads = 4, c.embd = 16;
  rt::Gpt original(c, 5), zeroed(c, 5);
  const auto r = compress::prune_gpt(original, 0.5, "l1");
  EXPECT_EQ(r.model.config().heads, 2);
  EXPECT_EQ(r.model.config().head_size, 4);
  EXPECT_EQ(r.model.config().ff(), 32);
  const int hs = 4;
  for (int l = 0; l < c.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    for (auto& p : zeroed.params()) {
      const bool attn = p.name == h + "attn.c_proj.weight", mlp = p.name == h + "mlp.c_proj.weight";
      if (!attn && !mlp) continue;
      const int64_t cols = p.value.dim(1);
      for (int64_t col = 0; col < cols; ++col) {
        const auto& kept = attn ? r.heads_kept[static_cast<size_t>(l)] : r.neurons_kept[static_cast<size_t>(l)];
        const int unit = static_cast<int>(attn ? col / hs : col);
        if (std::find(kept.begin(), kept.end(), unit) != kept.end()) continue;
        for (int64_t row = 0; row < p.value.dim(0); ++row) p.value.f32()[row * cols + col] = 0.0f;
      }
    }
  }
  std::vector<int32_t> tok(16), tgt(16);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>(i * 7 % 23), tgt[i] = static_cast<int32_t>(i * 5 % 23);
  rt::Gpt pruned = r.model;
  pruned.forward(tok, tgt, 2, false);
  zeroed.forward(tok, tgt, 2, false);
  const rt::Tensor &a = pruned.logits(), &b = zeroed.logits();
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_NEAR(a.f32()[i], b.f32()[i], 1e-4f) << i;
  // The serving decoder (KV cache as wide as the heads kept) gives the same logits.
  rt::Decoder dec(rt::decoder_from_gpt(pruned));
  rt::KvCache kv(dec.config(), 2, 4);
  const std::vector<int32_t> table{0, 1};
  rt::DecodeBatch db;
  db.tables = {&table};
  for (int t = 0; t < 8; ++t) db.tokens.push_back(tok[static_cast<size_t>(t)]), db.positions.push_back(t), db.seq.push_back(0), db.logit_rows.push_back(t);
  rt::Tensor logits;
  dec.forward(kv, db, logits);
  for (int64_t i = 0; i < logits.numel(); ++i) ASSERT_NEAR(logits.f32()[i], a.f32()[i], 1e-4f) << "decoder " << i;
  // The heads kept are those whose columns of c_proj have the largest L1 norms.
  for (auto& p : original.params())
    if (p.name == "h.0.attn.c_proj.weight") {
      std::vector<double> l1(4, 0.0);
      for (int64_t i = 0; i < p.value.numel(); ++i) l1[static_cast<size_t>(i % 16 / hs)] += std::fabs(p.value.f32()[i]);
      double kept_min = 1e9, cut_max = 0;
      for (int k = 0; k < 4; ++k) {
        const bool kept = std::find(r.heads_kept[0].begin(), r.heads_kept[0].end(), k) != r.heads_kept[0].end();
        if (kept) kept_min = std::min(kept_min, l1[static_cast<size_t>(k)]);
        else cut_max = std::max(cut_max, l1[static_cast<size_t>(k)]);
      }
      EXPECT_GE(kept_min, cut_max);
    }
  EXPECT_THROW(compress::prune_gpt(original, 0.9, "l1"), rt::Error);  // all 4 heads of a block
  EXPECT_THROW(compress::prune_gpt(original, 0.3, "l3"), rt::Error);
}

TEST(Calibrate, ObserversAndErrors) {
  // A histogram with a long sparse tail: KL clips below the largest value.
  std::vector<double> h(2048, 0.0);
  for (int i = 0; i < 200; ++i) h[static_cast<size_t>(i)] = 1000.0 - 4 * i;
  h[2047] = 1;
  const double t = compress::kl_threshold(h, 1.0, 128);
  EXPECT_LT(t, 2047.0);
  EXPECT_GE(t, 128.0);
  rt::Mlp m({6, 5, 2}, 1);
  EXPECT_THROW(compress::calibrate(m, random_input(4, 7, 1), "minmax"), rt::Error);  // wrong width
  EXPECT_THROW(compress::calibrate(m, random_input(4, 6, 1), "median"), rt::Error);
  rt::Tensor x = random_input(5000, 6, 3);
  x.f32()[0] = 50.0f;  // one outlier
  const auto mm = compress::calibrate(m, x, "minmax"), pc = compress::calibrate(m, x, "percentile");
  EXPECT_GT(mm[0].scale, pc[0].scale * 5) << "percentile must clip the outlier that minmax keeps";
  EXPECT_NO_THROW(compress::calibrate(m, x, "entropy"));
}

TEST(Distill, GradientMatchesFiniteDifferences) {
  const int rows = 3, cols = 5;
  std::vector<float> s(rows * cols), t(rows * cols), d(rows * cols);
  std::vector<int32_t> y{1, 4, 0};
  for (int i = 0; i < rows * cols; ++i) s[i] = 0.3f * ((i * 7) % 5) - 0.5f, t[i] = 0.4f * ((i * 3) % 7) - 1.0f;
  rt::cpu::distill_xent(s.data(), t.data(), y.data(), d.data(), rows, cols, 4.0f, 0.7f);
  for (int i = 0; i < rows * cols; ++i) {
    auto p = s, q = s;
    p[i] += 1e-3f, q[i] -= 1e-3f;
    const double g = (rt::cpu::distill_xent(p.data(), t.data(), y.data(), nullptr, rows, cols, 4.0f, 0.7f) -
                      rt::cpu::distill_xent(q.data(), t.data(), y.data(), nullptr, rows, cols, 4.0f, 0.7f)) / 2e-3;
    EXPECT_NEAR(g, d[i], 1e-4) << i;
  }
  // alpha 0 is plain cross-entropy.
  EXPECT_NEAR(rt::cpu::distill_xent(s.data(), t.data(), y.data(), nullptr, rows, cols, 4.0f, 0.0f),
              rt::cpu::softmax_xent(s.data(), y.data(), nullptr, rows, cols), 1e-9);
}

// QAT's fake-quantized forward computes what the exported INT8 model computes.
TEST(Qat, FakeQuantForwardMatchesTheInt8Model) {
  rt::Mlp m({10, 8, 3}, 4);
  m.set_fake_quant(true);
  const rt::Tensor x = random_input(32, 10, 5);
  m.forward(x);  // the observer's first batch sets its range
  m.set_training(false);
  const rt::Tensor fq = m.forward(x).clone();
  const auto q = rt::QuantMlp::quantize(m, m.observed_inputs());
  const rt::Tensor y = q.forward(x);
  double max_abs = 0, max_diff = 0;
  for (int64_t i = 0; i < y.numel(); ++i)
    max_abs = std::max<double>(max_abs, std::fabs(fq.f32()[i])), max_diff = std::max<double>(max_diff, std::fabs(fq.f32()[i] - y.f32()[i]));
  // Only the hidden layer's requantization rounding differs (fake quant rounds the same values).
  EXPECT_LT(max_diff, 0.02 * max_abs + 1e-3);
}

}  // namespace
}  // namespace loom

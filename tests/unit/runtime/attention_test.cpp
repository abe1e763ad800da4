// attention_test.cpp — the gpt with flash attention (no T x T matrix: nn/flash_attention.cpp)
// against the same gpt with the full softmax kept: the same seed and tokens give the same loss,
// logits and every gradient within fp32 rounding. Contexts below, at and across the 64-row
// tiles (1, 63, 64, 65, 150), head sizes that are not multiples of the vector width, dropout,
// recomputation, and the auto choice.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "loom/rt/error.hpp"
#include "gpt_config.hpp"
#include "loom/rt/nn/gpt.hpp"

using loom::rt::Attention;
using loom::rt::Gpt;
using loom::rt::GptConfig;

namespace {

// The largest |a - b| over the largest |b| (b all zeros: the largest |a|).
double relative(const loom::rt::Tensor& a, const loom::rt::Tensor& b) {
  double worst = 0, scale = 0;
  for (int64_t k = 0; k < b.numel(); ++k) {
    worst = std::fmax(worst, std::fabs(a.f32()[k] - b.f32()[k]));
    scale = std::fmax(scale, std::fabs(b.f32()[k]));
  }
  return scale > 0 ? worst / scale : worst;
}

GptConfig config(int context, int heads, int embd, float dropout) {
  return loom::rt::test::small_gpt(context, heads, embd, dropout);
}

// Two steps of forward and backward with the same data on both models; every difference of the
// second step (after one SGD update, so the weights are no longer the initial ones).
void expect_same(const GptConfig& c, int batch, bool recompute) {
  Gpt full(c, 5), flash(c, 5);
  full.set_attention(Attention::kFull);
  flash.set_attention(Attention::kFlash);
  ASSERT_FALSE(full.flash());
  ASSERT_TRUE(flash.flash());
  full.set_recompute(recompute);
  flash.set_recompute(recompute);
  std::mt19937 rng(9);
  const size_t n = static_cast<size_t>(batch) * c.context;
  for (int step = 0; step < 2; ++step) {
    std::vector<int32_t> tok(n), tgt(n);
    for (size_t i = 0; i < n; ++i) {
      tok[i] = static_cast<int32_t>(rng() % static_cast<unsigned>(c.vocab));
      tgt[i] = static_cast<int32_t>(rng() % static_cast<unsigned>(c.vocab));
    }
    const double a = full.forward(tok, tgt, batch, true), b = flash.forward(tok, tgt, batch, true);
    EXPECT_NEAR(a, b, 1e-5 * std::fabs(a)) << "context " << c.context << " step " << step;
    EXPECT_LT(relative(flash.logits(), full.logits()), 2e-5) << "context " << c.context;
    full.backward();
    flash.backward();
    for (size_t i = 0; i < full.params().size(); ++i) {
      auto& pf = full.params()[i];
      auto& pl = flash.params()[i];
      EXPECT_LT(relative(pl.grad, pf.grad), 1e-4) << pf.name << ", context " << c.context << ", step " << step;
      for (int64_t k = 0; k < pf.value.numel(); ++k) {  // the same SGD step on both
        pf.value.f32()[k] -= 0.1f * pf.grad.f32()[k];
        pl.value.f32()[k] = pf.value.f32()[k];
      }
    }
  }
}

}  // namespace

TEST(FlashAttention, MatchesTheFullSoftmaxAcrossTileEdges) {
  for (int t : {1, 63, 64, 65, 150}) expect_same(config(t, 3, 30, 0.0f), 2, false);
}

TEST(FlashAttention, MatchesWithDropoutRecomputationAndOneHead) {
  expect_same(config(100, 2, 24, 0.1f), 3, true);
  expect_same(config(70, 1, 16, 0.0f), 2, false);
}

TEST(FlashAttention, AutoPicksFlashFromTheLongContextsOn) {
  Gpt short_ctx(config(loom::rt::kFlashContext - 1, 2, 16, 0.0f), 1), long_ctx(config(loom::rt::kFlashContext, 2, 16, 0.0f), 1);
  EXPECT_FALSE(short_ctx.flash());
  EXPECT_TRUE(long_ctx.flash());
  long_ctx.set_attention(Attention::kFull);
  EXPECT_FALSE(long_ctx.flash());
}

TEST(FlashAttention, NamesParseAndABadOneIsRefused) {
  EXPECT_EQ(loom::rt::parse_attention("flash"), Attention::kFlash);
  EXPECT_EQ(loom::rt::parse_attention("full"), Attention::kFull);
  EXPECT_EQ(loom::rt::parse_attention("auto"), Attention::kAuto);
  try {
    loom::rt::parse_attention("fast");
    FAIL() << "no error";
  } catch (const loom::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--attention must be auto, full or flash, not 'fast'"), std::string::npos) << e.what();
  }
}

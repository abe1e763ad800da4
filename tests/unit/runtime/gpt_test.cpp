// gpt_test.cpp — the gpt's backward tells the gradient exchange when each gradient is final: every
// parameter exactly once, and what it holds then is what it holds at the end (nothing of
// backward writes it later), with and without recomputation; the head first, the embeddings last.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gpt_config.hpp"
#include "loom/rt/nn/gpt.hpp"

using loom::rt::Gpt;
using loom::rt::GptConfig;
using loom::rt::Tensor;

TEST(GptBackward, ReportsEachGradientOnceWhenItIsFinal) {
  const GptConfig c = loom::rt::test::small_gpt(16, 2, 32, 0.1f);
  for (bool recompute : {false, true}) {
    Gpt m(c, 3);
    m.set_recompute(recompute);
    const int batch = 3;
    std::mt19937 rng(5);
    std::vector<int32_t> tok(static_cast<size_t>(batch) * c.context), tgt(tok.size());
    for (size_t i = 0; i < tok.size(); ++i) {
      tok[i] = static_cast<int32_t>(rng() % 37);
      tgt[i] = static_cast<int32_t>(rng() % 37);
    }
    for (int step = 0; step < 2; ++step) {  // the second over gradients the first left behind
      m.forward(tok, tgt, batch, true);
      std::vector<size_t> order;
      std::vector<Tensor> seen(m.params().size());
      m.backward([&](size_t i) {
        order.push_back(i);
        seen.at(i) = m.params()[i].grad.clone();
      });
      ASSERT_EQ(order.size(), m.params().size()) << "recompute " << recompute;
      EXPECT_EQ(order.front(), m.params().size() - 1);  // the head's weight
      EXPECT_EQ(order.back(), 1u);                      // the position embeddings
      for (size_t i = 0; i < m.params().size(); ++i) {
        const Tensor& g = m.params()[i].grad;
        ASSERT_TRUE(seen[i].defined()) << m.params()[i].name << " never reported";
        EXPECT_EQ(std::memcmp(seen[i].f32(), g.f32(), g.bytes()), 0)
            << m.params()[i].name << " changed after it was reported (recompute " << recompute << ")";
      }
      for (auto& p : m.params())
        for (int64_t k = 0; k < p.value.numel(); ++k) p.value.f32()[k] -= 0.05f * p.grad.f32()[k];
    }
  }
}

// Distillation: the gradient of the mixed loss (alpha T^2 KL against a teacher's soft targets +
// (1 - alpha) CE) through the whole model, against central finite differences of that loss.
TEST(GptDistill, SoftTargetGradientMatchesFiniteDifferences) {
  const GptConfig c = loom::rt::test::small_gpt(6, 2, 16, 0.0f);
  Gpt student(c, 7), teacher(c, 11);
  const int batch = 2;
  std::mt19937 rng(9);
  std::vector<int32_t> tok(static_cast<size_t>(batch) * c.context), tgt(tok.size());
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>(rng() % 37), tgt[i] = static_cast<int32_t>(rng() % 37);
  teacher.forward(tok, tgt, batch, false);
  const Tensor soft_logits = teacher.logits().clone();
  // The soft targets are in the loss: alpha 1 against the student's own logits is a KL of 0.
  const double hard = student.forward(tok, tgt, batch, false);
  const Tensor own = student.logits().clone();
  const loom::rt::SoftTargets self{own.f32(), 2.0f, 1.0f};
  EXPECT_GT(hard, 1.0);
  EXPECT_NEAR(student.forward(tok, tgt, batch, false, 0, &self), 0.0, 1e-6);
  for (float temperature : {1.0f, 3.0f}) {
    const loom::rt::SoftTargets soft{soft_logits.f32(), temperature, 0.7f};
    student.forward(tok, tgt, batch, true, 0, &soft);
    student.backward();
    for (size_t pi : {size_t{0}, size_t{4}, student.params().size() - 1}) {  // wte, a block's c_attn, lm_head
      auto& p = student.params()[pi];
      const Tensor grad = p.grad.clone();
      for (int64_t k : {int64_t{0}, p.value.numel() / 3, p.value.numel() - 1}) {
        float& w = p.value.f32()[k];
        const float saved = w, h = 1e-2f;
        w = saved + h;
        const double up = student.forward(tok, tgt, batch, false, 0, &soft);
        w = saved - h;
        const double down = student.forward(tok, tgt, batch, false, 0, &soft);
        w = saved;
        const double numeric = (up - down) / (2.0 * h);
        EXPECT_NEAR(grad.f32()[k], numeric, 2e-3 + 0.03 * std::fabs(numeric)) << p.name << "[" << k << "] at T " << temperature;
      }
    }
  }
}

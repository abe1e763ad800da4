// gpt_test.cpp — the gpt's backward tells the gradient exchange when each gradient is final: every
// parameter exactly once, and what it holds then is what it holds at the end (nothing of
// backward writes it later), with and without recomputation; the head first, the embeddings last.
#include <gtest/gtest.h>

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

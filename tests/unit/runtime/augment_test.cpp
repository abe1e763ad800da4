// augment_test.cpp — loom-train's augmentation and synthetic samples (io/augment.hpp): the
// --augment grammar, shifts and flips that move pixels as they say, draws that depend on the
// sample and epoch and not on how a batch is split, and within-class mixup samples.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/rt/error.hpp"
#include "loom/rt/io/augment.hpp"

using namespace loom::rt;

namespace {

// n images of 4x4, class i % classes; image i holds one bright pixel at (1, 0) and its class
// number / 10 everywhere else.
Dataset tiny(int n, int classes) {
  Dataset d;
  d.rows = d.cols = 4;
  d.classes = classes;
  d.images = Tensor::empty({n, 16});
  for (int i = 0; i < n; ++i) {
    d.labels.push_back(i % classes);
    for (int p = 0; p < 16; ++p) d.images.f32()[i * 16 + p] = static_cast<float>(i % classes) / 10;
    d.images.f32()[i * 16 + 4] = 1.0f;
  }
  return d;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

}  // namespace

TEST(Augment, ParsesItsGrammarAndRefusesTheRest) {
  const AugmentConfig a = parse_augment("shift:2,flip,noise:0.1");
  EXPECT_EQ(a.shift, 2);
  EXPECT_TRUE(a.flip);
  EXPECT_FLOAT_EQ(a.noise, 0.1f);
  EXPECT_FALSE(parse_augment("none").any());
  for (const char* bad : {"shift:0", "shift:x", "shift", "rotate", "noise:2", "flip:1", "shift:1,,flip"})
    EXPECT_THROW(parse_augment(bad), Error) << bad;
}

TEST(Augment, ShiftsByAtMostNAndFlipsMirror) {
  const Dataset d = tiny(64, 1);
  const auto order = iota(64);
  Tensor x;
  std::vector<int32_t> y;
  BatchSource shift(d, parse_augment("shift:1"), 0, 7);
  shift.gather(order, 0, 64, 0, &x, &y);
  int moved = 0;
  for (int i = 0; i < 64; ++i) {
    int at = -1;
    for (int p = 0; p < 16; ++p)
      if (x.f32()[i * 16 + p] == 1.0f) at = p;
    if (at < 0) continue;  // shifted off the left edge
    EXPECT_LE(std::abs(at / 4 - 1), 1) << "sample " << i;
    EXPECT_LE(at % 4, 1) << "sample " << i;
    moved += at != 4;
  }
  EXPECT_GT(moved, 20);
  BatchSource flip(d, parse_augment("flip"), 0, 7);
  flip.gather(order, 0, 64, 0, &x, &y);
  int flipped = 0;
  for (int i = 0; i < 64; ++i) {
    const bool left = x.f32()[i * 16 + 4] == 1.0f, right = x.f32()[i * 16 + 7] == 1.0f;
    EXPECT_NE(left, right) << "sample " << i;
    flipped += right;
  }
  EXPECT_GT(flipped, 16);
  EXPECT_LT(flipped, 48);
}

TEST(Augment, DrawsDependOnSampleAndEpochNotOnTheBatchSplit) {
  const Dataset d = tiny(32, 2);
  BatchSource s(d, parse_augment("shift:1,flip,noise:0.05"), 8, 3);
  ASSERT_EQ(s.size(), 40);
  const auto order = epoch_order(s.size(), 3, 0);
  Tensor whole, a, b;
  std::vector<int32_t> y, ya, yb;
  s.gather(order, 0, 40, 0, &whole, &y);
  s.gather(order, 0, 13, 0, &a, &ya);
  s.gather(order, 13, 40, 0, &b, &yb);
  for (int i = 0; i < 13 * 16; ++i) ASSERT_EQ(whole.f32()[i], a.f32()[i]);
  for (int i = 0; i < 27 * 16; ++i) ASSERT_EQ(whole.f32()[13 * 16 + i], b.f32()[i]);
  Tensor next;
  s.gather(order, 0, 40, 1, &next, &y);
  int differ = 0;
  for (int i = 0; i < 40 * 16; ++i) differ += whole.f32()[i] != next.f32()[i];
  EXPECT_GT(differ, 40);  // another epoch, other draws
}

TEST(Augment, SyntheticSamplesMixImagesOfOneClass) {
  const Dataset d = tiny(30, 3);
  BatchSource s(d, AugmentConfig{}, 50, 5);
  const auto order = iota(s.size());
  Tensor x;
  std::vector<int32_t> y;
  s.gather(order, 30, 80, 0, &x, &y);
  for (int i = 0; i < 50; ++i) {
    ASSERT_GE(y[static_cast<size_t>(i)], 0);
    // Every image of a class is the same, so a mix of two of them is that image.
    EXPECT_FLOAT_EQ(x.f32()[i * 16], static_cast<float>(y[static_cast<size_t>(i)]) / 10) << "sample " << i;
    EXPECT_FLOAT_EQ(x.f32()[i * 16 + 4], 1.0f);
  }
  EXPECT_THROW(BatchSource(d, AugmentConfig{}, -1, 5), Error);
}

TEST(Augment, SubsetIsSeededAndInRange) {
  const Dataset d = tiny(100, 10);
  const Dataset a = subset(d, 20, 1), b = subset(d, 20, 1), c = subset(d, 20, 2);
  EXPECT_EQ(a.size(), 20);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(a.labels, c.labels);
  EXPECT_THROW(subset(d, 101, 1), Error);
  EXPECT_THROW(subset(d, 0, 1), Error);
}

// vec_test.cpp — the vectorised pieces the CPU layers are built from (vec.hpp) against double
// precision references: the lane reductions at every length around their 16 lanes (the tails),
// the GELU and its derivative, and the layers that use them (LayerNorm, the fc layer's bias and
// GELU, the bias loops, the cross-entropy), whose results must not depend on the number of threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "loom/rt/error.hpp"
#include "loom/rt/tensor/finite.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/tensor.hpp"
#include "loom/rt/tensor/vec.hpp"
#include "nn/gpt_kernels.hpp"

namespace vec = loom::rt::vec;
namespace cpu = loom::rt::cpu;
namespace gptk = loom::rt::gptk;
using loom::rt::Tensor;

namespace {

std::vector<float> normal(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

Tensor tensor(std::vector<int64_t> shape, const std::vector<float>& v) {
  Tensor t = Tensor::empty(std::move(shape));
  std::copy(v.begin(), v.end(), t.f32());
  return t;
}

double phi(double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); }

// Threads for the OpenMP loops (they run only with oneDNN's GEMM and more than one thread).
struct Threads {
  explicit Threads(int n) : before(cpu::threads()) { cpu::set_threads(n); }
  ~Threads() { cpu::set_threads(before); }
  int before;
};

}  // namespace

TEST(Vec, ReductionsMatchDoublePrecisionAtEveryLength) {
  const std::vector<float> a = normal(80, 1), b = normal(80, 2);
  for (int n = 0; n <= 70; ++n) {
    double s = 0, dot = 0, mx = -1e30, es = 0;
    for (int k = 0; k < n; ++k) s += a[k], dot += double{a[k]} * b[k], mx = std::fmax(mx, a[k]);
    const double m = n ? s / n : 0.0;
    double sq = 0;
    for (int k = 0; k < n; ++k) sq += (a[k] - m) * (a[k] - m), es += std::exp(a[k] - 0.5);
    const float tol = 1e-5f * (1 + n);
    EXPECT_NEAR(vec::sum(a.data(), n), s, tol) << n;
    EXPECT_NEAR(vec::dot(a.data(), b.data(), n), dot, tol) << n;
    EXPECT_NEAR(vec::sum_sq_dev(a.data(), static_cast<float>(m), n), sq, tol) << n;
    EXPECT_EQ(vec::max(a.data(), n, -1e30f), static_cast<float>(mx)) << n;
    std::vector<float> y(static_cast<size_t>(n) + 1, -7.0f);
    EXPECT_NEAR(vec::exp_sum(a.data(), y.data(), 0.5f, n), es, 1e-5 * es + 1e-6) << n;
    for (int k = 0; k < n; ++k) EXPECT_NEAR(y[k], std::exp(a[k] - 0.5), 2e-7 * std::exp(a[k] - 0.5)) << n << " " << k;
    EXPECT_EQ(y[n], -7.0f) << "exp_sum wrote past its " << n << " values";
  }
}

TEST(Vec, GeluAndItsDerivativeMatchTheErfForm) {
  for (double x = -9.0; x <= 9.0; x += 0.01) {
    const vec::Gelu g = vec::gelu(static_cast<float>(x));
    const double dy = phi(x) + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
    EXPECT_NEAR(g.y, x * phi(x), 4e-7 * (1 + std::fabs(x))) << x;
    EXPECT_NEAR(g.dy, dy, 4e-7 * (1 + std::fabs(x))) << x;
    EXPECT_NEAR(vec::normal_cdf(static_cast<float>(x)), phi(x), 2e-7) << x;
  }
}

TEST(Vec, LayerNormMatchesDoublePrecisionWithATail) {
  const int n = 45, c = 37;  // 37 = two lanes of 16 and a tail of 5
  const std::vector<float> xv = normal(n * c, 3, 2.0f), gv = normal(c, 4), bv = normal(c, 5);
  Tensor x = tensor({n, c}, xv), g = tensor({c}, gv), b = tensor({c}, bv), y, mean, rstd;
  gptk::layernorm_fwd(x, g, b, y, mean, rstd);
  for (int r = 0; r < n; ++r) {
    double m = 0, v = 0;
    for (int k = 0; k < c; ++k) m += xv[r * c + k];
    m /= c;
    for (int k = 0; k < c; ++k) v += (xv[r * c + k] - m) * (xv[r * c + k] - m);
    const double s = 1.0 / std::sqrt(v / c + 1e-5);
    EXPECT_NEAR(mean.f32()[r], m, 1e-6) << r;
    EXPECT_NEAR(rstd.f32()[r], s, 1e-6 * s) << r;
    for (int k = 0; k < c; ++k)
      EXPECT_NEAR(y.f32()[r * c + k], (xv[r * c + k] - m) * s * gv[k] + bv[k], 1e-5) << r << " " << k;
  }
}

TEST(Vec, BiasGeluKeepsTheDerivativeAndTheBiasLoopsIgnoreTheThreads) {
  const int n = 300, c = 77;
  const std::vector<float> xv = normal(n * c, 6, 3.0f), bv = normal(c, 7);
  Tensor x = tensor({n, c}, xv), bias = tensor({c}, bv), y;
  gptk::bias_gelu_fwd(x, bias, y);
  for (int i = 0; i < n * c; ++i) {
    const double v = double{xv[i]} + bv[i % c];
    EXPECT_NEAR(y.f32()[i], v * phi(v), 1e-6 * (1 + std::fabs(v))) << i;
    EXPECT_NEAR(x.f32()[i], phi(v) + v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI), 1e-6 * (1 + std::fabs(v))) << i;
  }
  // bias_grad: each column's sum in row order, the same bits on 1 and 2 threads; bias_act likewise.
  std::vector<float> in_order(c, 0.0f), db1(c, 0.0f), db2(c, 0.0f);
  for (int r = 0; r < n; ++r)
    for (int k = 0; k < c; ++k) in_order[k] += xv[r * c + k];
  std::vector<float> y1 = xv, y2 = xv;
  {
    Threads one(1);
    cpu::bias_grad(xv.data(), db1.data(), n, c);
    cpu::bias_act(y1.data(), bv.data(), n, c, cpu::Act::kGelu);
  }
  {
    Threads two(2);
    cpu::bias_grad(xv.data(), db2.data(), n, c);
    cpu::bias_act(y2.data(), bv.data(), n, c, cpu::Act::kGelu);
  }
  EXPECT_EQ(db1, in_order);
  EXPECT_EQ(db2, in_order);
  EXPECT_EQ(y1, y2);
  for (int i = 0; i < n * c; ++i) EXPECT_NEAR(y1[i], y.f32()[i], 1e-6 * (1 + std::fabs(y1[i]))) << i;
}

TEST(Vec, CrossEntropyOfAWideVocabularyMatchesDoublePrecisionOnAnyThreads) {
  const int rows = 40, cols = 5003;  // wide rows, and a tail after the lanes
  const std::vector<float> x = normal(static_cast<size_t>(rows) * cols, 8, 4.0f);
  std::vector<int32_t> labels(rows);
  for (int r = 0; r < rows; ++r) labels[r] = (r * 977) % cols;
  double want = 0;
  std::vector<double> grad(x.size());
  for (int r = 0; r < rows; ++r) {
    const float* xr = &x[static_cast<size_t>(r) * cols];
    double mx = xr[0], sum = 0;
    for (int c = 0; c < cols; ++c) mx = std::fmax(mx, xr[c]);
    for (int c = 0; c < cols; ++c) sum += std::exp(xr[c] - mx);
    want += std::log(sum) + mx - xr[labels[r]];
    for (int c = 0; c < cols; ++c) grad[static_cast<size_t>(r) * cols + c] = std::exp(xr[c] - mx) / sum / rows;
    grad[static_cast<size_t>(r) * cols + labels[r]] -= 1.0 / rows;
  }
  want /= rows;
  std::vector<float> d1(x.size()), d2(x.size());
  double l1, l2, eval;
  {
    Threads one(1);
    l1 = cpu::softmax_xent(x.data(), labels.data(), d1.data(), rows, cols);
  }
  {
    Threads two(2);
    l2 = cpu::softmax_xent(x.data(), labels.data(), d2.data(), rows, cols);
    eval = cpu::softmax_xent(x.data(), labels.data(), nullptr, rows, cols);
  }
  EXPECT_NEAR(l1, want, 1e-5 * std::fabs(want));
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(l1, eval);
  EXPECT_EQ(d1, d2);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(d1[i], grad[i], 1e-9 + 2e-6 * std::fabs(grad[i])) << i;
  labels[7] = cols;
  EXPECT_THROW(cpu::softmax_xent(x.data(), labels.data(), d1.data(), rows, cols), loom::rt::Error);
}

// all_finite: every NaN and infinity found at every position of every length around the vector
// width, from a pointer that is not float-aligned (a request's bytes), and the extremes of the
// finite range (largest, smallest subnormal, -0) accepted.
TEST(Vec, AllFiniteFindsEveryNanAndInfinityAtAnyPositionAndAlignment) {
  const float bad[] = {std::nanf(""), -std::nanf(""), INFINITY, -INFINITY};
  const float edge[] = {3.4028235e38f, -3.4028235e38f, 1e-45f, -0.0f, 0.0f};
  std::vector<unsigned char> bytes(4 * 70 + 1);
  for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 31, 33, 64, 70}) {
    std::vector<float> v = normal(static_cast<size_t>(n), 7);
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = edge[i % 5];
    std::memcpy(bytes.data() + 1, v.data(), v.size() * 4);
    EXPECT_TRUE(cpu::all_finite(bytes.data() + 1, n)) << "n=" << n;
    for (int64_t at = 0; at < n; ++at)
      for (float b : bad) {
        std::vector<float> w = v;
        w[static_cast<size_t>(at)] = b;
        std::memcpy(bytes.data() + 1, w.data(), w.size() * 4);
        EXPECT_FALSE(cpu::all_finite(bytes.data() + 1, n)) << "n=" << n << " at=" << at << " value " << b;
        EXPECT_FALSE(cpu::all_finite(w.data(), n)) << "n=" << n << " at=" << at;
      }
  }
}

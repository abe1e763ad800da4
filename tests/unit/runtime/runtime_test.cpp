// runtime_test.cpp — libloomrt on CPU: tensors and the caching allocator, kernels against naive
// references, MLP gradients against finite differences, optimizer steps against PyTorch's
// formulas, IDX reading, shuffling, and the HDF5 model file including corrupt files.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "loom/rt/io/data.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/nn/mlp.hpp"
#include "loom/rt/io/model_io.hpp"
#include "loom/rt/nn/optim.hpp"

namespace loom::rt {
namespace {

std::string tmp_path(const std::string& name) {
  return std::string(::testing::TempDir()) + "/loomrt-" + std::to_string(getpid()) + "-" + name;
}

TEST(Tensor, ViewsShareStorageAndAllocatorReuses) {
  Tensor t = Tensor::empty({4, 3});
  for (int i = 0; i < 12; ++i) t.f32()[i] = static_cast<float>(i);
  Tensor r = t.rows(1, 3);
  EXPECT_EQ(r.shape_str(), "[2,3]");
  EXPECT_EQ(r.f32()[0], 3.0f);
  r.f32()[0] = 42;
  EXPECT_EQ(t.f32()[3], 42.0f);
  Tensor v = t.reshape({12});
  EXPECT_EQ(v.f32()[3], 42.0f);
  EXPECT_THROW(t.reshape({5}), Error);
  EXPECT_THROW(t.rows(2, 9), Error);
  void* p = t.data<char>();
  t = Tensor();
  r = Tensor();
  v = Tensor();
  Tensor again = Tensor::empty({4, 3});
  EXPECT_EQ(again.data<char>(), p) << "the caching allocator did not reuse the block";
  EXPECT_THROW(Tensor::empty({2}, DType::kF32, Device::kCuda), Error);
}

// A backing store of limited capacity for the allocator's policy: blocks handed out and back.
struct Backing {
  static inline size_t capacity = 0, outstanding = 0, fresh_calls = 0, given_back = 0;
  static inline std::map<void*, size_t> sizes;
  static void* fresh(size_t bytes) {
    ++fresh_calls;
    if (outstanding + bytes > capacity) return nullptr;
    void* p = std::malloc(bytes);
    sizes[p] = bytes;
    outstanding += bytes;
    return p;
  }
  static void give_back(void* p) {
    ++given_back;
    outstanding -= sizes.at(p);
    sizes.erase(p);
    std::free(p);
  }
};

TEST(Allocator, ReusesBlocksAndHoldsNoMoreThanEverInUse) {
  Backing::capacity = size_t{1} << 30;
  Allocator a(Backing::fresh, Backing::give_back, 64, true);
  void* p = a.allocate(1000);
  a.release(p, 1000);
  EXPECT_EQ(a.allocate(1000), p) << "a block of the same size is reused";
  a.release(p, 1000);
  EXPECT_EQ(Backing::fresh_calls, 1u);
  // Steps whose three tensors change size every 5 steps, as a rank's share does under the
  // balancer: without giving stale sizes back the cache would hold every size ever used.
  for (int step = 0; step < 200; ++step) {
    const size_t rows = 100 + static_cast<size_t>(step / 5) % 23;
    std::vector<std::pair<void*, size_t>> held;
    for (size_t width : {64, 256, 1024}) held.emplace_back(a.allocate(rows * width * 4), rows * width * 4);
    ASSERT_LE(a.live_bytes() + a.cached_bytes(), a.high_water_bytes()) << "step " << step;
    for (auto& [q, n] : held) a.release(q, n);
  }
  EXPECT_EQ(Backing::outstanding, a.live_bytes() + a.cached_bytes());
  EXPECT_LE(Backing::outstanding, a.high_water_bytes());
  EXPECT_GT(Backing::given_back, 0u);
  const size_t steady = Backing::fresh_calls;
  const size_t last = (100 + (199 / 5) % 23) * 1024 * 4;  // the last step's largest tensor
  for (int step = 0; step < 5; ++step) {  // the same size again: nothing new
    void* q = a.allocate(last);
    a.release(q, last);
  }
  EXPECT_EQ(Backing::fresh_calls, steady);
}

TEST(Allocator, OutOfMemoryGivesTheCacheBackAndTriesAgain) {
  Backing::capacity = 4096;
  Backing::outstanding = Backing::fresh_calls = Backing::given_back = 0;
  {
    Allocator a(Backing::fresh, Backing::give_back, 64, true);
    void* x = a.allocate(2048);
    void* y = a.allocate(1024);
    a.release(x, 2048);
    a.release(y, 1024);  // 3 KiB cached, the most ever in use
    Backing::capacity = 1500;  // the device shrinks under us (another process took memory)
    // 512 bytes fit under the mark once the oldest block (2 KiB) is back; the store is still
    // full, so the rest of the cache goes back and the allocation is tried again.
    EXPECT_NE(a.allocate(512), nullptr);
    EXPECT_EQ(Backing::given_back, 2u);
    EXPECT_EQ(a.cached_bytes(), 0u);
    try {
      a.allocate(4096);
      FAIL() << "no error past the backing store's capacity";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("out of memory allocating 4096 bytes (512 bytes in use)"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(Backing::outstanding, 512u) << "the destructor gives back what was cached, not what is in use";
  for (auto& [p, n] : Backing::sizes) std::free(p);
  Backing::sizes.clear();
}

TEST(Tensor, HalfAndBfloat16ConversionsRoundToNearestEven) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);   // rounds up to infinity
  EXPECT_EQ(float_to_half(5.9604645e-08f), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3c00);  // a tie rounds to even
  EXPECT_EQ(float_to_half(1.0f + 3.0f / 2048), 0x3c02);
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3f80);  // tie to even
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), 0x3f82);
  // Every half value survives half -> float -> half.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaN payloads
    ASSERT_EQ(float_to_half(half_to_float(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
  Tensor t = Tensor::empty({3});
  t.f32()[0] = 0.1f, t.f32()[1] = -3.5f, t.f32()[2] = 1e-3f;
  Tensor back = t.to(DType::kBF16).to(DType::kF32);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(back.f32()[i], t.f32()[i], std::fabs(t.f32()[i]) / 128);
  EXPECT_EQ(t.to(DType::kF16).dtype(), DType::kF16);
  EXPECT_THROW(t.to(DType::kI8), Error);
}

// The array conversions (F16C where the CPU has it) give what the scalar ones give, bit for bit:
// every float of a sweep over all exponents (subnormals, ties, overflow), n not a multiple of 8.
TEST(Tensor, ArrayHalfConversionsEqualTheScalarOnes) {
  std::vector<float> in;
  std::mt19937 rng(5);
  for (uint32_t e = 0; e < 255; ++e)
    for (int k = 0; k < 40; ++k) {
      uint32_t bits = (e << 23) | (rng() & 0x7fffff) | (k & 1 ? 0x80000000u : 0u);
      if (k == 2) bits = (e << 23) | 0x1000;  // a tie for the 13 bits half drops
      float f;
      std::memcpy(&f, &bits, 4);
      in.push_back(f);
    }
  in.push_back(INFINITY);
  in.push_back(-INFINITY);
  std::vector<uint16_t> h(in.size());
  floats_to_halves(in.data(), h.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(h[i], float_to_half(in[i])) << in[i];
  std::vector<float> back(in.size()), rounded = in;
  halves_to_floats(h.data(), back.data(), h.size());
  round_to_half(rounded.data(), rounded.size());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(back[i], half_to_float(h[i])) << i;
    ASSERT_EQ(rounded[i], back[i]) << i;
  }
}

TEST(Kernels, GemmMatchesNaive) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int m = 7, n = 5, k = 9;
      std::vector<float> a(m * k), b(k * n), c(m * n, 0.5f), ref(m * n);
      for (auto& v : a) v = u(rng);
      for (auto& v : b) v = u(rng);
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double s = 0;
          for (int l = 0; l < k; ++l) s += (ta ? a[l * m + i] : a[i * k + l]) * (tb ? b[j * k + l] : b[l * n + j]);
          ref[i * n + j] = static_cast<float>(2 * s + 0.25);
        }
      cpu::gemm(ta, tb, m, n, k, 2.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.5f, c.data(), n);
      for (int i = 0; i < m * n; ++i) EXPECT_NEAR(c[i], ref[i], 1e-5) << ta << tb << i;
    }
}

// A matrix of one stored row may come with any leading dimension (a view's stride over a
// dimension of 1), and a product over K = 0 is beta C: both computed, not left unwritten.
TEST(Kernels, GemmOfOneRowOperandsAndEmptyProducts) {
  std::vector<float> a = {1, 2, 3}, b = {4, 5, 6}, c(9, -1.0f);
  cpu::gemm(true, false, 3, 3, 1, 1.0f, a.data(), 1, b.data(), 1, 0.0f, c.data(), 3);  // [3x1] x [1x3], lds of 1
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(c[i * 3 + j], a[i] * b[j]) << i << j;
  std::vector<float> d(6, 7.0f);
  cpu::gemm(false, false, 2, 3, 0, 1.0f, a.data(), 0, b.data(), 3, 0.5f, d.data(), 3);
  for (float v : d) EXPECT_EQ(v, 3.5f);
  EXPECT_THROW(cpu::gemm(false, false, 2, 3, 2, 1.0f, a.data(), 1, b.data(), 3, 0.0f, d.data(), 3), Error);
}

TEST(Kernels, SoftmaxXentGradientIsNumericallyRight) {
  std::vector<float> x = {0.1f, -1.0f, 2.0f, 0.5f, 0.0f, 0.3f}, d(6);
  std::vector<int32_t> y = {2, 0};
  double loss = cpu::softmax_xent(x.data(), y.data(), d.data(), 2, 3);
  for (int i = 0; i < 6; ++i) {
    auto xp = x, xm = x;
    xp[i] += 1e-3f;
    xm[i] -= 1e-3f;
    double num = (cpu::softmax_xent(xp.data(), y.data(), nullptr, 2, 3) - cpu::softmax_xent(xm.data(), y.data(), nullptr, 2, 3)) / 2e-3;
    EXPECT_NEAR(d[i], num, 1e-3) << i;
  }
  EXPECT_GT(loss, 0);
  // Two rows of a global batch of 8: the same loss, a quarter of the gradient (their part of the
  // global mean's).
  std::vector<float> part(6);
  EXPECT_EQ(cpu::softmax_xent(x.data(), y.data(), part.data(), 2, 3, 8), loss);
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(part[i], d[i] / 4) << i;
  std::vector<float> t = {0.3f, 0.2f, -1.0f, 1.0f, 0.0f, 0.5f}, dd(6), dpart(6);
  EXPECT_EQ(cpu::distill_xent(x.data(), t.data(), y.data(), dd.data(), 2, 3, 2.0f, 0.5f),
            cpu::distill_xent(x.data(), t.data(), y.data(), dpart.data(), 2, 3, 2.0f, 0.5f, 8));
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(dpart[i], dd[i] / 4) << i;
  std::vector<int32_t> bad = {3, 0};
  EXPECT_THROW(cpu::softmax_xent(x.data(), bad.data(), nullptr, 2, 3), Error);
}

TEST(Mlp, BackwardMatchesFiniteDifferences) {
  Mlp m({5, 4, 3}, 11);
  Tensor x = Tensor::empty({3, 5});
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (int i = 0; i < 15; ++i) x.f32()[i] = nd(rng);
  std::vector<int32_t> y = {0, 2, 1};
  auto loss_of = [&]() {
    const Tensor& l = m.forward(x);
    return cpu::softmax_xent(l.f32(), y.data(), nullptr, 3, 3);
  };
  m.zero_grad();
  const Tensor& logits = m.forward(x);
  Tensor d = Tensor::empty({3, 3});
  cpu::softmax_xent(logits.f32(), y.data(), d.f32(), 3, 3);
  m.backward(d);
  double worst = 0;
  for (auto& p : m.params())
    for (int64_t i = 0; i < p.value.numel(); ++i) {
      float keep = p.value.f32()[i];
      p.value.f32()[i] = keep + 1e-3f;
      double lp = loss_of();
      p.value.f32()[i] = keep - 1e-3f;
      double lm = loss_of();
      p.value.f32()[i] = keep;
      worst = std::max(worst, std::fabs((lp - lm) / 2e-3 - p.grad.f32()[i]));
    }
  EXPECT_LT(worst, 2e-3) << "largest gradient difference " << worst;
  EXPECT_EQ(m.params()[0].name, "fc1.weight");
  EXPECT_EQ(m.params()[0].value.shape_str(), "[4,5]");
  EXPECT_EQ(m.params()[3].name, "fc2.bias");
  Tensor wrong = Tensor::empty({2, 4});
  EXPECT_THROW(m.forward(wrong), Error);
}

TEST(Mlp, WidthsAreChecked) {
  EXPECT_EQ(parse_widths("784,512,10"), (std::vector<int>{784, 512, 10}));
  for (const char* bad : {"", "784", "784,,10", "784,-1,10", "a,b", "784,0,10"}) EXPECT_THROW(parse_widths(bad), Error) << bad;
}

TEST(Optim, SgdMomentumAndAdamWFollowPyTorch) {
  std::vector<Param> ps(1);
  ps[0] = {"w", Tensor::empty({1}), Tensor::empty({1})};
  ps[0].value.f32()[0] = 1.0f;
  OptimConfig c;
  c.momentum = 0.9f;
  Optimizer sgd(c);
  ps[0].grad.f32()[0] = 0.5f;
  sgd.step(ps, 0.1f);  // buf = 0.5; w = 1 - 0.05
  EXPECT_FLOAT_EQ(ps[0].value.f32()[0], 0.95f);
  sgd.step(ps, 0.1f);  // buf = 0.9*0.5 + 0.5 = 0.95; w = 0.95 - 0.095
  EXPECT_FLOAT_EQ(ps[0].value.f32()[0], 0.855f);
  ps[0].value.f32()[0] = 1.0f;
  OptimConfig a;
  a.kind = OptimKind::kAdamw;
  a.weight_decay = 0.01f;
  Optimizer adam(a);
  adam.step(ps, 0.1f);  // w = 1*(1-0.001) - 0.1 * 1 (first Adam step moves by lr)
  EXPECT_NEAR(ps[0].value.f32()[0], 0.999f - 0.1f, 1e-6);
  EXPECT_FLOAT_EQ(lr_at(0, 100, 1.0f, 10, Schedule::kCosine), 0.1f);
  EXPECT_FLOAT_EQ(lr_at(10, 100, 1.0f, 10, Schedule::kCosine), 1.0f);
  EXPECT_NEAR(lr_at(100, 100, 1.0f, 10, Schedule::kCosine), 0.0f, 1e-6);
  EXPECT_FLOAT_EQ(lr_at(50, 100, 1.0f, 0, Schedule::kConstant), 1.0f);
  ps[0].grad.f32()[0] = 10.0f;
  EXPECT_FLOAT_EQ(clip_grad_norm(ps, 1.0f), 10.0f);
  EXPECT_NEAR(ps[0].grad.f32()[0], 1.0f, 1e-5);
}

// The update loops run as AVX2 clones over whole vectors: every element, the tail after the last
// full vector included, must follow the scalar rule (PyTorch's) step after step.
TEST(Optim, EveryElementFollowsTheRule) {
  const int64_t n = 1003;  // not a multiple of any vector width
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  struct Case {
    OptimKind kind;
    float momentum;
    bool nesterov;
  };
  for (const Case& k : {Case{OptimKind::kSgd, 0.0f, false}, Case{OptimKind::kSgd, 0.9f, false}, Case{OptimKind::kSgd, 0.9f, true},
                        Case{OptimKind::kAdamw, 0, false}}) {
    OptimConfig c;
    c.kind = k.kind;
    c.momentum = k.momentum;
    c.nesterov = k.nesterov;
    c.weight_decay = 0.01f;
    Optimizer opt(c);
    std::vector<Param> ps(1);
    ps[0] = {"w", Tensor::empty({n}), Tensor::empty({n})};
    std::vector<double> w(n), m(n, 0), v(n, 0);
    for (int64_t i = 0; i < n; ++i) w[i] = ps[0].value.f32()[i] = nd(rng);
    const double lr = 0.01;
    for (int t = 1; t <= 3; ++t) {
      for (int64_t i = 0; i < n; ++i) ps[0].grad.f32()[i] = nd(rng);
      opt.step(ps, static_cast<float>(lr));
      for (int64_t i = 0; i < n; ++i) {
        const double g = ps[0].grad.f32()[i], wd = c.weight_decay;
        if (c.kind == OptimKind::kAdamw) {
          w[i] *= 1 - lr * wd;
          m[i] = 0.9 * m[i] + 0.1 * g;
          v[i] = 0.999 * v[i] + 0.001 * g * g;
          const double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.999, t));
          w[i] -= lr * mh / (std::sqrt(vh) + 1e-8);
        } else {
          const double d = g + wd * w[i];
          m[i] = t == 1 ? d : k.momentum * m[i] + d;
          w[i] -= lr * (k.momentum == 0 ? d : k.nesterov ? d + k.momentum * m[i] : m[i]);
        }
        ASSERT_NEAR(ps[0].value.f32()[i], w[i], 1e-5 * (1 + std::fabs(w[i]))) << loom::word_of(k.kind) << " step " << t << " element " << i;
      }
    }
  }
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

TEST(Data, IdxReaderAndItsErrors) {
  std::string p = tmp_path("labels.gz");
  write_gz(p, {0, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9});
  Idx idx = read_idx(p, 1);
  EXPECT_EQ(idx.dims, std::vector<uint32_t>{3});
  EXPECT_EQ(idx.data, (std::vector<uint8_t>{7, 8, 9}));
  write_gz(p, {0, 0, 8, 1, 0, 0, 0, 5, 7, 8});
  EXPECT_THROW(read_idx(p, 1), Error);  // truncated
  write_gz(p, {0, 0, 9, 1, 0, 0, 0, 1, 7});
  EXPECT_THROW(read_idx(p, 1), Error);  // not unsigned bytes
  write_gz(p, {});
  EXPECT_THROW(read_idx(p, 1), Error);  // empty
  std::remove(p.c_str());
  try {
    load_fashion_mnist("/nonexistent", "train");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("apt-get install dataset-fashion-mnist"), std::string::npos);
  }
}

TEST(Data, EpochOrderIsASeededPermutation) {
  auto a = epoch_order(1000, 7, 0), b = epoch_order(1000, 7, 0), c = epoch_order(1000, 7, 1);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), 1000u);
}

TEST(ModelIo, RoundTripAndCorruptFiles) {
  Mlp m({6, 4, 3}, 2);
  std::string p = tmp_path("model.h5");
  save_model(p, m.config_json(), m.params());
  ModelFile f = load_model(p);
  EXPECT_EQ(f.format, "model");
  EXPECT_EQ(f.version, kFormatVersion);
  EXPECT_NE(f.config_json.find("\"layers\":[6,4,3]"), std::string::npos);
  ASSERT_EQ(f.params.size(), 4u);
  for (const auto& [name, t] : f.params) {
    const Param* orig = nullptr;
    for (const auto& q : m.params())
      if (q.name == name) orig = &q;
    ASSERT_NE(orig, nullptr) << name;
    for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.f32()[i], orig->value.f32()[i]);
  }
  // Flip one byte inside a dataset: the Fletcher32 checksum refuses it.
  std::string bytes;
  {
    std::ifstream in(p, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  float needle = m.params()[0].value.f32()[5];
  auto pos = bytes.find(std::string(reinterpret_cast<const char*>(&needle), 4));
  ASSERT_NE(pos, std::string::npos);
  std::string flipped = bytes;
  flipped[pos] ^= 0x40;
  std::string q = tmp_path("flipped.h5");
  std::ofstream(q, std::ios::binary) << flipped;
  EXPECT_THROW(load_model(q), Error);
  std::ofstream(q, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  EXPECT_THROW(load_model(q), Error);
  EXPECT_THROW(load_model(tmp_path("missing.h5")), Error);
  // No temporary file is left next to the model.
  EXPECT_NE(access((p + ".tmp." + std::to_string(getpid())).c_str(), F_OK), 0);
  std::remove(p.c_str());
  std::remove(q.c_str());
}

}  // namespace
}  // namespace loom::rt

// ---- collectives over the in-process transport: N ranks as threads

#include <thread>

#include "loom/rt/comm/comm.hpp"
#include "ranks_harness.hpp"

namespace loom::rt {
namespace {

TEST(Comm, RingAllreduceSumsOnEveryRank) {
  for (int p : {1, 2, 3, 4, 7})
    for (size_t n : {size_t{1}, size_t{5}, size_t{1000}, size_t{4099}})
      run_ranks(p, [&](Communicator& c) {
        std::vector<float> v(n);
        for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(c.rank() + 1) * static_cast<float>(i % 13);
        c.allreduce_sum(v.data(), n);
        const float ranks = static_cast<float>(p * (p + 1) / 2);
        for (size_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(v[i], ranks * static_cast<float>(i % 13)) << p << " " << n;
        if (p > 1) {  // a ring sends 2 (p-1)/p of the data per rank
          EXPECT_NEAR(static_cast<double>(c.bytes_sent()), 2.0 * (p - 1) / p * n * 4, 2.0 * p * 4);
        }
      });
}

TEST(Comm, HierarchicalAllreduceEqualsTheFlatSum) {
  struct Case {
    std::vector<int> nodes;
    bool hierarchical;
    const char* describe;
  };
  for (const Case& k : {Case{{0, 0, 1, 1}, true, "hierarchical: 2 nodes x 2 ranks"},
                        Case{{5, 9, 5, 9, 5, 9}, true, "hierarchical: 2 nodes x 3 ranks"},
                        Case{{0, 0, 0, 1, 1, 1, 2, 2, 2}, true, "hierarchical: 3 nodes x 3 ranks"},
                        Case{{0, 0, 1}, false, "ring over 3 ranks on 2 nodes"},  // uneven: flat ring
                        Case{{0, 1, 2}, false, "ring over 3 ranks on 3 nodes"},
                        Case{{0, 0, 0, 0}, false, "ring over 4 ranks"}}) {
    const int p = static_cast<int>(k.nodes.size());
    for (size_t n : {size_t{1}, size_t{7}, size_t{1001}})
      run_ranks(p, [&](Communicator& c) {
        c.set_nodes(k.nodes);
        EXPECT_EQ(c.hierarchical(), k.hierarchical);
        EXPECT_EQ(c.describe(), k.describe);
        std::vector<float> v(n);
        for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(c.rank() + 1) * static_cast<float>(i % 13);
        c.allreduce_sum(v.data(), n);
        const float ranks = static_cast<float>(p * (p + 1) / 2);
        for (size_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(v[i], ranks * static_cast<float>(i % 13)) << p << " " << n;
      });
  }
  run_ranks(2, [&](Communicator& c) { EXPECT_THROW(c.set_nodes({0, 1, 2}), Error); });
}

TEST(Comm, HierarchicalSendsLessAcrossNodes) {
  // 2 nodes x 2 ranks: each rank sends 1/2 of the data inside its node and 1/2 of its half
  // across; a flat ring over 4 ranks would send 3/2 of the data, half of its hops crossing.
  const size_t n = 4000;
  run_ranks(4, [&](Communicator& c) {
    c.set_nodes({0, 0, 1, 1});
    std::vector<float> v(n, 1.0f);
    c.allreduce_sum(v.data(), n);
    EXPECT_EQ(c.bytes_sent(), (n + n / 2) * 4);  // local RS+AG: n/2 + n/2; cross RS+AG: n/4 + n/4
    for (float x : v) ASSERT_EQ(x, 4.0f);
  });
}

// ZeRO's reduce-scatter and allgather, flat and hierarchical (2 nodes x 2 ranks, 3 x 2): each rank's
// chunk (own_chunk) holds the sum, the chunks tile the buffer, and the allgather brings every
// chunk back from its owner, fp32 and with fp16 payloads.
TEST(Comm, ReduceScatterAndAllgatherFlatAndHierarchical) {
  for (const std::vector<int>& nodes : {std::vector<int>{0, 0, 0, 0}, std::vector<int>{0, 0, 1, 1}, std::vector<int>{4, 4, 5, 5, 6, 6}}) {
    const int p = static_cast<int>(nodes.size());
    const size_t n = 4001;
    std::vector<std::pair<size_t, size_t>> chunks(static_cast<size_t>(p));
    run_ranks(p, [&](Communicator& c) {
      c.set_nodes(nodes);
      for (bool half : {false, true}) {
        std::vector<float> v(n);
        for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((c.rank() + 1) * (i % 7));
        size_t b = 0, k = 0, ob = 0, ok = 0;
        if (half) c.reduce_scatter_sum_half(v.data(), n, &b, &k);
        else c.reduce_scatter_sum(v.data(), n, &b, &k);
        c.own_chunk(n, &ob, &ok);
        EXPECT_EQ(b, ob);
        EXPECT_EQ(k, ok);
        chunks[static_cast<size_t>(c.rank())] = {b, k};
        const float ranks = static_cast<float>(p * (p + 1) / 2);
        for (size_t i = b; i < b + k; ++i) ASSERT_EQ(v[i], ranks * static_cast<float>(i % 7)) << p << " " << i;
        for (size_t i = 0; i < n; ++i)
          if (i < b || i >= b + k) v[i] = -1;  // what the allgather must overwrite
        c.allgather_chunks(v.data(), n);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(v[i], ranks * static_cast<float>(i % 7)) << p << " " << i;
      }
    });
    std::sort(chunks.begin(), chunks.end());
    size_t at = 0;
    for (const auto& [b, k] : chunks) {
      EXPECT_EQ(b, at) << "the chunks do not tile the buffer";
      at = b + k;
    }
    EXPECT_EQ(at, n);
  }
}

// Chunks of uneven sizes (a share of the model state by each rank's memory), one of them empty,
// on 2 and 3 ranks, with nodes that make the allreduce hierarchical: rank r's chunk holds the sum
// after the reduce-scatter, and every rank has every chunk after the allgather.
TEST(Comm, UnevenReduceScatterAndAllgather) {
  for (const std::vector<size_t>& counts : {std::vector<size_t>{2000, 1001}, std::vector<size_t>{1500, 0, 750},
                                            std::vector<size_t>{3, 7, 1, 5}}) {
    const int p = static_cast<int>(counts.size());
    size_t n = 0;
    for (size_t k : counts) n += k;
    run_ranks(p, [&](Communicator& c) {
      if (p == 4) c.set_nodes({0, 0, 1, 1});
      const size_t me = static_cast<size_t>(c.rank());
      size_t b = 0;
      for (size_t r = 0; r < me; ++r) b += counts[r];
      std::vector<float> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((c.rank() + 1) * (i % 7));
      c.reduce_scatter_sum_v(v.data(), counts);
      const float ranks = static_cast<float>(p * (p + 1) / 2);
      for (size_t i = b; i < b + counts[me]; ++i) ASSERT_EQ(v[i], ranks * static_cast<float>(i % 7)) << p << " " << i;
      for (size_t i = 0; i < n; ++i)
        if (i < b || i >= b + counts[me]) v[i] = -1;  // what the allgather must overwrite
      c.allgather_v(v.data(), counts);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(v[i], ranks * static_cast<float>(i % 7)) << p << " " << i;
    });
  }
  run_ranks(2, [](Communicator& c) {
    std::vector<float> v(4);
    EXPECT_THROW(c.allgather_v(v.data(), {4}), Error);  // one count for two ranks
  });
}

TEST(Comm, LargeBuffersArePipelinedInSegmentsWithTheSameSum) {
  // Buffers of several MiB run as up to 16 segments whose ring steps overlap (flat, and
  // hierarchical with its steps inside and across nodes); the sums and the bytes sent are those
  // of one plain ring, up to each segment's rounding of its chunks.
  struct Case {
    std::vector<int> nodes;
    size_t n;
    size_t bytes;  // what each rank sends
  };
  for (const Case& k : {Case{{0, 0, 0}, 1000003, 2 * 1000003 * 2 / 3 * 4},
                        Case{{0, 0, 1, 1}, 1500001, (1500001 + 1500001 / 2) * 4},
                        Case{{5, 9, 5, 9, 5, 9}, 2000003, (2000003 * 2 * 2 / 3 + 2000003 / 3) * 4}}) {
    const int p = static_cast<int>(k.nodes.size());
    run_ranks(p, [&](Communicator& c) {
      c.set_nodes(k.nodes);
      std::vector<float> v(k.n);
      for (size_t i = 0; i < k.n; ++i) v[i] = static_cast<float>(c.rank() + 1) * static_cast<float>(i % 13);
      c.allreduce_sum(v.data(), k.n);
      const float ranks = static_cast<float>(p * (p + 1) / 2);
      for (size_t i = 0; i < k.n; ++i) ASSERT_FLOAT_EQ(v[i], ranks * static_cast<float>(i % 13)) << p << " " << i;
      EXPECT_NEAR(static_cast<double>(c.bytes_sent()), static_cast<double>(k.bytes), 16.0 * p * 4 * 2) << p;
      std::vector<float> w(k.n, 0.5f);
      c.allreduce_sum_half(w.data(), k.n);
      for (size_t i = 0; i < k.n; i += 997) ASSERT_EQ(w[i], 0.5f * static_cast<float>(p)) << i;
    });
  }
}

// Counts the messages a rank sends (a wrapper around the in-process transport).
class CountingTransport : public Transport {
 public:
  CountingTransport(std::unique_ptr<Transport> t, int* sends) : t_(std::move(t)), sends_(sends) {}
  int rank() const override { return t_->rank(); }
  int size() const override { return t_->size(); }
  const char* name() const override { return t_->name(); }
  void send(int dst, const void* data, size_t bytes) override {
    ++*sends_;
    t_->send(dst, data, bytes);
  }
  void post_recv(int src, void* data, size_t bytes) override { t_->post_recv(src, data, bytes); }
  void wait_recvs(std::chrono::steady_clock::time_point d) override { t_->wait_recvs(d); }
  void wait_sends(std::chrono::steady_clock::time_point d) override { t_->wait_sends(d); }

 private:
  std::unique_ptr<Transport> t_;
  int* sends_;
};

TEST(Comm, SegmentsOnlyWhenTheRingCrossesNodes) {
  // 8 MiB over 2 ranks: 16 segments of one reduce-scatter and one allgather message each when the
  // ranks are on two nodes (a link's transfer overlaps a sum), one of each inside a node (the
  // receiver's own core copies there: more segments would only add handshakes).
  const size_t n = size_t{2} << 20;
  for (const auto& [nodes, messages] : {std::pair<std::vector<int>, int>{{0, 0}, 2}, {{0, 1}, 32}}) {
    auto transports = make_inproc_group(2);
    int sends[2] = {0, 0};
    std::vector<std::thread> threads;
    std::vector<std::vector<float>> out(2, std::vector<float>(n));
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        Communicator c(std::make_unique<CountingTransport>(std::move(transports[static_cast<size_t>(r)]), &sends[r]), 10.0);
        c.set_nodes(nodes);
        for (size_t i = 0; i < n; ++i) out[static_cast<size_t>(r)][i] = static_cast<float>((r + 1) * (i % 7));
        c.allreduce_sum(out[static_cast<size_t>(r)].data(), n);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(sends[r], messages) << "nodes " << nodes[0] << "," << nodes[1];
      for (size_t i = 0; i < n; i += 4999) ASSERT_EQ(out[static_cast<size_t>(r)][i], static_cast<float>(3 * (i % 7)));
    }
  }
}

TEST(Comm, HalfAllreduceSendsHalfTheBytes) {
  run_ranks(3, [&](Communicator& c) {
    const size_t n = 999;
    std::vector<float> v(n), exact(n);
    for (size_t i = 0; i < n; ++i) v[i] = 0.25f * static_cast<float>(i % 17) * static_cast<float>(c.rank() + 1);
    c.allreduce_sum_half(v.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(v[i], 0.25f * static_cast<float>(i % 17) * 6.0f) << i;  // exact in fp16
    EXPECT_EQ(c.bytes_sent(), 2 * n * 2 / 3 * 2);
    std::vector<float> big{70000.0f, 1e-3f};  // beyond fp16's range: inf, as on a GPU
    c.allreduce_sum_half(big.data(), big.size());
    EXPECT_TRUE(std::isinf(big[0]));
    EXPECT_NEAR(big[1], 3e-3f, 3e-6f);
  });
}

TEST(Comm, RingRankOrderFollowsNodesThenThePluginsRing) {
  // Two nodes; on node 7 the plugin's ring puts rank 1's GPU first, rank 0's second.
  EXPECT_EQ(ring_rank_order({{7, 1}, {7, 0}, {3, 0}, {3, 1}}), (std::vector<int>{1, 0, 2, 3}));
  // Without LOOM_RING (-1): rank order within the node, after any rank that has a position.
  EXPECT_EQ(ring_rank_order({{0, -1}, {0, -1}, {0, 0}}), (std::vector<int>{1, 2, 0}));
  EXPECT_EQ(ring_rank_order({}), std::vector<int>{});
}

TEST(Comm, BroadcastFromEveryRootAndBarrier) {
  for (int p : {1, 2, 5})
    for (int root = 0; root < p; ++root)
      run_ranks(p, [&](Communicator& c) {
        std::vector<int> v(17, c.rank() == root ? 42 + root : -1);
        c.broadcast(v.data(), v.size() * sizeof(int), root);
        for (int x : v) ASSERT_EQ(x, 42 + root);
        c.barrier();
      });
}

TEST(Comm, AStoppedRankTimesOutWithItsName) {
  auto transports = make_inproc_group(3);
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r)  // rank 2 never joins
    threads.emplace_back([&, r] {
      try {
        Communicator c(std::move(transports[static_cast<size_t>(r)]), 0.5);
        std::vector<float> v(100, 1.0f);
        c.allreduce_sum(v.data(), v.size());
      } catch (const Error& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(errors[0].find("timed out waiting for rank 2"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("timed out"), std::string::npos) << errors[1];
  EXPECT_LT(took, 5.0);
}

}  // namespace
}  // namespace loom::rt

#include "loom/rt/comm/balancer.hpp"

namespace loom::rt {
namespace {

TEST(Balancer, SplitsByWeightAndKeepsTheGlobalBatch) {
  EXPECT_EQ(Balancer::split(128, {1, 1}), (std::vector<int>{64, 64}));
  EXPECT_EQ(Balancer::split(7, {5, 2}), (std::vector<int>{5, 2}));
  EXPECT_EQ(Balancer::split(10, {312, 125}), (std::vector<int>{7, 3}));
  auto s = Balancer::split(100, {1000, 1, 1});  // everyone keeps at least one sample
  EXPECT_EQ(s[1], 1);
  EXPECT_EQ(s[0] + s[1] + s[2], 100);
  EXPECT_THROW(Balancer(Balance::kStatic, 1, 2), Error);
}

TEST(Balancer, DynamicFollowsMeasuredSpeed) {
  Balancer b(Balance::kDynamic, 140, 2, 5);
  b.start({1, 1});
  for (int step = 0; step < 50; ++step) {
    // rank 1 runs at 0.4 of rank 0's speed: time = share / speed
    std::vector<double> t{b.shares()[0] / 1000.0, b.shares()[1] / 400.0};
    b.observe(t);
  }
  EXPECT_EQ(b.shares(), (std::vector<int>{100, 40}));  // 5:2
  std::vector<double> slow{b.shares()[0] / 1000.0, 3 * b.shares()[1] / 400.0};
  EXPECT_EQ(b.stragglers(slow), std::vector<int>{});  // one slow step is noise
  EXPECT_EQ(b.stragglers(slow), std::vector<int>{});
  EXPECT_EQ(b.stragglers(slow), std::vector<int>{1});  // the third in a row is reported ...
  EXPECT_EQ(b.stragglers(slow), std::vector<int>{});  // ... once
  std::vector<double> fine{b.shares()[0] / 1000.0, b.shares()[1] / 400.0};
  EXPECT_EQ(b.stragglers(fine), std::vector<int>{});
  for (int k = 0; k < 2; ++k) EXPECT_EQ(b.stragglers(slow), std::vector<int>{});
  EXPECT_EQ(b.stragglers(slow), std::vector<int>{1});  // slow again after keeping up: reported again
  // A few samples off the slowest rank, under 2% of the batch, but 5% of the step: moved.
  Balancer few(Balance::kDynamic, 256, 2, 1);
  few.start({185, 71});
  ASSERT_EQ(few.shares(), (std::vector<int>{185, 71}));
  for (int step = 0; step < 20; ++step) few.observe({few.shares()[0] / 50100.0, few.shares()[1] / 17600.0});
  EXPECT_EQ(few.shares(), (std::vector<int>{189, 67}));
  // Noise of 1% in the times moves nothing.
  for (int step = 0; step < 20; ++step)
    few.observe({few.shares()[0] / 50100.0 * (step % 2 ? 1.01 : 0.99), few.shares()[1] / 17600.0});
  EXPECT_EQ(few.shares(), (std::vector<int>{189, 67}));
  std::vector<double> tiny{1e-5, 3e-5};  // 3x, but 20 us: below what a step's noise is
  Balancer t(Balance::kStatic, 2, 2);
  t.start({1, 1});
  for (int k = 0; k < 6; ++k) t.observe({1e-5, 1e-5});
  for (int k = 0; k < 4; ++k) EXPECT_EQ(t.stragglers(tiny), std::vector<int>{});
}

}  // namespace
}  // namespace loom::rt

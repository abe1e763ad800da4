// grad_exchange_test.cpp — the gradient exchange over ranks as threads: option parsing, buckets
// overlapped with backward (fp32 and fp16) and summed in place on the CPU, ZeRO-1's sharded step
// in place, a failing bucket, PowerSGD, and the device path
// (NCCL's place, taken here by a host stand-in) against the staged one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>
#include <string>
#include <vector>

#include "loom/rt/comm/grad_exchange.hpp"
#include "loom/rt/nn/optim.hpp"
#include "loom/rt/tensor/tensor.hpp"
#include "loom/rt/train/zero.hpp"
#include "ranks_harness.hpp"

namespace loom::rt {
namespace {

TEST(GradExchange, ParsesCompressionOptions) {
  EXPECT_EQ(parse_grad_compress("none").kind, "none");
  auto c = parse_grad_compress("powersgd:rank=2,start=50");
  EXPECT_EQ(c.kind, "powersgd");
  EXPECT_EQ(c.rank, 2);
  EXPECT_EQ(c.start, 50);
    EXPECT_EQ(parse_grad_compress("fp16").kind, "fp16");
  for (const char* bad : {"zip", "powersgd:rank=0", "powersgd:rank=x", "powersgd:depth=1", "none:rank=2", "fp16:rank=2"})
    EXPECT_THROW(parse_grad_compress(bad), Error) << bad;
}

// Params of several sizes, gradients that differ per rank, each rank's already weighted by its
// share `w` (as Task::train_step leaves them); the sum is exact in fp32.
std::vector<Param> bucket_params(int rank, float w = 1.0f) {
  std::vector<Param> ps;
  for (int64_t n : {300, 20, 5000, 40, 1, 2048}) {
    Param p{"p" + std::to_string(ps.size()), Tensor::empty({n}), Tensor::empty({n})};
    for (int64_t k = 0; k < n; ++k) p.grad.f32()[k] = static_cast<float>((k % 9) * (rank + 1)) * w;
    ps.push_back(std::move(p));
  }
  return ps;
}

TEST(GradExchange, BucketsOverlapAndSumTheGradients) {
  for (const char* kind : {"none", "fp16"})
    for (double mb : {0.0, 0.004, 0.02, 25.0})  // one exchange after backward; 1-4 KiB buckets; one bucket
      run_ranks(2, [&](Communicator& c) {
        CompressConfig cfg;
        cfg.kind = kind;
        GradExchange ex(cfg, mb);
        EXPECT_EQ(ex.overlaps(), mb > 0);
        for (int step = 0; step < 3; ++step) {
          const float w = c.rank() == 0 ? 0.75f : 0.25f;  // shares 3:1
          auto ps = bucket_params(c.rank(), w);
          ex.begin(c, ps);
          for (size_t i = ps.size(); i-- > 1;) ex.ready(i);  // as backward would, last first; 0 left to finish()
          ex.ready(3);  // a repeated report is ignored
          std::vector<float> extras{w, 1.0f};
          ex.finish(extras, step);
          EXPECT_FLOAT_EQ(extras[0], 1.0f);
          EXPECT_FLOAT_EQ(extras[1], 2.0f);
          for (const auto& p : ps)
            for (int64_t k = 0; k < p.grad.numel(); ++k)
              ASSERT_EQ(p.grad.f32()[k], static_cast<float>(k % 9) * (0.75f + 0.5f)) << p.name << " " << kind << " " << mb;
          const size_t grads = (300 + 20 + 5000 + 40 + 1 + 2048) * 4;
          EXPECT_EQ(ex.plain_bytes(), grads + 8);
          EXPECT_EQ(ex.last_bytes(), (std::string(kind) == "fp16" ? grads / 2 : grads) + 8);
        }
        if (mb == 0.004) {
          EXPECT_GE(ex.buckets(), 4u);
        }
        if (mb == 25.0) {
          EXPECT_EQ(ex.buckets(), 1u);
        }
      });
}

// CPU gradients are summed where backward writes them: after begin() each gradient is a view of
// its bucket's one buffer (neighbours in a bucket adjacent, last parameter first), keeping its
// values; the same parameters stay bound from step to step, and a gradient the caller replaced
// is bound again.
TEST(GradExchange, CpuGradientsLiveInTheirBucket) {
  run_ranks(2, [&](Communicator& c) {
    GradExchange ex(CompressConfig{}, 25.0);  // one bucket
    auto ps = bucket_params(c.rank());
    ex.begin(c, ps);
    for (size_t i = ps.size(); i-- > 1;) {
      ASSERT_EQ(ps[i - 1].grad.f32(), ps[i].grad.f32() + ps[i].grad.numel()) << i;
      for (int64_t k = 0; k < ps[i].grad.numel(); ++k)
        ASSERT_EQ(ps[i].grad.f32()[k], static_cast<float>((k % 9) * (c.rank() + 1)));
    }
    std::vector<float> extras{0.0f};
    ex.finish(extras, 0);
    const float* bound = ps[3].grad.f32();
    ps[3].grad = Tensor::zeros({40});  // replaced between steps
    ps[3].grad.f32()[5] = 7.0f;
    ex.begin(c, ps);
    EXPECT_EQ(ps[3].grad.f32(), bound);
    EXPECT_EQ(ps[3].grad.f32()[5], 7.0f);
    EXPECT_EQ(ps[3].grad.shape(), (std::vector<int64_t>{40}));
    ex.finish(extras, 1);
    EXPECT_EQ(ps[3].grad.f32()[5], 14.0f);  // 7 on each rank
  });
}

// ZeRO-1 on the CPU: the gradients are reduce-scattered where backward wrote them, each rank
// steps its chunk of the parameters where they live (one flat buffer per bucket) and the
// allgather fills in the rest: every rank ends with the unsharded step's parameters, a replaced
// parameter (a checkpoint's) is bound again with its values.
TEST(ZeroOptimizer, CpuParametersLiveInTheirBucketAndStepAsUnsharded) {
  run_ranks(2, [&](Communicator& c) {
    GradExchange ex(CompressConfig{}, 25.0);  // one bucket
    ex.set_sharded();
    ZeroOptimizer zero(ex, c);
    OptimConfig oc;
    oc.momentum = 0.0f;
    Optimizer sgd(oc);
    auto ps = bucket_params(c.rank());
    for (auto& p : ps)
      for (int64_t k = 0; k < p.value.numel(); ++k) p.value.f32()[k] = static_cast<float>(k % 5);
    std::vector<float> extras{0.0f};
    for (int step = 0; step < 2; ++step) {
      ex.begin(c, ps);
      ex.finish(extras, step);
      zero.step(sgd, ps, 0.5f, 0.0f);
      for (size_t i = 0; i < ps.size(); ++i)  // w - 0.5 * (g of rank 0 + g of rank 1), (k % 9) * 3
        for (int64_t k = 0; k < ps[i].value.numel(); ++k)
          ASSERT_EQ(ps[i].value.f32()[k], static_cast<float>(k % 5) - (step + 1) * 1.5f * static_cast<float>(k % 9))
              << "step " << step << " param " << i << " element " << k;
      for (size_t i = ps.size(); i-- > 1;)  // the bucket's order: the last parameter first
        ASSERT_EQ(ps[i - 1].value.f32(), ps[i].value.f32() + ps[i].value.numel()) << i;
      for (auto& p : ps)  // backward writes the next step's gradients
        for (int64_t k = 0; k < p.grad.numel(); ++k) p.grad.f32()[k] = static_cast<float>((k % 9) * (c.rank() + 1));
    }
    const float* bound = ps[2].value.f32();
    ps[2].value = Tensor::zeros({5000});  // a checkpoint's parameter, replaced between steps
    ps[2].value.f32()[7] = 4.0f;
    ex.begin(c, ps);
    ex.finish(extras, 2);
    zero.step(sgd, ps, 0.5f, 0.0f);
    EXPECT_EQ(ps[2].value.f32(), bound);
    EXPECT_EQ(ps[2].value.f32()[7], 4.0f - 1.5f * 7);
  });
}

// Stands in for NCCL in a unit test: sums the "device" buffers (host memory here) over the same
// ranks, fp16 payloads as fp16 at every hop, as NCCL does.
class HostStandIn : public DeviceCollectives {
 public:
  explicit HostStandIn(Communicator& c) : c_(c) {}
  void allreduce_sum(float* d, size_t n, void*) override {
    ++calls;
    c_.allreduce_sum(d, n);
  }
  void allreduce_sum_half(void* d, size_t n, void*) override {
    ++calls;
    std::vector<float> f(n);
    halves_to_floats(static_cast<uint16_t*>(d), f.data(), n);
    c_.allreduce_sum_half(f.data(), n);
    floats_to_halves(f.data(), static_cast<uint16_t*>(d), n);
  }
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  // NCCL's in-place layout: chunk r at r * chunk. Whatever lies outside this rank's chunk
  // afterwards is NaN here, so that a reader of another rank's partial sums shows.
  void reduce_scatter_chunks(float* d, size_t chunk, void*) override {
    const size_t n = chunk * static_cast<size_t>(size()), mine = chunk * static_cast<size_t>(rank());
    std::vector<float> sum(d, d + n);
    c_.allreduce_sum(sum.data(), n);
    std::fill(d, d + n, std::nanf(""));
    std::copy_n(sum.data() + mine, chunk, d + mine);
  }
  void allgather_chunks(float* d, size_t chunk) override {  // every chunk zero but one: the sum is exact
    const size_t n = chunk * static_cast<size_t>(size()), mine = chunk * static_cast<size_t>(rank());
    std::vector<float> all(n, 0.0f);
    std::copy_n(d + mine, chunk, all.data() + mine);
    c_.allreduce_sum(all.data(), n);
    std::copy(all.begin(), all.end(), d);
  }
  std::string describe() const override { return "host stand-in"; }
  int calls = 0;

 private:
  Communicator& c_;
};

TEST(GradExchange, SummedOnTheDeviceEqualsTheStagedPathBitForBit) {
  for (const char* kind : {"none", "fp16"})
    for (double mb : {0.0, 0.004, 25.0})
      run_ranks(2, [&](Communicator& c) {
        CompressConfig cfg;
        cfg.kind = kind;
        GradExchange staged(cfg, mb), on_device(cfg, mb);
        HostStandIn dc(c);
        on_device.set_device_comm(&dc);
        EXPECT_TRUE(on_device.on_device());
        for (int step = 0; step < 2; ++step) {
          auto a = bucket_params(c.rank()), b = bucket_params(c.rank());
          for (auto* ps : {&a, &b})
            for (auto& p : *ps)
              for (int64_t k = 0; k < p.grad.numel(); ++k) p.grad.f32()[k] = p.grad.f32()[k] * 0.37f + 0.013f * step;
          const float w = c.rank() == 0 ? 0.7f : 0.3f;
          for (auto* ps : {&a, &b})
            for (auto& p : *ps)
              for (int64_t k = 0; k < p.grad.numel(); ++k) p.grad.f32()[k] *= w;
          for (auto [ex, ps] : {std::pair{&staged, &a}, std::pair{&on_device, &b}}) {
            ex->begin(c, *ps);
            for (size_t i = ps->size(); i-- > 0;) ex->ready(i);
            std::vector<float> extras{w};
            ex->finish(extras, step);
            EXPECT_FLOAT_EQ(extras[0], 1.0f);
          }
          for (size_t i = 0; i < a.size(); ++i)
            ASSERT_EQ(std::memcmp(a[i].grad.f32(), b[i].grad.f32(), a[i].grad.bytes()), 0) << kind << " " << mb << " " << a[i].name;
          EXPECT_EQ(on_device.last_bytes(), staged.last_bytes());
        }
        EXPECT_EQ(dc.calls, 2 * static_cast<int>(on_device.buckets()));  // every bucket, each step, on the device
      });
  CompressConfig psgd;
  psgd.kind = "powersgd";
  GradExchange ex(psgd, 1.0);
  run_ranks(1, [&](Communicator& c) {
    HostStandIn dc(c);
    EXPECT_THROW(ex.set_device_comm(&dc), Error);  // PowerSGD sums its factors over the host transport
  });
}

// ZeRO-1 where the gradients are summed on the device (NCCL's layout, taken here by the host
// stand-in): the reduce-scattered chunks padded to equal sizes, the moments and the packed
// weights beside them. With AdamW and clipping over several buckets, on 2 and 3 ranks (padding),
// every step's parameters and the gathered moments are those of ZeRO-1 on the host to the bit,
// and each rank holds only its chunk of the moments.
TEST(ZeroOptimizer, PackedOnTheDeviceStepsAsOnTheHost) {
  for (int p : {2, 3})
    run_ranks(p, [&](Communicator& c) {
      GradExchange host_ex(CompressConfig{}, 0.004), dev_ex(CompressConfig{}, 0.004);
      HostStandIn dc(c);
      dev_ex.set_sharded();
      dev_ex.set_device_comm(&dc);
      host_ex.set_sharded();
      ZeroOptimizer host_zero(host_ex, c), dev_zero(dev_ex, c);
      OptimConfig oc;
      oc.kind = OptimKind::kAdamw;
      oc.weight_decay = 0.01f;
      Optimizer host_opt(oc), dev_opt(oc);
      auto a = bucket_params(c.rank()), b = bucket_params(c.rank());
      for (auto* ps : {&a, &b})
        for (auto& q : *ps)
          for (int64_t k = 0; k < q.value.numel(); ++k) q.value.f32()[k] = 0.5f * static_cast<float>(k % 5) - 1.0f;
      for (int step = 0; step < 3; ++step) {
        for (auto [ex, zero, opt, ps] : {std::tuple{&host_ex, &host_zero, &host_opt, &a}, std::tuple{&dev_ex, &dev_zero, &dev_opt, &b}}) {
          for (auto& q : *ps)  // exact in fp32, and so are their squares' sums: the clip agrees to the bit
            for (int64_t k = 0; k < q.grad.numel(); ++k)
              q.grad.f32()[k] = 0.25f * static_cast<float>((k + step) % 9 * (c.rank() + 1)) - 1.0f;
          ex->begin(c, *ps);
          for (size_t i = ps->size(); i-- > 0;) ex->ready(i);
          std::vector<float> extras{0.0f};
          ex->finish(extras, step);
          zero->step(*opt, *ps, 0.01f, 50.0f);  // the gradients' norm is ~190: clipped
        }
        for (size_t i = 0; i < a.size(); ++i)
          ASSERT_EQ(std::memcmp(a[i].value.f32(), b[i].value.f32(), a[i].value.bytes()), 0) << p << " " << step << " " << a[i].name;
      }
      EXPECT_GT(dev_ex.buckets(), 2u);
      std::vector<Tensor> hm, hv, dm, dv;
      host_zero.gather_moments(host_opt, a, &hm, &hv);
      dev_zero.gather_moments(dev_opt, b, &dm, &dv);
      ASSERT_EQ(dm.size(), a.size());
      ASSERT_EQ(dv.size(), a.size());
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(std::memcmp(hm[i].f32(), dm[i].f32(), hm[i].bytes()), 0) << a[i].name;
        EXPECT_EQ(std::memcmp(hv[i].f32(), dv[i].f32(), hv[i].bytes()), 0) << a[i].name;
      }
      const size_t whole = (300 + 20 + 5000 + 40 + 1 + 2048) * 2 * sizeof(float);  // m and v
      EXPECT_LE(dev_zero.state_bytes(), whole / static_cast<size_t>(p) + dev_ex.buckets() * 2 * sizeof(float));
      EXPECT_GE(dev_zero.state_bytes(), whole / static_cast<size_t>(p) - dev_ex.buckets() * 2 * sizeof(float) * p);
      // A checkpoint's resume: the gathered moments restored into a new optimizer, sharded again,
      // take the next step as the run that kept going.
      GradExchange resumed_ex(CompressConfig{}, 0.004);
      resumed_ex.set_sharded();
      resumed_ex.set_device_comm(&dc);
      ZeroOptimizer resumed_zero(resumed_ex, c);
      Optimizer resumed_opt(oc);
      resumed_opt.restore(dm, dv, dev_opt.steps());
      auto r = bucket_params(c.rank());
      for (size_t i = 0; i < r.size(); ++i) std::memcpy(r[i].value.f32(), b[i].value.f32(), b[i].value.bytes());
      for (auto [ex, zero, opt, ps] : {std::tuple{&dev_ex, &dev_zero, &dev_opt, &b}, std::tuple{&resumed_ex, &resumed_zero, &resumed_opt, &r}}) {
        for (auto& q : *ps)
          for (int64_t k = 0; k < q.grad.numel(); ++k) q.grad.f32()[k] = 0.5f * static_cast<float>(k % 7 * (c.rank() + 1));
        ex->begin(c, *ps);
        std::vector<float> extras{0.0f};
        ex->finish(extras, 3);
        zero->step(*opt, *ps, 0.01f, 0.0f);
      }
      for (size_t i = 0; i < b.size(); ++i)
        ASSERT_EQ(std::memcmp(b[i].value.f32(), r[i].value.f32(), b[i].value.bytes()), 0) << p << " resumed " << b[i].name;
    });
}

TEST(GradExchange, AFailedBucketIsReportedNotHung) {
  auto transports = make_inproc_group(2);
  std::string error;
  std::thread t([&] {
    Communicator c(std::move(transports[0]), 0.5);  // rank 1 never takes part
    GradExchange ex(CompressConfig{}, 0.004);
    auto ps = bucket_params(0);
    try {
      ex.begin(c, ps);
      for (size_t i = ps.size(); i-- > 0;) ex.ready(i);
      std::vector<float> extras{0.0f};
      ex.finish(extras, 0);
    } catch (const Error& e) {
      error = e.what();
    }
  });
  t.join();
  EXPECT_NE(error.find("timed out waiting for rank 1"), std::string::npos) << error;
}

TEST(GradExchange, FullRankPowerSgdEqualsThePlainSum) {
  // With rank >= the matrix's smaller side, P Q^T reproduces the summed gradient exactly.
  run_ranks(2, [&](Communicator& c) {
    std::vector<Param> ps(2);
    ps[0] = {"w", Tensor::empty({12, 10}), Tensor::empty({12, 10})};
    ps[1] = {"b", Tensor::empty({12}), Tensor::empty({12})};
    std::vector<float> expect(120);
    for (int k = 0; k < 120; ++k) {
      ps[0].grad.f32()[k] = static_cast<float>((k * 7 + c.rank() * 3) % 11) - 5.0f;
      expect[static_cast<size_t>(k)] = static_cast<float>((k * 7) % 11) - 5.0f + static_cast<float>((k * 7 + 3) % 11) - 5.0f;
    }
    for (int k = 0; k < 12; ++k) ps[1].grad.f32()[k] = 1.0f;
    CompressConfig cfg;
    cfg.kind = "powersgd";
    cfg.rank = 10;  // 12x10 at rank 10 would not shrink 2x: sent as it is ...
    GradExchange plain_path(cfg, 0);
    std::vector<float> extras{1.0f};
    plain_path.begin(c, ps);
    plain_path.finish(extras, 0);
    EXPECT_EQ(plain_path.last_bytes(), plain_path.plain_bytes());
    EXPECT_EQ(plain_path.plain_bytes(), size_t{(120 + 12 + 1) * 4});
    EXPECT_FLOAT_EQ(extras[0], 2.0f);
    for (int k = 0; k < 120; ++k) ASSERT_NEAR(ps[0].grad.f32()[k], expect[static_cast<size_t>(k)], 1e-5);
  });
  run_ranks(2, [&](Communicator& c) {  // ... and a 40x30 matrix at rank 2 is compressed
    std::vector<Param> ps(1);
    ps[0] = {"w", Tensor::empty({40, 30}), Tensor::empty({40, 30})};
    // A rank-1 gradient: PowerSGD at rank 2 recovers the sum exactly.
    for (int i = 0; i < 40; ++i)
      for (int j = 0; j < 30; ++j) ps[0].grad.f32()[i * 30 + j] = static_cast<float>((i + 1) * (j % 7 + 1)) * (c.rank() + 1);
    CompressConfig cfg;
    cfg.kind = "powersgd";
    cfg.rank = 2;
    GradExchange ex(cfg, 1.0);
    EXPECT_FALSE(ex.overlaps());
    std::vector<float> extras;
    ex.begin(c, ps);
    ex.finish(extras, 0);
    EXPECT_EQ(ex.last_bytes(), size_t{(40 + 30) * 2 * 4});
    double worst = 0;
    for (int i = 0; i < 40; ++i)
      for (int j = 0; j < 30; ++j)
        worst = std::max(worst, std::fabs(ps[0].grad.f32()[i * 30 + j] - 3.0 * (i + 1) * (j % 7 + 1)));
    EXPECT_LT(worst, 1e-2);
  });
}

TEST(GradExchange, PowerSgdErrorFeedbackLosesNothing) {
  // A full-rank gradient at rank 1: the estimate misses most of it, and what it misses is each
  // rank's error, carried into the next step. The estimate plus every rank's error is the sum of
  // the ranks' (weighted) gradients, and on the next step the sum of the errors goes out too.
  const int rows = 24, cols = 20, n = rows * cols;
  std::vector<std::vector<float>> sent(2), error(2), error2(2);
  std::vector<float> estimate(n), estimate2(n);
  run_ranks(2, [&](Communicator& c) {
    const int me = c.rank();
    std::vector<Param> ps(1);
    ps[0] = {"w", Tensor::empty({rows, cols}), Tensor::empty({rows, cols})};
    CompressConfig cfg;
    cfg.kind = "powersgd";
    cfg.rank = 1;
    GradExchange ex(cfg, 1.0);
    std::vector<float> extras;
    auto& g = sent[static_cast<size_t>(me)];
    for (int k = 0; k < n; ++k) g.push_back(std::sin(0.37f * k * (me + 1)) + 0.1f * static_cast<float>(me));
    for (int k = 0; k < n; ++k) ps[0].grad.f32()[k] = 0.5f * g[static_cast<size_t>(k)];  // weighted: shares 1:1
    ex.begin(c, ps);
    ex.finish(extras, 0);
    if (me == 0) std::copy(ps[0].grad.f32(), ps[0].grad.f32() + n, estimate.begin());
    auto keep_error = [&](std::vector<std::vector<float>>& into) {
      for (const auto& t : ex.state())
        if (t.first == "powersgd.0.error") into[static_cast<size_t>(me)].assign(t.second.f32(), t.second.f32() + n);
    };
    keep_error(error);
    ps[0].grad.fill(0.0f);  // step 2: nothing new, so what goes out is the carried error
    ex.begin(c, ps);
    ex.finish(extras, 1);
    if (me == 0) std::copy(ps[0].grad.f32(), ps[0].grad.f32() + n, estimate2.begin());
    keep_error(error2);
  });
  ASSERT_EQ(error[0].size(), static_cast<size_t>(n));
  ASSERT_EQ(error[1].size(), static_cast<size_t>(n));
  double worst = 0, missed = 0;
  for (int k = 0; k < n; ++k) {
    const double whole = 0.5 * sent[0][static_cast<size_t>(k)] + 0.5 * sent[1][static_cast<size_t>(k)];
    worst = std::max(worst, std::fabs(estimate[static_cast<size_t>(k)] + error[0][static_cast<size_t>(k)] +
                                      error[1][static_cast<size_t>(k)] - whole));
    missed = std::max(missed, std::fabs(whole - estimate[static_cast<size_t>(k)]));
  }
  EXPECT_GT(missed, 0.1);   // rank 1 cannot hold this gradient ...
  EXPECT_LT(worst, 1e-5);   // ... and the errors keep exactly what it left out
  double worst2 = 0, sent2 = 0;
  for (int k = 0; k < n; ++k) {
    const size_t i = static_cast<size_t>(k);
    worst2 = std::max(worst2, std::fabs(double{estimate2[i]} + error2[0][i] + error2[1][i] - (error[0][i] + error[1][i])));
    sent2 = std::max(sent2, static_cast<double>(std::fabs(estimate2[i])));
  }
  EXPECT_GT(sent2, 0.01);  // step 2 sends part of the carried error
  EXPECT_LT(worst2, 1e-5);
}

}  // namespace
}  // namespace loom::rt

// zero3_test.cpp — ZeRO-3 over ranks as threads: an mlp trained sharded (each layer gathered by
// the gate, its gradients reduce-scattered) ends with the weights of the unsharded run, which
// sums every rank's gradients and steps whole; each rank keeps a third of the state; gather_all
// keeps the values only where asked; a task whose groups do not cover its parameters is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "loom/rt/nn/mlp.hpp"
#include "loom/rt/nn/optim.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/train/zero3.hpp"
#include "ranks_harness.hpp"

namespace loom::rt {
namespace {

constexpr int kRows = 4, kIn = 6, kOut = 3, kRanks = 3, kSteps = 3;

// A stand-in for mlp_task: rank r's rows of a fixed batch, the loss summed over all ranks' rows.
class TinyTask : public Task {
 public:
  explicit TinyTask(int rank) : model_({kIn, 10, 7, kOut}, 5), rank_(rank) {}
  std::string describe() const override { return "tiny"; }
  int64_t steps_per_epoch(int) const override { return 1; }
  double train_step(int64_t, int64_t, int, int of, const std::function<void(size_t)>&) override {
    return step_rows(rank_, of);
  }
  double step_rows(int rank, int of) {
    Tensor x = Tensor::empty({kRows, kIn});
    std::vector<int32_t> y(kRows);
    for (int i = 0; i < kRows * kIn; ++i) x.f32()[i] = std::sin(0.7f * static_cast<float>(i + 31 * rank));
    for (int i = 0; i < kRows; ++i) y[static_cast<size_t>(i)] = (i + rank) % kOut;
    const Tensor& logits = model_.forward(x);
    Tensor d = Tensor::empty({kRows, kOut});
    const double loss = cpu::softmax_xent(logits.f32(), y.data(), d.f32(), kRows, kOut, of);
    model_.backward(d);
    return loss;
  }
  Eval evaluate() override { return {}; }
  std::vector<Param>& params() override { return model_.params(); }
  std::string config_json() const override { return "{}"; }
  double train_flops(int) const override { return 0; }
  std::vector<ParamGroup> param_groups() const override { return groups_.empty() ? model_.param_groups() : groups_; }
  void set_param_gate(ParamGate* gate) override { model_.set_gate(gate); }
  std::vector<ParamGroup> groups_;  // a test's own groups (empty: the model's)

 private:
  Mlp model_;
  int rank_;
};

OptimConfig sgd() {
  OptimConfig o;
  o.kind = OptimKind::kSgd;
  o.momentum = 0.9f;
  return o;
}

// The unsharded run: every rank's gradients summed on one model, one whole step.
std::vector<Tensor> unsharded() {
  TinyTask t(0);
  Optimizer opt(sgd());
  for (int s = 0; s < kSteps; ++s) {
    std::vector<Tensor> sum;
    for (int r = 0; r < kRanks; ++r) {
      t.step_rows(r, kRanks * kRows);
      for (size_t i = 0; i < t.params().size(); ++i) {
        if (r == 0) sum.push_back(t.params()[i].grad.clone());
        else
          for (int64_t k = 0; k < sum[i].numel(); ++k) sum[i].f32()[k] += t.params()[i].grad.f32()[k];
      }
    }
    for (size_t i = 0; i < sum.size(); ++i) t.params()[i].grad = sum[i];
    opt.step(t.params(), 0.1f);
  }
  std::vector<Tensor> out;
  for (const auto& p : t.params()) out.push_back(p.value.clone());
  return out;
}

TEST(Zero3, ShardedStepsEqualTheUnshardedRun) {
  const std::vector<Tensor> want = unsharded();
  run_ranks(kRanks, [&](Communicator& c) {
    TinyTask t(c.rank());
    Optimizer opt(sgd());
    Zero3 z(c, Device::kCpu);
    size_t whole_bytes = 0;
    for (const auto& p : t.params()) whole_bytes += static_cast<size_t>(p.value.numel()) * sizeof(float);
    z.shard(t, opt);
    for (const auto& p : t.params()) EXPECT_FALSE(p.value.defined()) << p.name << " stayed whole after shard()";
    for (int s = 0; s < kSteps; ++s) {
      t.train_step(0, 0, kRows, kRanks * kRows, {});
      for (const auto& p : t.params()) EXPECT_FALSE(p.value.defined()) << p.name << " stayed whole after backward";
      z.step(opt, 0.1f, 0);
    }
    EXPECT_NEAR(static_cast<double>(z.param_bytes()), whole_bytes / 3.0, 8.0);
    EXPECT_EQ(z.grad_bytes(), z.param_bytes());
    EXPECT_EQ(z.optimizer_bytes(), z.param_bytes());  // SGD: one moment
    z.gather_all(true);
    for (size_t i = 0; i < want.size(); ++i)
      for (int64_t k = 0; k < want[i].numel(); ++k)
        ASSERT_NEAR(t.params()[i].value.f32()[k], want[i].f32()[k], 1e-6f) << t.params()[i].name << "[" << k << "]";
    z.release_all();
    z.gather_all(c.rank() == 0);  // the others only send
    for (const auto& p : t.params()) EXPECT_EQ(p.value.defined(), c.rank() == 0) << p.name;
    z.release_all();
    std::vector<Tensor> m, v;
    z.gather_moments(opt, &m, &v);
    ASSERT_EQ(m.size(), t.params().size());
    EXPECT_TRUE(v.empty());
  });
}

TEST(Zero3, RefusesGroupsThatDoNotCoverTheParameters) {
  run_ranks(2, [&](Communicator& c) {
    TinyTask t(c.rank());
    t.groups_ = {{0, 2}, {4, 6}};  // layer 1's weight and bias in no group
    Optimizer opt(sgd());
    Zero3 z(c, Device::kCpu);
    try {
      z.shard(t, opt);
      ADD_FAILURE() << "groups with a gap were taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("do not cover its parameters"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace loom::rt

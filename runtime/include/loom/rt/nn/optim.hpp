// optim.hpp — SGD (momentum, Nesterov) and AdamW with PyTorch's update rules, a warmup + cosine
// learning-rate schedule, and gradient clipping by global norm.
#pragma once

#include <string>
#include <vector>

#include "loom/choice.hpp"
#include "loom/rt/tensor/param.hpp"

namespace loom::rt {

enum class OptimKind { kSgd, kAdamw };
enum class Schedule { kConstant, kCosine };  // the learning rate after warmup

struct OptimConfig {
  OptimKind kind = OptimKind::kSgd;
  float momentum = 0.9f;
  bool nesterov = false;
  float weight_decay = 0.0f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
};

class Optimizer {
 public:
  explicit Optimizer(OptimConfig c) : c_(std::move(c)) {}
  void step(std::vector<Param>& params, float lr);
  // One step over flat spans on device `d` whose state the caller holds (ZeRO-1: this rank's
  // shard of every bucket): w -= update(g), m (and v for AdamW) as step() keeps them per parameter.
  struct Span {
    float* w;
    const float* g;
    float* m;
    float* v;  // AdamW only
    int64_t n;
  };
  void step_spans(const std::vector<Span>& spans, float lr, Device d = Device::kCpu);
  bool keeps_second_moment() const { return c_.kind == OptimKind::kAdamw; }
  int64_t steps() const { return t_; }
  // For checkpoints: the moments (empty before the first step; v only for AdamW) and the step
  // count; restore() takes what a checkpoint holds, on the CPU.
  const std::vector<Tensor>& first_moments() const { return m_; }
  const std::vector<Tensor>& second_moments() const { return v_; }
  void restore(std::vector<Tensor> m, std::vector<Tensor> v, int64_t t) {
    m_ = std::move(m);
    v_ = std::move(v);
    t_ = t;
  }

 private:
  void update(const Span& s, float lr) const;       // the CPU rule, at step t_
  void update_cuda(const Span& s, float lr) const;  // the same rule in a kernel
  OptimConfig c_;
  std::vector<Tensor> m_, v_;
  int64_t t_ = 0;
};

// Linear warmup over `warmup` steps, then cosine decay to zero at `total` (or constant).
float lr_at(int64_t step, int64_t total, float base, int64_t warmup, Schedule schedule);
// Scales the gradients so that their global L2 norm is at most max_norm; returns the norm before.
float clip_grad_norm(std::vector<Param>& params, float max_norm);

}  // namespace loom::rt

LOOM_CHOICE(loom::rt::OptimKind, "--optimizer", "sgd", "adamw");
LOOM_CHOICE(loom::rt::Schedule, "--lr-schedule", "constant", "cosine");

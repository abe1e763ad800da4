// optim.cpp — parameter updates, the schedule and clipping.
#include "loom/rt/nn/optim.hpp"

#include <cmath>

#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/vec.hpp"
#ifdef LOOM_HAVE_CUDA
#include "loom/rt/tensor/kernels_cuda.hpp"
#endif

namespace loom::rt {

void Optimizer::step(std::vector<Param>& params, float lr) {
  ++t_;
  if (m_.empty())
    for (const auto& p : params) {
      m_.push_back(Tensor::zeros(p.value.shape(), DType::kF32, p.value.device()));
      if (c_.kind == OptimKind::kAdamw) v_.push_back(Tensor::zeros(p.value.shape(), DType::kF32, p.value.device()));
    }
  for (size_t i = 0; i < params.size(); ++i) {
    const Span s{params[i].value.f32(), params[i].grad.f32(), m_[i].f32(), c_.kind == OptimKind::kAdamw ? v_[i].f32() : nullptr,
                 params[i].value.numel()};
    if (params[i].value.device() == Device::kCuda) update_cuda(s, lr);
    else update(s, lr);
  }
}

void Optimizer::step_spans(const std::vector<Span>& spans, float lr, Device d) {
  ++t_;
  for (const Span& s : spans) {
    if (d == Device::kCuda) update_cuda(s, lr);
    else update(s, lr);
  }
}

void Optimizer::update_cuda(const Span& s, float lr) const {
#ifdef LOOM_HAVE_CUDA
  if (c_.kind == OptimKind::kSgd)
    cuda::sgd_step(s.w, s.g, s.m, s.n, lr, c_.momentum, c_.weight_decay, t_ == 1 ? 0.0f : c_.momentum, c_.nesterov);
  else
    cuda::adamw_step(s.w, s.g, s.m, s.v, s.n, lr, c_.beta1, c_.beta2, c_.eps, c_.weight_decay,
                     1.0f - std::pow(c_.beta1, static_cast<float>(t_)),
                     std::sqrt(1.0f - std::pow(c_.beta2, static_cast<float>(t_))));
#else
  (void)s;
  (void)lr;
  throw Error("this build of Loom has no CUDA support");
#endif
}

namespace {

// The update rules over [lo, hi), each compiled for AVX2/FMA beside the baseline (vec.hpp). Element by
// element, without fused multiply-adds: every clone gives the same bits.
LOOM_VEC void sgd_plain(float* __restrict w, const float* __restrict g, int64_t lo, int64_t hi, float lr, float wd) {
  for (int64_t k = lo; k < hi; ++k) w[k] -= lr * (g[k] + wd * w[k]);
}

LOOM_VEC void sgd_nesterov(float* __restrict w, const float* __restrict g, float* __restrict m, int64_t lo, int64_t hi,
                           float lr, float wd, float mu, float keep) {
  for (int64_t k = lo; k < hi; ++k) {
    const float d = g[k] + wd * w[k];
    m[k] = keep * m[k] + d;
    w[k] -= lr * (d + mu * m[k]);
  }
}

LOOM_VEC void sgd_momentum(float* __restrict w, const float* __restrict g, float* __restrict m, int64_t lo, int64_t hi,
                           float lr, float wd, float keep) {
  for (int64_t k = lo; k < hi; ++k) {
    m[k] = keep * m[k] + g[k] + wd * w[k];
    w[k] -= lr * m[k];
  }
}

struct AdamW {
  float decay, beta1, beta2, step, root_bc2, eps;
};

LOOM_VEC void adamw(float* __restrict w, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t lo,
                    int64_t hi, AdamW a) {
  for (int64_t k = lo; k < hi; ++k) {
    w[k] *= a.decay;
    m[k] = a.beta1 * m[k] + (1.0f - a.beta1) * g[k];
    v[k] = a.beta2 * v[k] + (1.0f - a.beta2) * g[k] * g[k];
    w[k] -= a.step * m[k] / (std::sqrt(v[k]) / a.root_bc2 + a.eps);
  }
}

}  // namespace

// Memory-bound loops (a parameter, its gradient and its moments read and written once): in AVX2
// they run at the memory's speed, where the baseline's scalar loop took 2.5x as long (the MLP's
// 670k parameters: 0.41 against 1.04 ms a step).
void Optimizer::update(const Span& s, float lr) const {
  float* w = s.w;
  const float* g = s.g;
  float* m = s.m;
  const float wd = c_.weight_decay, mu = c_.momentum;
  const float keep = t_ == 1 ? 0.0f : mu;  // momentum: the first step sets the buffer to the gradient
  const int64_t min_parallel = 65536;
  if (c_.kind == OptimKind::kSgd) {  // torch.optim.SGD, dampening 0
    if (mu == 0.0f)
      vec::for_range(s.n, min_parallel, [&](int64_t lo, int64_t hi) { sgd_plain(w, g, lo, hi, lr, wd); });
    else if (c_.nesterov)
      vec::for_range(s.n, min_parallel, [&](int64_t lo, int64_t hi) { sgd_nesterov(w, g, m, lo, hi, lr, wd, mu, keep); });
    else
      vec::for_range(s.n, min_parallel, [&](int64_t lo, int64_t hi) { sgd_momentum(w, g, m, lo, hi, lr, wd, keep); });
    return;
  }
  // torch.optim.AdamW
  const float bc1 = 1.0f - std::pow(c_.beta1, static_cast<float>(t_));
  const float bc2 = 1.0f - std::pow(c_.beta2, static_cast<float>(t_));
  const AdamW a{1.0f - lr * wd, c_.beta1, c_.beta2, lr / bc1, std::sqrt(bc2), c_.eps};
  vec::for_range(s.n, min_parallel, [&](int64_t lo, int64_t hi) { adamw(w, g, m, s.v, lo, hi, a); });
}

float lr_at(int64_t step, int64_t total, float base, int64_t warmup, Schedule schedule) {
  if (warmup > 0 && step < warmup) return base * static_cast<float>(step + 1) / static_cast<float>(warmup);
  if (schedule != Schedule::kCosine || total <= warmup) return base;
  double progress = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
  return static_cast<float>(0.5 * base * (1.0 + std::cos(M_PI * std::min(1.0, progress))));
}

float clip_grad_norm(std::vector<Param>& params, float max_norm) {
  if (!params.empty() && params[0].grad.device() != Device::kCpu) {  // through the host: simple, and rare
    std::vector<Param> host;
    for (const auto& p : params) host.push_back({p.name, Tensor(), p.grad.to(Device::kCpu)});
    float norm = clip_grad_norm(host, max_norm);
    for (size_t i = 0; i < params.size(); ++i) params[i].grad = host[i].grad.to(params[i].grad.device());
    return norm;
  }
  double sq = 0;
  for (const auto& p : params) {
    const float* g = p.grad.f32();
    const int64_t n = p.grad.numel();
    for (int64_t k = 0; k < n; ++k) sq += static_cast<double>(g[k]) * g[k];
  }
  float norm = static_cast<float>(std::sqrt(sq));
  if (max_norm > 0 && norm > max_norm) {
    float s = max_norm / (norm + 1e-6f);
    for (auto& p : params) {
      float* g = p.grad.f32();
      const int64_t n = p.grad.numel();
      for (int64_t k = 0; k < n; ++k) g[k] *= s;
    }
  }
  return norm;
}

}  // namespace loom::rt

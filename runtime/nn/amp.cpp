// amp.cpp — emulated fp16/bf16 compute with fp32 master weights and dynamic loss scaling.
#include "loom/rt/nn/amp.hpp"

#include <algorithm>

#include "loom/rt/tensor/finite.hpp"
#include "loom/rt/tensor/ops.hpp"

namespace loom::rt {

namespace {
constexpr float kInitialScale = 65536.0f;
constexpr int kGrowthInterval = 2000;
}  // namespace

MixedPrecision::MixedPrecision(std::string precision)
    : precision_(std::move(precision)), scale_(precision_ == "fp16" ? kInitialScale : 1.0f) {
  if (precision_ != "fp32" && precision_ != "fp16" && precision_ != "bf16")
    throw Error("--precision must be fp32, fp16 or bf16, not '" + precision_ + "'");
}

void MixedPrecision::enter(std::vector<Param>& params) {
  if (!enabled()) return;
  masters_.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& w = params[i].value;
    Tensor& m = masters_[i];
    if (!m.defined() || m.numel() != w.numel() || m.device() != w.device()) m = Tensor::empty(w.shape(), DType::kF32, w.device());
    ops::scale_copy(w.device(), m.f32(), w.f32(), 1.0f, w.numel());
    ops::round_low(w.device(), w.f32(), w.numel(), precision_ == "bf16");
  }
  if (!params.empty()) enter_sharded(params[0].value.device());
}

void MixedPrecision::enter_sharded(Device device) {
  if (!enabled() || device != Device::kCuda) return;
  if (!nonfinite_.defined()) nonfinite_ = Tensor::empty({1}, DType::kF32, Device::kCuda);
  nonfinite_.fill(0.0f);
}

void MixedPrecision::restore_masters(std::vector<Param>& params) {
  if (!enabled()) return;
  for (size_t i = 0; i < params.size() && i < masters_.size(); ++i)
    ops::scale_copy(params[i].value.device(), params[i].value.f32(), masters_[i].f32(), 1.0f, params[i].value.numel());
}

bool MixedPrecision::finite() const {
  if (!enabled() || !nonfinite_.defined()) return true;
  float flag = 0;
  ops::download(Device::kCuda, &flag, nonfinite_.f32(), sizeof flag);
  return flag == 0.0f;
}

bool MixedPrecision::pass_grad(Param& p) {
  if (!enabled()) return true;
  float* g = p.grad.f32();
  const int64_t n = p.grad.numel();
  if (p.grad.device() == Device::kCuda) {
    ops::amp_grad_cuda(g, n, precision_ == "fp16" ? scale_ : 1.0f, precision_ == "bf16", nonfinite_.f32());
    return true;  // finite() reads the flag once, after backward
  }
  // What a 16-bit gradient holds: fp16 scaled, rounded, unscaled (times 1/scale); bf16 rounded.
  const bool fp16 = precision_ == "fp16";
  if (fp16)
    for (int64_t k = 0; k < n; ++k) g[k] *= scale_;
  ops::round_low(Device::kCpu, g, n, !fp16);
  const float inv = fp16 ? 1.0f / scale_ : 1.0f;
  for (int64_t k = 0; k < n; ++k) g[k] *= inv;
  return cpu::all_finite(g, n);
}

bool MixedPrecision::leave(std::vector<Param>& params) {
  restore_masters(params);
  bool ok = true;
  for (auto& p : params) ok = pass_grad(p) && ok;
  return ok && finite();
}

void MixedPrecision::update(bool overflow_anywhere) {
  if (!enabled() || precision_ != "fp16") return;
  if (overflow_anywhere) {
    scale_ = std::max(1.0f, scale_ * 0.5f);
    clean_ = 0;
  } else if (++clean_ >= kGrowthInterval) {
    scale_ = std::min(scale_ * 2.0f, 16777216.0f);
    clean_ = 0;
  }
}

}  // namespace loom::rt

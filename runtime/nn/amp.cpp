// amp.cpp — emulated fp16/bf16 compute with fp32 master weights and dynamic loss scaling.
#include "loom/rt/nn/amp.hpp"

#include <cmath>

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
    float* w = params[i].value.f32();
    const int64_t n = params[i].value.numel();
    masters_[i].assign(w, w + n);
    if (precision_ == "fp16")
      round_to_half(w, static_cast<size_t>(n));
    else
      for (int64_t k = 0; k < n; ++k) w[k] = bf16_to_float(float_to_bf16(w[k]));
  }
}

void MixedPrecision::restore_masters(std::vector<Param>& params) {
  if (!enabled()) return;
  for (size_t i = 0; i < params.size() && i < masters_.size(); ++i)
    std::copy(masters_[i].begin(), masters_[i].end(), params[i].value.f32());
}

bool MixedPrecision::pass_grad(Param& p) {
  if (!enabled()) return true;
  bool finite = true;
  float* g = p.grad.f32();
  const int64_t n = p.grad.numel();
  if (precision_ == "fp16") {  // what an fp16 gradient holds: scaled, rounded, unscaled
    const float inv = 1.0f / scale_;
    for (int64_t k = 0; k < n; ++k) g[k] *= scale_;
    round_to_half(g, static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) {
      g[k] *= inv;
      finite = finite && std::isfinite(g[k]);
    }
  } else {
    for (int64_t k = 0; k < n; ++k) {
      g[k] = bf16_to_float(float_to_bf16(g[k]));
      finite = finite && std::isfinite(g[k]);
    }
  }
  return finite;
}

bool MixedPrecision::leave(std::vector<Param>& params) {
  restore_masters(params);
  bool finite = true;
  for (auto& p : params) finite = pass_grad(p) && finite;
  return finite;
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

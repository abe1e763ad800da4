// precision_policy.cpp — bf16/fp16 agreement across ranks, the AMP pass and overflow skips.
#include "loom/rt/train/precision_policy.hpp"

#include <cmath>

#include "loom/rt/error.hpp"
#include "loom/rt/tensor/ops.hpp"
#include "loom/rt/train/train_config.hpp"
#include "loom/topo/topology.hpp"

namespace loom::rt {

std::string PrecisionPolicy::agree(const TrainConfig& c, const Ranks& ranks, const Reporter& rep, Device device) {
  if (c.precision != Precision::kBf16) return word_of(c.precision);
  // A CUDA rank asks its own GPU (a plain mpirun has no plugin to name the class); 0 when it has
  // bf16, else its compute capability (major * 10 + minor), or -1 for a class without bf16.
  double mine = 0;
  if (device != Device::kCuda) mine = loom::topo::device_has_bf16(c.gpu_class) ? 0 : -1;
  else if (const int cc = ops::cuda_capability(); cc < 80) mine = cc;
  const std::vector<double> lacking = ranks.gather(mine);
  for (size_t r = 0; r < lacking.size(); ++r)
    if (lacking[r] != 0) {
      const int rcc = static_cast<int>(lacking[r]);
      const std::string what = lacking[r] > 0 ? "compute capability " + std::to_string(rcc / 10) + "." + std::to_string(rcc % 10)
                                              : "LOOM_GPU_CLASS" + (static_cast<int>(r) == ranks.me ? "=" + c.gpu_class : std::string());
      rep.say("rank " + std::to_string(r) + " has a GPU without bf16 (" + what +
                  "): every rank uses fp16 with loss scaling instead",
              LogFields(LogLevel::kWarning, {{"event", "precision"}, {"precision", "fp16"}}));
      return "fp16";
    }
  return "bf16";
}

PrecisionPolicy::PrecisionPolicy(const TrainConfig& c, const Ranks& ranks, Reporter& rep, Device device)
    : asked_(word_of(c.precision)), inject_step_(c.inject_overflow_step), rep_(rep), amp_(agree(c, ranks, rep, device)) {}

void PrecisionPolicy::announce(Device device) const {
  if (!enabled()) return;
  const std::string how = device == Device::kCuda
                              ? " on CUDA (GEMMs on tensor cores: cuBLAS CUBLAS_COMPUTE_32F_FAST_" +
                                    std::string(precision() == "bf16" ? "16BF" : "16F") + "; weights and gradients rounded as on the CPU)"
                              : " (emulated by rounding on the CPU)";
  rep_.say("mixed precision " + precision() + how + ", fp32 master weights" +
               (precision() == "fp16" ? ", loss scale " + num(amp_.scale()) : std::string()),
           LogFields(LogLevel::kInfo, {{"event", "precision"}}));
}

void PrecisionPolicy::enter(std::vector<Param>& params) {
  amp_.enter(params);
  passed_.assign(params.size(), 0);
  finite_ = true;
}

void PrecisionPolicy::enter_sharded(size_t n, Device device) {
  amp_.enter_sharded(device);
  passed_.assign(n, 0);
  finite_ = true;
}

void PrecisionPolicy::grad_ready(std::vector<Param>& params, size_t i, int64_t step) {
  if (i >= passed_.size() || passed_[i]) return;
  passed_[i] = 1;
  finite_ = amp_.pass_grad(params[i]) && finite_;
  if (step == inject_step_ && i == 0) {
    const float inf = INFINITY;  // as an fp16 overflow would leave it
    ops::upload(params[0].grad.device(), params[0].grad.f32(), &inf, sizeof inf);
    finite_ = false;
  }
}

bool PrecisionPolicy::leave(std::vector<Param>& params, int64_t step) {
  for (size_t i = 0; i < params.size(); ++i) grad_ready(params, i, step);
  amp_.restore_masters(params);
  return finite_ && amp_.finite();
}

bool PrecisionPolicy::skip(bool finite, int64_t step) {
  if (!enabled() && inject_step_ < 0) return false;
  amp_.update(!finite);
  if (finite) return false;  // no rank steps alone
  rep_.overflow(step + 1, amp_.scale());
  return true;
}

}  // namespace loom::rt

// precision_policy.hpp — the compute precision every rank agrees on (bf16 only when every
// rank's GPU has it, else fp16 with loss scaling everywhere), the mixed-precision pass around
// each step (nn/amp.hpp), and the decision to skip a step whose gradients overflowed anywhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/rt/nn/amp.hpp"
#include "loom/rt/train/ranks.hpp"
#include "loom/rt/train/reporter.hpp"

namespace loom::rt {

struct TrainConfig;

class PrecisionPolicy {
 public:
  // Collective with --precision bf16: every rank says whether its device has bf16 (a CUDA rank's
  // own GPU, from compute capability 8.0; otherwise its GPU class, LOOM_GPU_CLASS).
  PrecisionPolicy(const TrainConfig& c, const Ranks& ranks, Reporter& rep, Device device);
  const std::string& precision() const { return amp_.precision(); }
  bool enabled() const { return amp_.enabled(); }
  // Says what runs where: emulated by rounding on the CPU, tensor-core GEMMs on CUDA.
  void announce(Device device) const;
  void enter(std::vector<Param>& params);
  // Whether gradients need a pass as backward finishes each (grad_ready), before they are sent.
  bool passes_gradients() const { return amp_.enabled() || inject_step_ >= 0; }
  // Parameter i's gradient is final: its pass through the precision (once per step).
  void grad_ready(std::vector<Param>& params, size_t i, int64_t step);
  // After backward: the gradients not passed yet, the masters back; false when this rank's
  // gradients overflowed (or a test injected that).
  bool leave(std::vector<Param>& params, int64_t step);
  // --zero 3: the masters are the shards and the values are rounded as each layer is gathered
  // (Zero3::set_precision), each gradient passed before its reduce-scatter: enter and leave only
  // count the passes (n parameters).
  void enter_sharded(size_t n, Device device);
  bool leave_sharded() const { return finite_ && amp_.finite(); }
  // After the ranks agreed on `finite`: whether the optimizer step is skipped (then the loss
  // scale is lowered and the overflow reported).
  bool skip(bool finite, int64_t step);
  MixedPrecision& amp() { return amp_; }
  const MixedPrecision& amp() const { return amp_; }

 private:
  static std::string agree(const TrainConfig& c, const Ranks& ranks, const Reporter& rep, Device device);
  std::string asked_;
  int64_t inject_step_;
  Reporter& rep_;
  MixedPrecision amp_;
  std::vector<char> passed_;  // this step: gradients already through grad_ready
  bool finite_ = true;
};

}  // namespace loom::rt

// amp.hpp — mixed precision on fp32 master weights. The forward and backward see the weights
// rounded to fp16 or bf16, and the gradients pass through that precision: with fp16 they are
// scaled by a dynamic loss scale first (start 2^16, x2 after 2000 clean steps, x0.5 and the step
// skipped on overflow). On the CPU the low precision is emulated by rounding; on CUDA the same
// rounding runs in kernels and the GEMMs go to tensor cores (ops::set_cuda_gemm_precision), so
// the activations they read are rounded too. The overflow decision is the caller's to agree
// across ranks.
#pragma once

#include <string>
#include <vector>

#include "loom/rt/tensor/param.hpp"

namespace loom::rt {

class MixedPrecision {
 public:
  explicit MixedPrecision(std::string precision);  // fp32 | fp16 | bf16
  bool enabled() const { return precision_ != "fp32"; }
  const std::string& precision() const { return precision_; }
  float scale() const { return scale_; }

  // Rounds the parameters to the compute precision, keeping the fp32 masters.
  void enter(std::vector<Param>& params);
  // Restores the masters; passes the gradients through the precision (scaled, rounded,
  // unscaled). Returns false when a gradient overflowed (inf/NaN) on this rank.
  bool leave(std::vector<Param>& params);
  // The two halves of leave(), for a caller that passes each gradient as backward finishes it
  // (so that it can be sent while backward goes on): one gradient (false on overflow), and the
  // masters back once backward is done.
  // On CUDA the finite check is not read back per gradient (pass_grad returns true): finite()
  // reads it once, after backward.
  bool pass_grad(Param& p);
  void restore_masters(std::vector<Param>& params);
  // --zero 3: the caller keeps the masters (its shards) and rounds what it gathers; this only
  // readies the overflow flag of gradients on `device`.
  void enter_sharded(Device device);
  bool finite() const;  // no gradient on the GPU overflowed since enter() (true on the CPU)
  // After all ranks agreed: on overflow halve the scale (the step is skipped), otherwise count a
  // clean step and double the scale every 2000 of them.
  void update(bool overflow_anywhere);
  int clean_steps() const { return clean_; }
  void restore(float scale, int clean) {  // from a checkpoint
    scale_ = scale;
    clean_ = clean;
  }

 private:
  std::string precision_;
  float scale_;
  int clean_ = 0;
  std::vector<Tensor> masters_;  // on the parameters' device
  Tensor nonfinite_;             // CUDA: a device flag, 1 once a gradient overflowed this step
};

}  // namespace loom::rt

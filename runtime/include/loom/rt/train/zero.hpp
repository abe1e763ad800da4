// zero.hpp — ZeRO-1 (Rajbhandari et al., 2020): the optimizer's state sharded over the ranks.
// Gradients are reduce-scattered bucket by bucket (GradExchange::set_sharded); each rank updates
// the parameters of its chunk of every bucket with the moments of that chunk alone, and an
// allgather of each bucket gives every rank the new parameters. Checkpoints hold the whole
// moments per parameter (gathered), so they resume on any number of ranks, sharded or not.
// Parameters on the CPU live in one flat buffer per bucket (views of it, as the gradients are
// views of the exchange's): updated and gathered in place. Gradients summed on the GPU (NCCL,
// GradExchange::set_device_comm): the shards live in device memory beside the packed buckets;
// each rank copies its chunk of the parameters into a packed buffer of weights, updates it there,
// and the allgather (NCCL's) brings every chunk, which is copied back into the parameters. Without
// a device communicator, parameters on a GPU keep their shards in host memory and are updated
// there (as ZeRO-Offload does), with the reduced gradients staged there by the exchange.
#pragma once

#include <cstddef>
#include <vector>

#include "loom/rt/comm/grad_exchange.hpp"
#include "loom/rt/nn/optim.hpp"

namespace loom::rt {

class ZeroOptimizer {
 public:
  ZeroOptimizer(GradExchange& exchange, Communicator& comm) : ex_(exchange), comm_(comm) {}
  // After GradExchange::finish(): clip by the global norm (0: off), update this rank's chunks,
  // gather the parameters. Returns the bytes this rank sent.
  size_t step(Optimizer& opt, std::vector<Param>& params, float lr, float clip);
  // Collective (every rank at once): the whole moments per parameter, shaped as the parameters
  // (v empty for SGD). Before the first step: what the optimizer holds.
  void gather_moments(const Optimizer& opt, const std::vector<Param>& params, std::vector<Tensor>* m,
                      std::vector<Tensor>* v);
  size_t state_bytes() const;  // this rank's moments

 private:
  struct Shard {
    std::vector<float> m, v, w;  // the chunk's moments in host memory; w: its parameters during a step (GPU)
    Tensor dm, dv;               // packed buckets: the chunk's moments beside them, on their device
  };
  bool packed() const { return ex_.device_comm() != nullptr; }
  void shard(Optimizer& opt, const std::vector<Param>& params);
  void bind_weights(std::vector<Param>& params);  // CPU: each parameter a view of its bucket's weights
  void clip_chunks(float clip);                   // torch's clip_grad_norm_ over every rank's chunks
  size_t step_packed(Optimizer& opt, std::vector<Param>& params, float lr);
  void gather_packed(const std::vector<Param>& params, bool second, std::vector<Tensor>* out);
  GradExchange& ex_;
  Communicator& comm_;
  std::vector<Shard> shards_;    // one per bucket
  std::vector<Tensor> weights_;  // one per bucket, the parameters in the exchange's flat order: CPU
                                 // (their storage), or packed on the device (a copy during a step)
};

}  // namespace loom::rt

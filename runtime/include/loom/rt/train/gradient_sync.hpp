// gradient_sync.hpp — each step's exchange between ranks: the gradients (comm/grad_exchange.hpp:
// buckets overlapped with backward, fp16 or PowerSGD payloads) and, riding in the same
// allreduce, the few numbers every rank must decide alike (the loss, an overflow anywhere, a
// stop signal anywhere, the checkpoint's shard flags and rank 0's clock). One process: no
// exchange, its own values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/rt/comm/grad_exchange.hpp"
#include "loom/rt/train/checkpoint_writer.hpp"
#include "loom/rt/train/ranks.hpp"
#include "loom/rt/train/reporter.hpp"
#include "loom/rt/train/task.hpp"
#include "loom/rt/train/zero.hpp"
#include "loom/rt/train/zero3.hpp"

namespace loom::rt {

struct TrainConfig;

// What a step ends with, on this rank before finish() and agreed by every rank after it.
struct StepVotes {
  double loss = 0;        // this rank's mean loss over its share; after: the global batch's
  bool finite = true;     // no gradient overflowed (anywhere, after)
  bool stop = false;      // a stop signal arrived (anywhere, after)
  bool time_due = false;  // after: --ckpt-every-min is due by rank 0's clock
};

// Each rank's persistent model state in bytes (the summary's *_bytes_per_rank).
struct StateBytes {
  size_t params = 0, grads = 0, optimizer = 0;
};

class GradientSync {
 public:
  // `device`: where the gradients live; several CUDA ranks sum them with NCCL where they can
  // (TrainConfig::gpu_backend).
  GradientSync(const TrainConfig& c, const Ranks& ranks, const Reporter& rep, Device device);
  // Told by backward as each gradient is final (empty when buckets do not overlap backward).
  const std::function<void(size_t)>& ready() const { return ready_; }
  void begin(std::vector<Param>& params);
  // After backward: the sum of every rank's gradients, and the votes agreed (the loss counted with
  // `weight`, this rank's share of the global batch).
  StepVotes finish(StepVotes mine, float weight, CheckpointWriter& ckpt, int64_t step);
  // The update after finish(): clipping (0: off) and the optimizer's step, sharded with --zero 1
  // and 3.
  void apply(Optimizer& opt, std::vector<Param>& params, float lr, float clip);
  // --zero 3 on several ranks: after the resume, the parameters go to their shards (zero3.hpp);
  // until then, and without --zero 3, the model keeps them whole.
  void shard_params(Task& task, Optimizer& opt);
  Zero3* zero3() { return zero3_ && zero3_->sharded() ? zero3_.get() : nullptr; }
  // Every parameter whole while it lives, on the ranks where `here` (collective; nothing without
  // --zero 3): checkpoints (every rank writes a slice), evaluation and export (rank 0) read them.
  class Whole {
   public:
    Whole(Zero3* z, bool here) : z_(z) {
      if (z_) z_->gather_all(here);
    }
    ~Whole() {
      if (z_) z_->release_all();
    }
    Whole(const Whole&) = delete;
    Whole& operator=(const Whole&) = delete;

   private:
    Zero3* z_;
  };
  Whole whole(bool here = true) { return Whole(zero3(), here); }
  // The whole moments per parameter for a checkpoint (collective under --zero 1).
  void moments(const Optimizer& opt, const std::vector<Param>& params, std::vector<Tensor>* m, std::vector<Tensor>* v);
  size_t optimizer_bytes(const Optimizer& opt) const;  // this rank's optimizer state
  StateBytes state_bytes(const Optimizer& opt, const std::vector<Param>& params) const;
  size_t comm_bytes() const { return comm_bytes_; }  // sent by this rank, summed over the run
  double comm_thread_seconds() { return exchange_.thread_busy_seconds(); }  // GradExchange::thread_busy_seconds
  GradExchange& exchange() { return exchange_; }
  bool powersgd() const { return powersgd_; }

 private:
  void report_compression(int64_t step);
  // The NCCL communicator for several CUDA ranks, or null with *why (collective).
  std::unique_ptr<DeviceCollectives> device_collectives(const TrainConfig& c, Device device, std::string* why);
  Ranks ranks_;
  const Reporter& rep_;
  std::string compress_;
  bool powersgd_;
  std::unique_ptr<DeviceCollectives> device_comm_;  // NCCL; outlives the exchange's thread
  GradExchange exchange_;
  std::function<void(size_t)> ready_;
  std::unique_ptr<ZeroOptimizer> zero_;  // --zero 1 on several ranks
  std::unique_ptr<Zero3> zero3_;         // --zero 3 on several ranks
  size_t comm_bytes_ = 0;
  size_t sent3_ = 0;  // what zero3_ had sent when last counted
  bool reported_compression_ = false;
};

}  // namespace loom::rt

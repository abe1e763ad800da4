// zero3.hpp — ZeRO-3 (Rajbhandari et al., 2020; PyTorch's FSDP): the parameters, the gradients
// and the optimizer's state sharded over the ranks. Each parameter group of the model (a layer:
// param_gate.hpp) is one flat buffer, of which each rank keeps its chunk (the chunk the ring's
// reduce-scatter leaves on it) as fp32 master weights, reduced gradient and moments, in host
// memory. Just before a group's forward or backward its chunks are allgathered into a whole buffer
// that the parameters view (on a GPU: copied up, staged through host memory), and released after;
// the next group's gather is queued while the current one computes (prefetch); as backward
// finishes a group its gradients are reduce-scattered and this rank's chunk kept. The head's group
// stays whole from the end of forward to its backward, which comes next. The optimizer steps each
// chunk with its own moments; nothing is gathered after the step. Collectives run in order on one
// communication thread; the caller's own collectives wait until finish_backward(). Checkpoints,
// evaluation and export see every group whole between gather_all() and release_all(), so a
// checkpoint holds whole tensors and resumes on any number of ranks at any --zero level.
#pragma once

#include <cstddef>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include "loom/rt/comm/comm.hpp"
#include "loom/rt/nn/optim.hpp"
#include "loom/rt/nn/param_gate.hpp"
#include "loom/rt/train/task.hpp"

namespace loom::rt {

class Zero3 : public ParamGate {
 public:
  // `device`: where the model computes; `half_grads`: gradients reduce-scattered with fp16
  // payloads (--grad-compress fp16).
  Zero3(Communicator& comm, Device device, bool half_grads = false);
  ~Zero3() override;
  // Takes this rank's chunk of every group from the parameters' whole values (the model's
  // initialization or a checkpoint's, alike on every rank) and from the optimizer's restored
  // moments, lets the whole values and gradients go, and makes itself the task's gate.
  void shard(Task& task, Optimizer& opt);
  // Before shard(): each rank's part of every group in proportion to weights[r] (one per rank,
  // positive: --shard-by memory gives the ranks' LOOM_DEVICE_MEMORY), not the even chunks; the
  // gathers and reduce-scatters then go around the world's ring in fp32.
  void set_shard_weights(std::vector<double> weights) { weights_ = std::move(weights); }
  // n elements in proportion to `weights`: whole counts that sum to n, the remainder to the
  // largest fractions (ties to the lower rank), as loom.torch's fully_shard cuts them.
  static std::vector<size_t> shard_counts(size_t n, const std::vector<double>& weights);
  bool sharded() const { return params_ != nullptr; }
  // Mixed precision: `round` rounds a gathered group's values to the compute precision (in place,
  // on the host, before they go to the model's device; not between gather_all and release_all); `pass(i)` passes parameter i's gradient through it before the
  // reduce-scatter (PrecisionPolicy::grad_ready).
  void set_precision(std::function<void(float*, int64_t)> round, std::function<void(size_t)> pass);
  void enter(size_t group, bool backward) override;
  void leave(size_t group, bool backward) override;
  // After backward: every reduce-scatter done (errors rethrown); the communicator is free again.
  void finish_backward();
  // Clips by the global norm of the reduced gradients (0: off) and updates this rank's chunks.
  void step(Optimizer& opt, float lr, float clip);
  // Collective: every group whole until release_all() (checkpoints, evaluation, export) on the
  // ranks that `keep` them; the others only send their chunks.
  void gather_all(bool keep);
  void release_all();
  // Collective: the whole moments per parameter, shaped as the parameters (v empty for SGD).
  void gather_moments(const Optimizer& opt, std::vector<Tensor>* m, std::vector<Tensor>* v);
  // This rank's persistent state, in bytes: its chunks of the parameters, of the gradients, of the
  // moments.
  size_t param_bytes() const;
  size_t grad_bytes() const;
  size_t optimizer_bytes() const;
  size_t bytes_sent() const { return sent_; }  // by the gathers and reduce-scatters, over the run

 private:
  struct Group {
    size_t first = 0, end = 0;      // its parameters
    size_t n = 0, begin = 0, count = 0;  // floats in all; this rank's chunk
    std::vector<size_t> counts;          // every rank's chunk (--shard-by memory; empty: even)
    Tensor w, g, m, v;              // the chunk: master weights, reduced gradient, moments (v: AdamW)
    Tensor whole;                   // the gathered values (host), while gathered
    std::shared_future<void> gathered;  // valid from the gather's posting to the release
    bool bound = false;             // the parameters hold the gathered values
    Tensor grads;                   // backward, on the CPU: the gradients (the parameters' views of it)
  };
  class Queue;  // the communication thread
  Group take_chunk(const ParamGroup& pg, const std::vector<Param>& ps, const Optimizer& opt, bool restored) const;
  void post_gather(Group& g);
  // On the communication thread: the group's whole values from every rank's chunk of `data`, and
  // the sum over the ranks into this rank's chunk (fp16 payloads with half_ and even chunks).
  void gather_flat(float* data, const Group& g);
  void reduce_flat(float* data, const Group& g);
  void bind(Group& g, bool round);  // round: to the compute precision (set_precision)
  void alloc_grads(Group& g);
  void reduce_grads(Group& g);
  void release(Group& g);
  void check_group(size_t group) const;
  // Whole buffers of n floats, kept for the next layer of that size (the caching allocator's
  // budget would hand them back between the layers of one step): recycle() keeps a buffer no
  // view shares (a checkpoint being written may still hold one), up to kSpares of them.
  Tensor buffer(size_t n);
  void recycle(Tensor t);
  static constexpr size_t kSpares = 4;
  std::mutex pool_mu_;  // buffers come back from the communication thread too
  std::vector<Tensor> spare_;

  Communicator& comm_;
  const Device device_;
  const bool half_;
  std::vector<Param>* params_ = nullptr;
  std::vector<Group> groups_;
  std::vector<std::vector<int64_t>> shapes_;  // every parameter's
  std::unique_ptr<Queue> queue_;
  std::vector<std::shared_future<void>> reducing_;  // this backward's reduce-scatters
  std::function<void(float*, int64_t)> round_;
  std::function<void(size_t)> pass_;
  bool all_ = false;  // gather_all() in force
  size_t sent_ = 0;
  std::vector<double> weights_;  // empty: even chunks
};

}  // namespace loom::rt

// stop_signal.hpp — the request to stop that SIGUSR1 (Slurm's --signal warning) or SIGTERM
// (preemption) leaves in a flag: the loop finishes the step, checkpoints and exits 75.
#pragma once

#include <atomic>

namespace loom::rt {

class StopSignal {
 public:
  explicit StopSignal(const std::atomic<int>* flag) : flag_(flag) {}
  // On this rank; the gradient sync makes every rank agree on it.
  bool requested() const { return flag_ && flag_->load() != 0; }

 private:
  const std::atomic<int>* flag_;
};

}  // namespace loom::rt

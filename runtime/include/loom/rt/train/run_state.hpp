// run_state.hpp — a run as its checkpoints hold it, both ways: the identity a resumed run must
// share with the run that wrote the checkpoint (train.config; another total of steps is allowed
// where the learning-rate schedule permits), the snapshot handed to the checkpoint writer at a
// step boundary, and restoring every part of a run from a checkpoint.
#pragma once

#include <cstdint>
#include <string>

#include "loom/rt/nn/optim.hpp"
#include "loom/rt/train/batch_plan.hpp"
#include "loom/rt/train/checkpoint_writer.hpp"
#include "loom/rt/train/gradient_sync.hpp"
#include "loom/rt/train/precision_policy.hpp"
#include "loom/rt/train/ranks.hpp"
#include "loom/rt/train/reporter.hpp"
#include "loom/rt/train/task.hpp"

namespace loom::rt {

// The parts of a run whose state a checkpoint holds.
struct RunParts {
  Task& task;
  Optimizer& opt;
  PrecisionPolicy& precision;
  BatchPlan& plan;
  GradientSync& sync;
};

// Where a run stands: steps done, and the epoch and batch the next step takes.
struct Position {
  int64_t step = 0, epoch = 0, batch = 0;
};

class RunState {
 public:
  RunState(const TrainConfig& c, const Ranks& ranks, const Reporter& rep, const Task& task, int64_t total,
           const std::string& precision);
  const std::string& identity() const { return identity_; }
  // Restores the run from the checkpoint `ckpt` finds (--resume), or returns the start.
  // Collective: the ranks check that they resume at the same step.
  Position resume(CheckpointWriter& ckpt, RunParts parts);
  CheckpointState snapshot(RunParts parts, Position next) const;

 private:
  void check_total(const std::string& path, const Checkpoint& k) const;
  const TrainConfig& c_;
  Ranks ranks_;
  const Reporter& rep_;
  int64_t total_;
  std::string identity_;
};

}  // namespace loom::rt

// sweep.hpp — the sweep controller: proposes trials, writes their commands for the array job's
// tasks, reads their metrics as they end, proposes the next, and keeps everything in --dir so a
// stopped sweep resumes where it was.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "loom/log.hpp"
#include "spec.hpp"
#include "trial.hpp"

namespace loom::sweep {

struct SweepOptions {
  std::string dir;
  bool local = false;  // --executor local
  std::string tensorboard;  // --tensorboard DIR: a TensorBoard run per trial, HParams sessions ("" none)
  std::atomic<bool>* interrupted = nullptr;
  const Logger* log = nullptr;  // progress lines; none when null
};

struct SweepResult {
  std::vector<Trial> trials;
  int best = -1;  // index into trials, -1 when none succeeded
  std::string job;  // the (last) array job
  bool complete = false;
  std::string error;  // why it stopped early
  std::vector<double> overhead;  // per trial: seconds from the end of `after` to this proposal
  std::vector<double> start_lag;  // ... to this trial's start (the scheduler included)
};

// Runs (or resumes) the sweep; throws SpecError for a folder made by another spec.
SweepResult run_sweep(const Spec& spec, const SweepOptions& opts);

// {"trials": [...], "best": {"value", "params"}, ...} (Contract 11).
std::string result_json(const Spec& spec, const SweepResult& r);
std::string result_text(const Spec& spec, const SweepResult& r);

}  // namespace loom::sweep

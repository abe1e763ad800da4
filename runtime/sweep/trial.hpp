// trial.hpp — one trial of a sweep and its folder, DIR/trials/ID/: trial.json (the point and
// when it was proposed), command (written last, atomically: the array task waits for it),
// metrics.jsonl (the {metrics_file}), start, end and rc (written by the trial's wrapper),
// result.json (the outcome, written by loom-sweep).
#pragma once

#include "loom/rt/proc/process.hpp"

#include <string>
#include <vector>

#include "space.hpp"

namespace loom::sweep {

enum class TrialState { Proposed, Ok, Failed };

struct Trial {
  int id = 0;
  std::vector<double> u;  // the unit-cube point
  Point values;
  TrialState state = TrialState::Proposed;
  double value = 0;  // the metric, when Ok
  std::string error;
  int after = -1;  // the trial whose end led to this proposal (-1: the first batch)
  double proposed_at = 0, start = 0, end = 0;  // Unix seconds
  int rc = -1;
  std::string slurm_job;  // SLURM_ARRAY_JOB_ID_SLURM_ARRAY_TASK_ID, from the wrapper
};

std::string trial_dir(const std::string& sweep_dir, int id);
// Writes trial.json, then the command (atomically), and stamps proposed_at.
void write_proposal(const std::string& sweep_dir, Trial& t, const std::string& command);
// True when the wrapper has written rc; fills start, end, rc and slurm_job.
bool read_finish(const std::string& sweep_dir, Trial& t);
bool has_started(const std::string& sweep_dir, const Trial& t);
// The metric's value: the last line of the metrics file (JSON lines) that has it as a number.
// Throws loom::Error saying what is wrong.
double read_metric(const std::string& metrics_file, const std::string& metric);
// result.json, and the trial back from its folder (nullopt-like: false when not proposed).
void write_result(const std::string& sweep_dir, const Trial& t);
bool load_trial(const std::string& sweep_dir, const Space& space, int id, Trial& t);

double now_seconds();
std::string read_text(const std::string& path);  // "" when unreadable
using loom::rt::write_file_atomic;  // loom/rt/proc/process.hpp

}  // namespace loom::sweep

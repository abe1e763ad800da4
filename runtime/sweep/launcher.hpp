// launcher.hpp — how trials run: as one Slurm array job (sbatch --array=FIRST-LAST%PARALLEL of
// the sweep's wrapper, trial.sh, whose tasks wait for their command), or as local processes
// running the same wrapper (--executor local, for machines without Slurm).
#pragma once

#include "loom/rt/proc/process.hpp"

#include <memory>
#include <string>
#include <vector>

namespace loom::sweep {

class Launcher {
 public:
  virtual ~Launcher() = default;
  // The trials `ids` ("0-23", "5,7-23") will run, at most `parallel` at a time.
  virtual void start(const std::string& ids, int parallel) = 0;
  // Trial `id`'s command has been written.
  virtual void launched(int id) = 0;
  // Of the trials that started and have no exit status yet, those whose task is gone.
  virtual std::vector<int> lost(const std::vector<int>& started) = 0;
  // Ends whatever is still queued or running (the sweep is over or interrupted).
  virtual void cancel() = 0;
  virtual std::string job() const = 0;  // the array job's ID ("local" without Slurm)
  // Slurm: whether the array job is still known to squeue (resume reattaches to it).
  virtual bool alive() = 0;
};

// Writes DIR/trial.sh, the wrapper every trial runs under.
void write_wrapper(const std::string& sweep_dir);
std::unique_ptr<Launcher> slurm_launcher(const std::string& sweep_dir, std::vector<std::string> sbatch_args,
                                         std::string existing_job = "");
std::unique_ptr<Launcher> local_launcher(const std::string& sweep_dir);

using loom::rt::run_program;  // loom/rt/proc/process.hpp

}  // namespace loom::sweep

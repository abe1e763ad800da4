// slurm.hpp — the one Slurm job client that loom-sweep (its trial array) and loom-serve's
// controller (its replicas) share: sbatch, squeue, scancel, scontrol suspend and resume, run as
// programs (argv, never a shell, with a timeout), with Slurm's own words in every error.
#pragma once

#include <string>
#include <vector>

namespace loom::rt::slurm {

// sbatch --parsable OPTIONS SCRIPT: the new job's ID. Throws rt::Error with sbatch's own words
// (or "not found" when Slurm's commands are not on PATH, naming `hint`).
std::string submit(const std::vector<std::string>& options, const std::string& script, const std::string& hint = "");

// One line of squeue: %i %T %r %N %K %k (an array task's index in `array_task`, "N/A" else).
struct Job {
  std::string id, state, reason, node, array_task, comment;
};
// squeue -h with `filter` (-j, -u, --name, -t ...): its jobs. Throws rt::Error when squeue fails.
std::vector<Job> query(const std::vector<std::string>& filter);

// scancel OPTIONS ID (OPTIONS: --batch --signal=TERM for a drain). False when scancel failed.
bool cancel(const std::string& id, const std::vector<std::string>& options = {});

// scontrol suspend ID / scontrol resume ID: "" when Slurm did it, else its own words (only an
// operator, an administrator, SlurmUser or root may; a job that is not running cannot be).
std::string suspend(const std::string& id);
std::string resume(const std::string& id);

}  // namespace loom::rt::slurm

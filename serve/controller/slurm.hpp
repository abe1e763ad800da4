// slurm.hpp — a service's replicas as Slurm jobs: each is `sbatch` of the state folder's
// replica.sh (loom-serve on the spec's model) under the job name loom-<service>, with a comment
// naming the state folder, so that a controller started again finds its own jobs (squeue) and
// no one else's, and never submits one twice.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace loom::serve {

struct ReplicaJobSpec {
  std::string service;    // metadata.name; the job name is loom-<service>
  std::string state_dir;  // absolute
  std::string partition;  // empty: the default
  std::string qos;        // empty: the user's default
  bool preemptible = false;  // a spot partition or QOS: Slurm may preempt its jobs
  int gpus = 0, cpus = 1;
  std::string mem;        // sbatch --mem (MiB, "8192M"); empty: the partition's default
};

struct JobInfo {
  std::string id, state, reason, node;  // squeue's %i %T %r %N
};

// A KServe quantity (8Gi, 512Mi, 2G, 1000M, 1T) as sbatch --mem's MiB ("8192M"); "" for "".
std::string slurm_memory(const std::string& quantity);

// Writes STATE/replica.sh: loom-serve (the running binary) on the spec as a job step (srun), with
// the Loom plugin's --loom-bind=gpu (numa when `gpus` is 0) where Slurm has the plugin, announcing
// its address in STATE/replicas/$SLURM_JOB_ID.json once it listens.
void write_replica_script(const std::string& state_dir, const std::string& loom_serve, const std::string& spec_file,
                          const std::string& bind, const std::string& token_file,
                          const std::vector<std::string>& serve_args, int gpus);

// The path where replica `job` announces itself.
std::string ready_file(const std::string& state_dir, const std::string& job);
// What ended replicas left in STATE_DIR/replicas: the ready file of a job not in `live` (a
// replica that was killed cannot remove its own) goes, and of the logs of such jobs only the
// newest `keep_logs` stay (they say why a replica failed; a long-lived service would otherwise
// pile up one per replica ever started). Returns how many files were removed.
int prune_replica_files(const std::string& state_dir, const std::set<std::string>& live, size_t keep_logs);

class SlurmJobs {
 public:
  explicit SlurmJobs(ReplicaJobSpec s) : s_(std::move(s)) {}
  // Submits one replica; returns its job ID. Throws rt::Error with sbatch's own words.
  std::string submit() const;
  // The replica jobs squeue knows (every state), this state folder's only. Throws when squeue fails.
  std::vector<JobInfo> list() const;
  // SIGTERM to the replica (loom-serve drains, then the job ends).
  void terminate(const std::string& id) const;
  void cancel(const std::string& id) const;  // scancel: pending ones
  // scontrol suspend / resume: "" when done, else Slurm's words (it needs an operator's rights).
  std::string suspend(const std::string& id) const;
  std::string resume(const std::string& id) const;
  // The last line of the replica's log (what it said before it failed), at most 300 bytes; and
  // whether its last 4 KiB hold `needle` (slurmstepd's "CANCELLED ... DUE TO PREEMPTION").
  std::string log_tail(const std::string& id) const;
  bool log_says(const std::string& id, const std::string& needle) const;
  std::string job_name() const { return "loom-" + s_.service; }
  std::string comment() const { return "loom-controller:" + s_.state_dir; }
  const ReplicaJobSpec& spec() const { return s_; }

 private:
  ReplicaJobSpec s_;
};

}  // namespace loom::serve

// step_plan.hpp — what the plugin applies on one node of a step: from the topology and what
// Slurm gave the step (GPUs, cores, task count) to each local task's CPU set and environment.
// Pure computation on libloomtopo, no Slurm calls, so it is unit-tested without a cluster.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "config.hpp"
#include "loom/topo/topology.hpp"

namespace loom::spank {

struct StepInfo {
  int local_tasks = 0;
  std::vector<int> step_gpus;          // SLURM_STEP_GPUS: physical indices (may be empty)
  std::vector<std::string> cuda_ids;   // CUDA_VISIBLE_DEVICES as Slurm set it, same order
  std::string alloc_cores;             // S_STEP_ALLOC_CORES: Slurm's abstract core ids
  Bind bind = Bind::kRing;
  std::string nic = "auto";
};

struct TaskPlan {
  std::vector<int> cpus;                                  // OS CPU ids for sched_setaffinity
  std::vector<std::pair<std::string, std::string>> env;   // variables of Contract 2
  std::string summary;                                    // "gpu 1 (a100), cpus 0-3, nic mlx5_0 (PIX)"
};

struct StepPlan {
  Bind bind = Bind::kNone;
  std::vector<TaskPlan> tasks;
  std::vector<std::string> notes;  // things the user should hear about (fallbacks)
};

// Slurm's abstract core ids ("0-3,8") to the OS CPU ids of those cores' hardware threads.
std::vector<int> slurm_cores_to_cpus(const loom::topo::Topology& t, const std::string& cores);

// "0,1,2" -> {0,1,2}; "" -> {}. Throws loom::topo::Error on anything else.
std::vector<int> parse_index_list(const std::string& text, const char* what);

// Throws loom::topo::Error when the step cannot be placed on this topology.
StepPlan plan_step(const loom::topo::Topology& t, const StepInfo& step);

}  // namespace loom::spank

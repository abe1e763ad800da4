// placement.hpp — where each of N local tasks runs: its GPU(s), its CPU set (a fair share of
// its GPU's NUMA node), its nearest NIC, and rank order along the best GPU ring.
#pragma once

#include <string>
#include <vector>

#include "loom/topo/ring.hpp"
#include "loom/topo/topology.hpp"

namespace loom::topo {

enum class BindMode { kRing, kGpu, kNuma };

// "ring" | "gpu" | "numa"; throws Error naming the allowed values.
BindMode parse_bind_mode(const std::string& word);
std::string bind_mode_word(BindMode m);

struct PlaceRequest {
  int ntasks = 0;
  std::vector<int> gpus;      // allowed GPU indices; empty = every GPU of the node
  bool gpus_given = false;    // an explicitly empty list is an error, not "all"
  std::vector<int> cpus;      // allowed OS CPU ids; empty = every CPU of the node
  bool cpus_given = false;
  BindMode mode = BindMode::kRing;
  bool oversubscribe = false;  // allow more tasks than CPUs (tasks then share CPUs)
  std::string nic = "auto";    // "auto" | "none" | a NIC name
};

struct TaskPlacement {
  int local_rank = 0;
  std::vector<int> gpus;
  std::vector<int> cpus;
  int numa = -1;
  std::string nic;       // empty when none
  std::string nic_path;  // path word from the task's GPU to its NIC
};

struct Placement {
  BindMode mode = BindMode::kRing;
  Ring ring;
  std::vector<TaskPlacement> tasks;
};

// Throws Error for impossible requests (no GPUs, unknown GPU/CPU/NIC, too many tasks, ...).
Placement place(const Topology& t, const PlaceRequest& req);

}  // namespace loom::topo

// simulate.hpp — `loom-topo simulate` (Contract 10): what placement is worth on a cluster.
// An alpha-beta model of NCCL's ring and tree allreduce over the node topology model (NVLink,
// PCIe, NICs) and a two-level fat tree, and a workload of jobs placed on a shared cluster by
// Slurm alone or with Loom. Every constant and assumption is in doc/simulate.md.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "loom/topo/topology.hpp"

namespace loom::topo::sim {

struct NodeType {
  std::string shape;  // dgx1v | dgxa100 | hgxh100 | hgxh200 | pcie8 | a topology file
  Topology topo;
  int nics = 0;            // NICs NCCL may use (the first `nics` of the node's NICs)
  double nic_gbps = 100;   // each NIC's line rate, Gbit/s
  double gpu_memory_gb = 0;  // each GPU's memory (gpu_memory_gb, else the shape's; 0: unknown)
};

struct Cluster {
  std::vector<NodeType> types;
  std::vector<int> node_type;  // per node, an index into types
  int leaf_nodes = 0;          // nodes under one leaf switch (0: one switch for all)
  double oversubscription = 1;  // leaf uplinks : downlinks below 1:1
  int nodes() const { return static_cast<int>(node_type.size()); }
  int leaf_of(int node) const { return leaf_nodes > 0 ? node / leaf_nodes : 0; }
  const Topology& topo(int node) const { return types[static_cast<size_t>(node_type[static_cast<size_t>(node)])].topo; }
  const NodeType& type(int node) const { return types[static_cast<size_t>(node_type[static_cast<size_t>(node)])]; }
  int gpus() const;
};

// The model's constants (doc/simulate.md says where each comes from).
struct Model {
  double nvlink_efficiency = 0.78;  // NCCL busbw / NVLink line rate inside a node
  double pcie_efficiency = 0.80;    // ... over PCIe and the SMP interconnect
  double net_efficiency = 0.94;     // ... per NIC (46-48 GB/s of a 400 Gb/s NIC)
  double tree_efficiency = 0.92;    // NCCL's tuner: a tree's bus bandwidth against the link's
  double alpha_intra_s = 2e-6;      // per ring step inside a node
  double alpha_net_s = 6e-6;        // per ring step or tree level across the network
};

struct NodeGpus {
  int node = 0;
  std::vector<int> gpus;  // GPU indices on that node, in ring order
};
using Allocation = std::vector<NodeGpus>;

struct Comm {
  double allreduce_s = 0, algbw_gbps = 0, busbw_gbps = 0;  // busbw as nccl-tests defines it
  double intra_gbps = 0, inter_gbps = 0;                   // the slowest node's, GB/s
  std::string algo;                                        // ring | tree
  bool crosses_leaves = false;
};
// algo: "auto" (the faster, as NCCL's tuner picks), "ring" or "tree"; or Loom's own MPI
// collectives: "flat" (one ring over every rank) or "hier" (inside each node, then across).
Comm allreduce(const Cluster& c, const Allocation& a, double bytes, const Model& m, const std::string& algo = "auto");

// What Loom changes, one switch each (Slurm alone: none of them).
struct Policy {
  std::string name;
  bool links = false;          // gres.conf Links=: cons_tres picks NVLink-connected GPUs (the plugin's ring)
  bool topology_conf = false;  // topology.conf: jobs packed under the fewest leaf switches, best fit
  bool balanced = false;       // batch shares by device speed instead of equal shares
};
Policy slurm_policy();
Policy loom_policy();

// GPUs for a job of n GPUs from the free map (taken out of it), or an empty allocation.
Allocation allocate(const Cluster& c, std::vector<std::vector<bool>>& free, int n, const Policy& p);

// One step's compute: compute_s is the step on A100s at equal shares; slower classes take
// compute_s x w(a100) / w(class) (device_weight). Equal shares wait for the slowest GPU;
// balanced shares spread the work by speed.
double compute_seconds(const Cluster& c, const Allocation& a, double compute_s, bool balanced);

struct JobSpec {
  int count = 1, gpus = 1;
  double model_bytes = 0, compute_s = 0;
};
struct Workload {
  unsigned long seed = 1;
  std::vector<JobSpec> jobs;
};

struct PolicyResult {
  std::string name;
  int jobs = 0, gpus = 0;
  double mean_step_s = 0, mean_allreduce_s = 0, mean_compute_s = 0, mean_busbw_gbps = 0;
  double multi_node = 0, cross_leaf = 0, mixed_class = 0;  // shares of jobs
};
PolicyResult run_workload(const Cluster& c, const Workload& w, const Policy& p, const Model& m);

// The built-in node shapes (Topology as `nvidia-smi topo -m` would give it); throws Error.
Topology builtin_shape(const std::string& name);
// CLUSTER.yaml and WORKLOAD.yaml (Contract 10); throw Error naming the key.
Cluster load_cluster(const std::string& path);
Workload load_workload(const std::string& path);

// The cluster commands' shared frame: a bad command line is a Usage (exit 2, "loom-topo: MSG"),
// a bad file or model an Error (exit 1).
using Usage = loom::UsageError;
int run_command(const std::function<int()>& body);
// The --key value and --key=value pairs of a command line, in order; Usage for a key without one.
std::vector<std::pair<std::string, std::string>> options_of(const std::vector<std::string>& args);

// `loom-topo plan`: memory per GPU class, shares and step time of a data-parallel training job
// over every GPU of a cluster, per ZeRO level and recompute/offload choice (doc/plan.md).
struct PlanModel {
  double params = 0;                              // parameters
  int layers = 0, embd = 0, heads = 0, context = 1024, vocab = 50257;  // 0 layers: --params alone (no activations)
  int global_batch = 0;                           // sequences per step
  double mfu = 0.4;                               // the share of each GPU's peak a step sustains
  bool fp32 = false;        // --precision fp32: fp32 parameters, gradients and activations, no master copy
  double reserve_gb = 1.0;  // per GPU beside the model: the CUDA context, cuBLAS and NCCL workspaces
};
struct PlanClass {
  std::string cls;
  int gpus = 0;
  double memory_bytes = 0, capacity_bytes = 0, share = 0;  // share: of the global batch, per GPU
  double param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0, activation_bytes = 0, host_bytes = 0;
  bool fits = false;
};
struct PlanOption {
  int zero = 0;
  bool recompute = false, offload = false, fits = false;
  double step_s = 0, step_s_equal = 0, compute_s = 0, comm_s = 0, offload_s = 0;
  std::vector<PlanClass> classes;
};
std::vector<PlanOption> plan(const Cluster& c, const PlanModel& m, const Model& net);
// ZeRO-3's sharded state (parameters, gradients, and the moments unless offloaded) in parts of
// uneven size: each GPU's in proportion to the memory its class has left beside the activations
// of its batch share, the gathered layers and the reserve (loom-train --shard-by memory and
// fully_shard(shard_weights=) take such weights). part_bytes and memory_bytes per class, in the
// order of PlanOption::classes.
struct UnevenParts {
  bool fits = false;
  std::vector<double> part_bytes, memory_bytes;
};
UnevenParts uneven_parts(const Cluster& c, const PlanModel& m, const Model& net, bool recompute, bool offload);
// One option on `scale` copies of the cluster's GPUs (what would be needed when nothing fits).
PlanOption plan_option(const Cluster& c, const PlanModel& m, const Model& net, int zero, bool recompute, bool offload,
                       int scale = 1);
int plan_main(const std::vector<std::string>& args);

// `loom-topo simulate ARGS` (argv after the command word); returns the exit status.
int simulate_main(const std::vector<std::string>& args);

// Slurm's topology.conf (topology/tree) for a cluster: one SwitchName line per leaf switch with
// its nodes, named PREFIX + a zero-padded number from 1 (node001...), and one spine line.
std::string topology_conf(const Cluster& c, const std::string& prefix);
// `loom-topo topology-conf --cluster CLUSTER.yaml [--node-prefix P]`.
int topology_conf_main(const std::vector<std::string>& args);

}  // namespace loom::topo::sim

// placement.cpp — turns (topology, allowed GPUs and CPUs, task count, mode) into one
// TaskPlacement per local task. Pure computation: nothing here touches the machine.
#include "loom/topo/placement.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace loom::topo {

BindMode parse_bind_mode(const std::string& w) {
  if (w == "ring") return BindMode::kRing;
  if (w == "gpu") return BindMode::kGpu;
  if (w == "numa") return BindMode::kNuma;
  throw Error("unknown placement mode '" + w + "' (allowed: ring, gpu, numa)");
}

std::string bind_mode_word(BindMode m) {
  switch (m) {
    case BindMode::kRing: return "ring";
    case BindMode::kGpu: return "gpu";
    case BindMode::kNuma: return "numa";
  }
  return "ring";
}

namespace {

// Fair split of `units` (cores, each a list of CPUs) among `k` tasks; when there are fewer
// CPUs than tasks, tasks share CPUs round-robin.
std::vector<std::vector<int>> split(const std::vector<std::vector<int>>& cores, size_t k) {
  std::vector<std::vector<int>> out(k);
  if (k == 0 || cores.empty()) return out;
  std::vector<std::vector<int>> units = cores;
  if (units.size() < k) {  // fewer cores than tasks: split by hardware thread
    units.clear();
    for (const auto& c : cores)
      for (int cpu : c) units.push_back({cpu});
  }
  if (units.size() < k) {
    for (size_t i = 0; i < k; ++i) out[i] = units[i % units.size()];
    return out;
  }
  const size_t n = units.size();
  for (size_t i = 0; i < k; ++i) {
    size_t lo = i * n / k, hi = (i + 1) * n / k;
    for (size_t u = lo; u < hi; ++u) out[i].insert(out[i].end(), units[u].begin(), units[u].end());
    std::sort(out[i].begin(), out[i].end());
  }
  return out;
}

// Allowed CPUs grouped by core (hyperthreads stay together), in core order.
std::vector<std::vector<int>> cores_of(const Topology& t, const std::set<int>& allowed, int numa) {
  std::vector<std::vector<int>> out;
  std::set<int> covered;
  for (const auto& node : t.numa_nodes) {
    if (numa >= 0 && node.id != numa) continue;
    for (const auto& core : node.cores) {
      std::vector<int> pus;
      for (int pu : core.pus)
        if (allowed.count(pu)) pus.push_back(pu), covered.insert(pu);
      if (!pus.empty()) out.push_back(pus);
    }
  }
  for (int cpu : allowed)  // CPUs the model has no core for
    if (!covered.count(cpu) && (numa < 0 || t.numa_of_cpu(cpu) == numa)) out.push_back({cpu});
  return out;
}

struct NicChooser {
  const Topology& t;
  std::vector<int> load;  // GPUs already assigned to each NIC
  explicit NicChooser(const Topology& topo) : t(topo), load(topo.nics.size(), 0) {}

  // Nearest NIC by path class, ties to the least loaded, then the lowest index.
  int for_gpu(int gpu_pos) {
    int best = -1;
    for (size_t n = 0; n < t.nics.size(); ++n) {
      if (best < 0) { best = static_cast<int>(n); continue; }
      const auto kn = t.gpu_nic_paths[gpu_pos][n].kind, kb = t.gpu_nic_paths[gpu_pos][best].kind;
      if (kn < kb || (kn == kb && load[n] < load[best])) best = static_cast<int>(n);
    }
    if (best >= 0) ++load[best];
    return best;
  }

  int for_numa(int numa) {
    int best = -1;
    for (size_t n = 0; n < t.nics.size(); ++n) {
      bool near = t.nics[n].numa == numa;
      if (best < 0) { best = static_cast<int>(n); continue; }
      bool best_near = t.nics[best].numa == numa;
      if ((near && !best_near) || (near == best_near && load[n] < load[best])) best = static_cast<int>(n);
    }
    if (best >= 0) ++load[best];
    return best;
  }
};

}  // namespace

namespace {

// The request's GPUs (every GPU of the node when none were given), each checked.
std::vector<int> allowed_gpus(const Topology& t, const PlaceRequest& req) {
  std::vector<int> gpus = req.gpus;
  if (req.gpus_given && gpus.empty()) throw Error("the allowed GPU set is empty");
  if (!req.gpus_given)
    for (const auto& g : t.gpus) gpus.push_back(g.index);
  for (int g : gpus)
    if (t.gpu_pos(g) < 0)
      throw Error("GPU " + std::to_string(g) + " is not on this node (it has " + std::to_string(t.gpus.size()) +
                  " GPUs)");
  return gpus;
}

// The request's CPUs (every CPU of the node when none were given), each checked, and enough of
// them for the tasks unless they may share.
std::set<int> allowed_cpus(const Topology& t, const PlaceRequest& req) {
  const std::vector<int> node_cpus = t.all_cpus();
  std::set<int> allowed(req.cpus.begin(), req.cpus.end());
  if (req.cpus_given && allowed.empty()) throw Error("the allowed CPU set is empty");
  if (!req.cpus_given) allowed.insert(node_cpus.begin(), node_cpus.end());
  if (allowed.empty()) throw Error("this node has no CPUs in its topology");
  for (int c : allowed)
    if (!std::binary_search(node_cpus.begin(), node_cpus.end(), c))
      throw Error("CPU " + std::to_string(c) + " is not on this node (it has CPUs " + format_cpu_list(node_cpus) + ")");
  if (static_cast<size_t>(req.ntasks) > allowed.size() && !req.oversubscribe)
    throw Error("more tasks (" + std::to_string(req.ntasks) + ") than allowed CPUs (" +
                std::to_string(allowed.size()) + "); allow sharing to oversubscribe");
  return allowed;
}

// Sets each task's NIC: the request's fixed one, none, or the one `chooser` picks near it.
class NicSetter {
 public:
  NicSetter(const Topology& t, const PlaceRequest& req) : chooser(t), t_(t), req_(req) {
    if (req.nic == "auto" || req.nic == "none") return;
    for (size_t n = 0; n < t.nics.size(); ++n)
      if (t.nics[n].name == req.nic) fixed_ = static_cast<int>(n);
    if (fixed_ < 0) throw Error("NIC '" + req.nic + "' is not on this node");
  }
  void set(TaskPlacement& task, int nic, int gpu_pos) const {
    if (req_.nic == "none") return;
    if (fixed_ >= 0) nic = fixed_;
    if (nic < 0) return;
    task.nic = t_.nics[nic].name;
    if (gpu_pos >= 0) task.nic_path = path_word(t_.gpu_nic_paths[gpu_pos][nic]);
  }
  NicChooser chooser;

 private:
  const Topology& t_;
  const PlaceRequest& req_;
  int fixed_ = -1;
};

// Mode numa: tasks spread over the NUMA nodes that hold allowed CPUs, each with its node's CPUs,
// GPUs and NIC.
void place_on_numa(const Topology& t, const PlaceRequest& req, const std::vector<int>& gpus,
                   const std::set<int>& allowed, NicSetter& nics, Placement& pl) {
  std::vector<int> nodes;
  for (const auto& n : t.numa_nodes)
    for (int c : n.cpus)
      if (allowed.count(c)) {
        nodes.push_back(n.id);
        break;
      }
  if (!gpus.empty()) pl.ring = best_ring(t, gpus);
  std::map<int, int> nic_of_node;
  for (int i = 0; i < req.ntasks; ++i) {
    TaskPlacement& task = pl.tasks[i];
    if (nodes.empty()) {
      task.cpus.assign(allowed.begin(), allowed.end());
      continue;
    }
    int node = nodes[static_cast<size_t>(i) * nodes.size() / req.ntasks];
    task.numa = node;
    for (int c : allowed)
      if (t.numa_of_cpu(c) == node) task.cpus.push_back(c);
    for (int g : gpus)
      if (t.gpu_by_index(g)->numa == node) task.gpus.push_back(g);
    if (!nic_of_node.count(node)) nic_of_node[node] = nics.chooser.for_numa(node);
    nics.set(task, nic_of_node[node], task.gpus.empty() ? -1 : t.gpu_pos(task.gpus[0]));
  }
}

// CPUs: each NUMA node's allowed CPUs shared fairly by the tasks whose GPU sits there; tasks
// whose node has no allowed CPU share what no GPU-local task uses (or everything).
void share_cpus(const Topology& t, const std::set<int>& allowed, const std::map<int, std::vector<int>>& tasks_by_numa,
                Placement& pl) {
  std::vector<int> homeless;
  std::set<int> used_nodes;
  for (const auto& [numa, tasks] : tasks_by_numa) {
    auto cores = numa >= 0 ? cores_of(t, allowed, numa) : std::vector<std::vector<int>>{};
    if (cores.empty()) {
      homeless.insert(homeless.end(), tasks.begin(), tasks.end());
      continue;
    }
    used_nodes.insert(numa);
    auto parts = split(cores, tasks.size());
    for (size_t k = 0; k < tasks.size(); ++k) pl.tasks[tasks[k]].cpus = parts[k];
  }
  if (homeless.empty()) return;
  std::set<int> spare;
  for (int c : allowed)
    if (!used_nodes.count(t.numa_of_cpu(c))) spare.insert(c);
  if (spare.empty()) spare = allowed;
  std::sort(homeless.begin(), homeless.end());
  auto parts = split(cores_of(t, spare, -1), homeless.size());
  for (size_t k = 0; k < homeless.size(); ++k) {
    TaskPlacement& task = pl.tasks[homeless[k]];
    task.cpus = parts[k];
    if (!task.cpus.empty()) task.numa = t.numa_of_cpu(task.cpus[0]);
  }
}

}  // namespace

Placement place(const Topology& t, const PlaceRequest& req) {
  if (req.ntasks <= 0) throw Error("the number of tasks must be positive, not " + std::to_string(req.ntasks));
  if (req.ntasks > 4096) throw Error("too many tasks for one node: " + std::to_string(req.ntasks));
  std::vector<int> gpus = allowed_gpus(t, req);
  const std::set<int> allowed = allowed_cpus(t, req);
  NicSetter nics(t, req);
  Placement pl;
  pl.mode = req.mode;
  pl.tasks.resize(req.ntasks);
  for (int i = 0; i < req.ntasks; ++i) pl.tasks[i].local_rank = i;
  if (req.mode == BindMode::kNuma) {
    place_on_numa(t, req, gpus, allowed, nics, pl);
    return pl;
  }

  if (gpus.empty()) throw Error("no GPUs to place tasks on (on a node without GPUs use mode numa)");
  // GPUs in use, in the order ranks follow.
  std::vector<int> order;
  if (req.mode == BindMode::kRing) {
    pl.ring = static_cast<size_t>(req.ntasks) < gpus.size() ? best_ring_of_k(t, gpus, req.ntasks) : best_ring(t, gpus);
    order = pl.ring.gpus;
  } else {
    std::sort(gpus.begin(), gpus.end());
    order.assign(gpus.begin(), gpus.begin() + std::min<size_t>(gpus.size(), req.ntasks));
    pl.ring = best_ring(t, order);
  }
  // Consecutive ranks share a GPU when there are more tasks than GPUs.
  std::map<int, std::vector<int>> tasks_by_numa;
  std::map<int, int> nic_of_gpu;
  for (int i = 0; i < req.ntasks; ++i) {
    int g = order[static_cast<size_t>(i) * order.size() / req.ntasks];
    TaskPlacement& task = pl.tasks[i];
    task.gpus = {g};
    task.numa = t.gpu_by_index(g)->numa;
    tasks_by_numa[task.numa].push_back(i);
    if (!nic_of_gpu.count(g)) nic_of_gpu[g] = nics.chooser.for_gpu(t.gpu_pos(g));
    nics.set(task, nic_of_gpu[g], t.gpu_pos(g));
  }
  share_cpus(t, allowed, tasks_by_numa, pl);
  return pl;
}

}  // namespace loom::topo

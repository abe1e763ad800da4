// step_plan.cpp — placement of one step's local tasks, and the environment each task gets.
#include "step_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "loom/topo/placement.hpp"

namespace loom::spank {

using loom::topo::Error;
using loom::topo::format_cpu_list;
using loom::topo::Topology;

std::vector<int> parse_index_list(const std::string& text, const char* what) {
  if (text.empty()) return {};
  const std::string shown = text.size() > 60 ? text.substr(0, 60) + "..." : text;
  std::vector<int> ids;
  try {
    ids = loom::topo::parse_cpu_list(text);  // bounded: at most kMaxListEntries, however it is written
  } catch (const Error&) {
    throw Error(std::string(what) + " '" + shown + "' is not a list of at most " +
                std::to_string(loom::topo::kMaxListEntries) + " indices");
  }
  return ids;
}

std::vector<int> slurm_cores_to_cpus(const Topology& t, const std::string& cores) {
  std::vector<int> ids = parse_index_list(cores, "the step's core list");
  std::map<int, const loom::topo::Core*> by_id;
  for (const auto& node : t.numa_nodes)
    for (const auto& core : node.cores) by_id[core.logical] = &core;
  std::vector<int> cpus;
  for (int id : ids) {
    auto it = by_id.find(id);
    if (it == by_id.end())
      throw Error("Slurm core " + std::to_string(id) + " is not in the topology (it has " +
                  std::to_string(by_id.size()) + " cores)");
    cpus.insert(cpus.end(), it->second->pus.begin(), it->second->pus.end());
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + v[i];
  return s;
}

std::string weight_text(double w) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", w);
  return buf;
}

}  // namespace

StepPlan plan_step(const Topology& t, const StepInfo& step) {
  StepPlan plan;
  plan.bind = step.bind;
  if (step.bind == Bind::kNone || step.bind == Bind::kUnset) return plan;
  if (step.local_tasks <= 0) throw Error("the step has no local tasks");

  // The step's GPUs come from the job's environment: each must be one of this node's.
  if (step.step_gpus.size() > t.gpus.size())
    throw Error("the step names " + std::to_string(step.step_gpus.size()) + " GPUs; this node has " +
                std::to_string(t.gpus.size()));
  for (int g : step.step_gpus)
    if (!t.gpu_by_index(g))
      throw Error("the step's GPU " + std::to_string(g) + " is not in the topology (" + t.source + ")");
  if (step.cuda_ids.size() > step.step_gpus.size() && !step.step_gpus.empty())
    throw Error("CUDA_VISIBLE_DEVICES names " + std::to_string(step.cuda_ids.size()) + " devices for " +
                std::to_string(step.step_gpus.size()) + " step GPUs");
  // GPU index -> the id CUDA knows it by in this step (they differ under ConstrainDevices).
  std::map<int, std::string> cuda_id;
  for (size_t i = 0; i < step.step_gpus.size(); ++i)
    cuda_id[step.step_gpus[i]] = step.cuda_ids.size() == step.step_gpus.size() ? step.cuda_ids[i]
                                                                               : std::to_string(step.step_gpus[i]);

  loom::topo::PlaceRequest req;
  req.ntasks = step.local_tasks;
  req.oversubscribe = true;  // Slurm already decided how many tasks share the step's cores
  req.nic = step.nic;
  req.cpus = step.alloc_cores.empty() ? t.all_cpus() : slurm_cores_to_cpus(t, step.alloc_cores);
  req.cpus_given = true;
  req.gpus = step.step_gpus;
  req.gpus_given = !step.step_gpus.empty();
  switch (step.bind) {
    case Bind::kGpu: req.mode = loom::topo::BindMode::kGpu; break;
    case Bind::kNuma: req.mode = loom::topo::BindMode::kNuma; break;
    default: req.mode = loom::topo::BindMode::kRing; break;
  }
  if (step.step_gpus.empty() && req.mode != loom::topo::BindMode::kNuma) {
    plan.notes.push_back(std::string("the step has no GPUs: --loom-bind=") + bind_word(step.bind) +
                         " binds CPUs by NUMA node instead");
    req.mode = loom::topo::BindMode::kNuma;
    plan.bind = Bind::kNuma;
  }
  loom::topo::Placement pl = loom::topo::place(t, req);
  if (step.step_gpus.empty())  // GPUs the step was not given are not the tasks' to use
    for (auto& task : pl.tasks) task.gpus.clear();

  // The node's ring over all of the step's GPUs; each task lists its own GPU first and then
  // the others in ring order starting from its ring neighbour.
  std::vector<int> ring = step.step_gpus.empty() ? std::vector<int>{} : loom::topo::best_ring(t, step.step_gpus).gpus;
  std::vector<std::string> ring_words;
  for (int g : ring) ring_words.push_back(std::to_string(g));

  for (const auto& task : pl.tasks) {
    TaskPlan tp;
    tp.cpus = task.cpus;
    auto set = [&](const char* k, const std::string& v) { tp.env.emplace_back(k, v); };
    set("LOOM_BIND", bind_word(plan.bind));
    std::ostringstream summary;
    if (!task.gpus.empty()) {
      const loom::topo::Gpu* g = t.gpu_by_index(task.gpus[0]);
      set("LOOM_GPU", std::to_string(g->index));
      set("LOOM_GPU_CLASS", g->cls);
      set("LOOM_DEVICE_WEIGHT", weight_text(loom::topo::device_weight(g->cls)));
      // The GPU's memory in bytes (NVML's total, or the topology file's): loom.torch's shares
      // of a sharded model's state. Not set when the topology does not say.
      if (g->memory_mb) set("LOOM_DEVICE_MEMORY", std::to_string(g->memory_mb << 20));
      std::vector<std::string> visible;
      for (int own : task.gpus) visible.push_back(cuda_id[own]);
      auto start = std::find(ring.begin(), ring.end(), task.gpus[0]);
      for (size_t k = 0; start != ring.end() && k < ring.size(); ++k) {
        int other = ring[(static_cast<size_t>(start - ring.begin()) + k) % ring.size()];
        if (std::find(task.gpus.begin(), task.gpus.end(), other) == task.gpus.end()) visible.push_back(cuda_id[other]);
      }
      set("CUDA_VISIBLE_DEVICES", join(visible));
      summary << "gpu " << g->index << " (" << g->cls << ")";
    } else {
      set("LOOM_GPU_CLASS", "cpu");
      set("LOOM_DEVICE_WEIGHT", "1");
      summary << "no gpu";
    }
    if (!ring.empty()) set("LOOM_RING", join(ring_words));
    if (!task.nic.empty()) {
      set("LOOM_NIC", task.nic);
      set("UCX_NET_DEVICES", task.nic + ":1");
      set("NCCL_IB_HCA", "=" + task.nic);
    }
    std::string places;
    for (size_t i = 0; i < task.cpus.size(); ++i) places += (i ? ",{" : "{") + std::to_string(task.cpus[i]) + "}";
    set("OMP_NUM_THREADS", std::to_string(task.cpus.size()));
    set("OMP_PLACES", places);
    set("OMP_PROC_BIND", "close");
    set("LOOM_CPUS", format_cpu_list(task.cpus));
    summary << ", cpus " << format_cpu_list(task.cpus) << ", numa " << task.numa << ", nic "
            << (task.nic.empty() ? "none" : task.nic + (task.nic_path.empty() ? "" : " (" + task.nic_path + ")"));
    tp.summary = summary.str();
    plan.tasks.push_back(tp);
  }
  return plan;
}

}  // namespace loom::spank

// workload.cpp — a workload of jobs on a shared cluster (simulate.hpp): every job is queued at
// once in a seeded order, runs for a seeded time, and starts as soon as the policy finds it
// GPUs (looking a few jobs deep, as Slurm's backfill does); each started job's step time is its
// compute plus its allreduce on the GPUs it got.
#include <algorithm>
#include <queue>
#include <random>
#include <set>

#include "simulate.hpp"

namespace loom::topo::sim {
namespace {

constexpr size_t kLookAhead = 32;  // queued jobs tried at each start (Slurm's bf_max_job_test is larger)

struct Running {
  double end;
  Allocation alloc;
  bool operator>(const Running& o) const { return end > o.end; }
};

}  // namespace

PolicyResult run_workload(const Cluster& c, const Workload& w, const Policy& p, const Model& m) {
  std::vector<const JobSpec*> jobs;
  for (const auto& j : w.jobs) {
    if (j.gpus > c.gpus())
      throw Error("a job of " + std::to_string(j.gpus) + " GPUs does not fit a cluster of " + std::to_string(c.gpus()));
    for (int k = 0; k < j.count; ++k) jobs.push_back(&j);
  }
  std::mt19937_64 rng(w.seed);
  std::shuffle(jobs.begin(), jobs.end(), rng);
  std::vector<double> length(jobs.size());  // the same for both policies: drawn before placing
  for (auto& l : length) l = 0.5 + std::uniform_real_distribution<double>(0, 1)(rng);

  std::vector<std::vector<bool>> free(static_cast<size_t>(c.nodes()));
  for (int node = 0; node < c.nodes(); ++node) free[static_cast<size_t>(node)].assign(c.topo(node).gpus.size(), true);
  std::priority_queue<Running, std::vector<Running>, std::greater<Running>> running;
  std::vector<size_t> queue(jobs.size());
  for (size_t i = 0; i < queue.size(); ++i) queue[i] = i;
  PolicyResult r;
  r.name = p.name;
  double now = 0;
  while (!queue.empty()) {
    for (size_t qi = 0; qi < std::min(kLookAhead, queue.size());) {
      const JobSpec& j = *jobs[queue[qi]];
      Allocation a = allocate(c, free, j.gpus, p);
      if (a.empty()) {
        ++qi;
        continue;
      }
      const Comm comm = allreduce(c, a, j.model_bytes, m);
      const double compute = compute_seconds(c, a, j.compute_s, p.balanced);
      std::set<std::string> classes;
      for (const auto& ng : a)
        for (int g : ng.gpus) classes.insert(c.topo(ng.node).gpu_by_index(g)->cls);
      r.jobs += 1;
      r.gpus += j.gpus;
      r.mean_step_s += compute + comm.allreduce_s;
      r.mean_allreduce_s += comm.allreduce_s;
      r.mean_compute_s += compute;
      r.mean_busbw_gbps += comm.busbw_gbps;
      r.multi_node += a.size() > 1;
      r.cross_leaf += comm.crosses_leaves;
      r.mixed_class += classes.size() > 1;
      running.push({now + length[queue[qi]], std::move(a)});
      queue.erase(queue.begin() + static_cast<long>(qi));
    }
    if (queue.empty()) break;
    if (running.empty()) throw Error("internal: a queued job can never start");
    now = running.top().end;
    for (const auto& ng : running.top().alloc)
      for (int g : ng.gpus) free[static_cast<size_t>(ng.node)][static_cast<size_t>(g)] = true;
    running.pop();
  }
  const double n = std::max(1, r.jobs);
  for (double* v : {&r.mean_step_s, &r.mean_allreduce_s, &r.mean_compute_s, &r.mean_busbw_gbps, &r.multi_node,
                    &r.cross_leaf, &r.mixed_class})
    *v /= n;
  return r;
}

}  // namespace loom::topo::sim

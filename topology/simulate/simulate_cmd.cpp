// simulate_cmd.cpp — `loom-topo simulate --cluster CLUSTER.yaml (--job-gpus N --bytes B |
// --workload WORKLOAD.yaml) [--placement slurm|loom|both] [--algo auto|ring|tree]
// [--format text|json]` (Contract 10).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "simulate.hpp"

namespace loom::topo::sim {
namespace {

using json = nlohmann::ordered_json;

struct Args {
  std::string cluster, workload, placement = "both", format = "text", algo = "auto";
  int job_gpus = 0;
  double bytes = 0;
};

Args parse(const std::vector<std::string>& args) {
  Args a;
  for (const auto& [k, v] : options_of(args)) {
    try {
      if (k == "--cluster") a.cluster = v;
      else if (k == "--workload") a.workload = v;
      else if (k == "--placement") a.placement = v;
      else if (k == "--format") a.format = v;
      else if (k == "--algo") a.algo = v;
      else if (k == "--job-gpus") a.job_gpus = std::stoi(v);
      else if (k == "--bytes") a.bytes = std::stod(v);
      else throw Usage{"unknown option '" + k + "' of 'simulate'"};
    } catch (const std::logic_error&) {
      throw Usage{k + ": '" + v + "' is not a number"};
    }
  }
  if (a.cluster.empty()) throw Usage{"simulate needs --cluster CLUSTER.yaml"};
  if (a.workload.empty() == (a.job_gpus <= 0 && a.bytes <= 0))
    throw Usage{"simulate needs either --job-gpus N --bytes B or --workload WORKLOAD.yaml"};
  if (a.workload.empty() && (a.job_gpus < 1 || !(a.bytes > 0))) throw Usage{"--job-gpus and --bytes must be positive"};
  if (a.placement != "slurm" && a.placement != "loom" && a.placement != "both")
    throw Usage{"--placement must be slurm, loom or both, not '" + a.placement + "'"};
  if (a.format != "text" && a.format != "json") throw Usage{"--format must be text or json"};
  if (a.algo != "auto" && a.algo != "ring" && a.algo != "tree" && a.algo != "flat" && a.algo != "hier")
    throw Usage{"--algo must be auto, ring or tree (NCCL's), or flat or hier (Loom's MPI collectives)"};
  return a;
}

std::vector<Policy> policies(const std::string& which) {
  std::vector<Policy> p;
  if (which != "loom") p.push_back(slurm_policy());
  if (which != "slurm") p.push_back(loom_policy());
  return p;
}

json job_json(const Cluster& c, const Args& a, std::string* text) {
  json out = {{"cluster", {{"nodes", c.nodes()}, {"gpus", c.gpus()}}}, {"job", {{"gpus", a.job_gpus}, {"bytes", a.bytes}}}};
  json placements = json::object();
  for (const Policy& p : policies(a.placement)) {
    std::vector<std::vector<bool>> free(static_cast<size_t>(c.nodes()));
    for (int n = 0; n < c.nodes(); ++n) free[static_cast<size_t>(n)].assign(c.topo(n).gpus.size(), true);
    const Allocation alloc = allocate(c, free, a.job_gpus, p);
    if (alloc.empty()) throw Error("a job of " + std::to_string(a.job_gpus) + " GPUs does not fit the cluster");
    const Comm r = allreduce(c, alloc, a.bytes, Model{}, a.algo);
    json gpus = json::array();
    for (const auto& ng : alloc) gpus.push_back({{"node", ng.node}, {"gpus", ng.gpus}});
    placements[p.name] = {{"allreduce_s", r.allreduce_s}, {"algbw_gbps", r.algbw_gbps}, {"busbw_gbps", r.busbw_gbps},
                          {"algo", r.algo}, {"nodes", alloc.size()}, {"intra_gbps", r.intra_gbps},
                          {"inter_gbps", r.inter_gbps}, {"crosses_leaves", r.crosses_leaves}, {"placement", gpus}};
    char line[256];
    std::snprintf(line, sizeof line, "%-6s %d GPUs on %zu node(s): allreduce %.3f ms, busbw %.1f GB/s (%s)\n",
                  p.name.c_str(), a.job_gpus, alloc.size(), r.allreduce_s * 1e3, r.busbw_gbps, r.algo.c_str());
    *text += line;
  }
  out["placements"] = placements;
  return out;
}

json policy_json(const PolicyResult& r, int cluster_gpus) {
  return {{"gpus", cluster_gpus}, {"jobs", r.jobs}, {"mean_step_s", r.mean_step_s}, {"mean_allreduce_s", r.mean_allreduce_s},
          {"mean_compute_s", r.mean_compute_s}, {"mean_busbw_gbps", r.mean_busbw_gbps}, {"multi_node_jobs", r.multi_node},
          {"cross_leaf_jobs", r.cross_leaf}, {"mixed_class_jobs", r.mixed_class}};
}

json workload_json(const Cluster& c, const Args& a, std::string* text) {
  const auto t0 = std::chrono::steady_clock::now();
  const Workload w = load_workload(a.workload);
  const Model m;
  json out = {{"cluster", {{"nodes", c.nodes()}, {"gpus", c.gpus()}}}};
  json pol = json::object();
  std::map<std::string, PolicyResult> res;
  for (const Policy& p : policies(a.placement)) {
    res[p.name] = run_workload(c, w, p, m);
    pol[p.name] = policy_json(res[p.name], c.gpus());
    char line[256];
    std::snprintf(line, sizeof line, "%-6s %d jobs: mean step %.4f s (compute %.4f s, allreduce %.4f s), %.0f%% multi-node, %.0f%% across leaves, %.0f%% mixed GPU classes\n",
                  p.name.c_str(), res[p.name].jobs, res[p.name].mean_step_s, res[p.name].mean_compute_s,
                  res[p.name].mean_allreduce_s, 100 * res[p.name].multi_node, 100 * res[p.name].cross_leaf,
                  100 * res[p.name].mixed_class);
    *text += line;
  }
  out["policies"] = pol;
  if (res.count("slurm") && res.count("loom")) {
    const double base = res["slurm"].mean_step_s;
    out["step_time_reduction"] = 1 - res["loom"].mean_step_s / base;
    // Which mechanism gives how much: each alone on top of Slurm, and Loom without each.
    json mech = json::object();
    for (const char* name : {"links", "topology_conf", "balanced_shares"}) {
      Policy alone = slurm_policy(), without = loom_policy();
      alone.name = std::string("slurm+") + name, without.name = std::string("loom-") + name;
      bool Policy::*flag = std::string(name) == "links" ? &Policy::links
                           : std::string(name) == "topology_conf" ? &Policy::topology_conf
                                                                  : &Policy::balanced;
      alone.*flag = true, without.*flag = false;
      const double a_s = run_workload(c, w, alone, m).mean_step_s, w_s = run_workload(c, w, without, m).mean_step_s;
      mech[name] = {{"alone", 1 - a_s / base}, {"without", 1 - w_s / base}};
    }
    mech["nic_binding"] = {{"alone", 0.0}, {"without", out["step_time_reduction"]}, {"note", "NCCL picks its NICs by itself under both policies"}};
    out["mechanisms"] = mech;
    char line[200];
    std::snprintf(line, sizeof line, "loom's mean step time is %.1f%% below slurm alone's\n", 100 * out["step_time_reduction"].get<double>());
    *text += line;
    for (auto& [k, v] : mech.items()) {
      std::snprintf(line, sizeof line, "  %-16s alone %+.1f%%, loom without it %+.1f%%\n", k.c_str(), 100 * v["alone"].get<double>(),
                    100 * v["without"].get<double>());
      *text += line;
    }
  }
  out["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

std::string host_range(const std::string& prefix, int first, int last, int width) {
  auto pad = [width](int n) {
    std::string s = std::to_string(n);
    return std::string(static_cast<size_t>(std::max(0, width - static_cast<int>(s.size()))), '0') + s;
  };
  return first == last ? prefix + pad(first) : prefix + "[" + pad(first) + "-" + pad(last) + "]";
}

}  // namespace

std::string topology_conf(const Cluster& c, const std::string& prefix) {
  const int width = std::max(3, static_cast<int>(std::to_string(c.nodes()).size()));
  const int per = c.leaf_nodes > 0 ? c.leaf_nodes : c.nodes();
  const int leaves = (c.nodes() + per - 1) / per;
  std::string out = "# topology.conf for topology/tree (TopologyPlugin=topology/tree in slurm.conf), written by loom-topo:\n"
                    "# " + std::to_string(leaves) + " leaf switches of " + std::to_string(per) + " nodes";
  out += leaves > 1 ? " under one spine\n" : "\n";
  for (int l = 0; l < leaves; ++l)
    out += "SwitchName=leaf" + std::to_string(l) + " Nodes=" +
           host_range(prefix, l * per + 1, std::min(c.nodes(), (l + 1) * per), width) + "\n";
  if (leaves > 1) out += "SwitchName=spine Switches=leaf[0-" + std::to_string(leaves - 1) + "]\n";
  return out;
}

std::vector<std::pair<std::string, std::string>> options_of(const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string k = args[i], v;
    const auto eq = k.find('=');
    if (eq != std::string::npos) v = k.substr(eq + 1), k = k.substr(0, eq);
    else if (i + 1 < args.size()) v = args[++i];
    else throw Usage{k + " needs a value"};
    out.emplace_back(k, v);
  }
  return out;
}

int run_command(const std::function<int()>& body) {
  try {
    return body();
  } catch (const loom::Error& e) {  // a Usage exits 2, a bad file or model 1
    return loom::report("loom-topo", e);
  }
}

int topology_conf_main(const std::vector<std::string>& args) {
  return run_command([&] {
    std::string cluster, prefix = "node";
    for (const auto& [k, v] : options_of(args)) {
      if (k == "--cluster") cluster = v;
      else if (k == "--node-prefix") prefix = v;
      else throw Usage{"unknown option '" + k + "' of 'topology-conf'"};
    }
    if (cluster.empty() || prefix.empty() || prefix.find_first_of(" \t\n[],=#") != std::string::npos)
      throw Usage{"topology-conf needs --cluster CLUSTER.yaml (and a plain --node-prefix)"};
    std::fputs(topology_conf(load_cluster(cluster), prefix).c_str(), stdout);
    return 0;
  });
}

int simulate_main(const std::vector<std::string>& args) {
  return run_command([&] {
    const Args a = parse(args);
    const Cluster c = load_cluster(a.cluster);
    std::string text;
    const json out = a.workload.empty() ? job_json(c, a, &text) : workload_json(c, a, &text);
    if (a.format == "json") std::printf("%s\n", out.dump().c_str());
    else std::fputs(text.c_str(), stdout);
    return 0;
  });
}

}  // namespace loom::topo::sim

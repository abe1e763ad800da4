// cluster_yaml.cpp — CLUSTER.yaml and WORKLOAD.yaml of `loom-topo simulate` (Contract 10), read
// with yaml-cpp; every problem is one Error naming the key.
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cmath>
#include <set>

#include "loom/topo/readers.hpp"
#include "simulate.hpp"

namespace loom::topo::sim {
namespace {

YAML::Node load(const std::string& path) {
  try {
    return YAML::Load(read_small_file(path, 1u << 20));
  } catch (const YAML::Exception& e) {
    throw Error(path + ": not valid YAML: " + e.what());
  }
}

template <typename T>
T get(const YAML::Node& n, const std::string& key, const std::string& where) {
  if (!n[key]) throw Error(where + ": '" + key + "' is missing");
  try {
    return n[key].as<T>();
  } catch (const YAML::Exception&) {
    throw Error(where + ": '" + key + "' is not a valid value");
  }
}

void only_keys(const YAML::Node& n, const std::set<std::string>& keys, const std::string& where) {
  if (!n.IsMap()) throw Error(where + ": expected a map");
  for (const auto& kv : n)
    if (!keys.count(kv.first.as<std::string>())) throw Error(where + ": unknown key '" + kv.first.as<std::string>() + "'");
}

const std::set<std::string> kShapes = {"dgx1v", "dgxa100", "hgxh100", "hgxh200", "pcie8"};

// A shape's GPU memory: what its topology says, else the "80GB" in the GPU's name, else the
// H200's 141 GB; 0 when none says (a plan then asks for gpu_memory_gb).
double shape_memory_gb(const Topology& t) {
  const Gpu& g = t.gpus.front();
  if (g.memory_mb) return static_cast<double>(g.memory_mb) / 1024;
  const size_t gb = g.name.find("GB");
  if (gb != std::string::npos) {
    size_t b = gb;
    while (b > 0 && std::isdigit(static_cast<unsigned char>(g.name[b - 1]))) --b;
    if (b < gb) return std::stod(g.name.substr(b, gb - b));
  }
  return g.cls == "h200" ? 141 : 0;
}

}  // namespace

Cluster load_cluster(const std::string& path) {
  const YAML::Node root = load(path);
  only_keys(root, {"nodes", "network"}, path);
  if (!root["nodes"] || !root["nodes"].IsSequence() || root["nodes"].size() == 0)
    throw Error(path + ": 'nodes' must be a non-empty list of {count, shape, nics, nic_gbps, gpu_memory_gb}");
  Cluster c;
  for (size_t i = 0; i < root["nodes"].size(); ++i) {
    const YAML::Node n = root["nodes"][i];
    const std::string where = path + ": nodes[" + std::to_string(i) + "]";
    only_keys(n, {"count", "shape", "nics", "nic_gbps", "gpu_memory_gb"}, where);
    NodeType t;
    t.shape = get<std::string>(n, "shape", where);
    // A built-in shape, else a topology file; a name that is neither says which shapes there are.
    const bool file = !kShapes.count(t.shape) && ::access(t.shape.c_str(), F_OK) == 0;
    t.topo = file ? read_topology_file(t.shape) : builtin_shape(t.shape);
    if (t.topo.gpus.empty()) throw Error(where + ": shape '" + t.shape + "' has no GPUs");
    const int count = get<int>(n, "count", where);
    t.nics = n["nics"] ? get<int>(n, "nics", where) : static_cast<int>(t.topo.nics.size());
    t.nic_gbps = n["nic_gbps"] ? get<double>(n, "nic_gbps", where) : 100;
    if (count < 1 || c.node_type.size() + static_cast<size_t>(count) > 100000)
      throw Error(where + ": 'count' must be 1 or more (at most 100000 nodes in all)");
    if (t.nics < 0 || t.nics > static_cast<int>(t.topo.nics.size()))
      throw Error(where + ": 'nics' must be 0.." + std::to_string(t.topo.nics.size()) + " (the shape's NICs)");
    if (!(t.nic_gbps > 0) || !std::isfinite(t.nic_gbps)) throw Error(where + ": 'nic_gbps' must be positive");
    t.gpu_memory_gb = n["gpu_memory_gb"] ? get<double>(n, "gpu_memory_gb", where) : shape_memory_gb(t.topo);
    if (!(t.gpu_memory_gb >= 0) || t.gpu_memory_gb > 100000) throw Error(where + ": 'gpu_memory_gb' must be from 0 to 100000");
    c.types.push_back(std::move(t));
    c.node_type.insert(c.node_type.end(), static_cast<size_t>(count), static_cast<int>(c.types.size() - 1));
  }
  if (root["network"]) {
    const YAML::Node net = root["network"];
    only_keys(net, {"leaf_nodes", "oversubscription"}, path + ": network");
    c.leaf_nodes = net["leaf_nodes"] ? get<int>(net, "leaf_nodes", path + ": network") : 0;
    c.oversubscription = net["oversubscription"] ? get<double>(net, "oversubscription", path + ": network") : 1;
    if (c.leaf_nodes < 0) throw Error(path + ": network: 'leaf_nodes' must not be negative");
    if (!(c.oversubscription >= 1) || !std::isfinite(c.oversubscription))
      throw Error(path + ": network: 'oversubscription' must be 1 or more (2 means 2:1)");
  }
  return c;
}

Workload load_workload(const std::string& path) {
  const YAML::Node root = load(path);
  only_keys(root, {"seed", "jobs"}, path);
  Workload w;
  if (root["seed"]) w.seed = get<unsigned long>(root, "seed", path);
  if (!root["jobs"] || !root["jobs"].IsSequence() || root["jobs"].size() == 0)
    throw Error(path + ": 'jobs' must be a non-empty list of {count, gpus, model_bytes, compute_s}");
  long total = 0;
  for (size_t i = 0; i < root["jobs"].size(); ++i) {
    const YAML::Node j = root["jobs"][i];
    const std::string where = path + ": jobs[" + std::to_string(i) + "]";
    only_keys(j, {"count", "gpus", "model_bytes", "compute_s"}, where);
    JobSpec s;
    s.count = j["count"] ? get<int>(j, "count", where) : 1;
    s.gpus = get<int>(j, "gpus", where);
    s.model_bytes = get<double>(j, "model_bytes", where);
    s.compute_s = j["compute_s"] ? get<double>(j, "compute_s", where) : 0;
    if (s.count < 1 || s.gpus < 1) throw Error(where + ": 'count' and 'gpus' must be 1 or more");
    if (!(s.model_bytes > 0) || !std::isfinite(s.model_bytes)) throw Error(where + ": 'model_bytes' must be positive");
    if (!(s.compute_s >= 0) || !std::isfinite(s.compute_s)) throw Error(where + ": 'compute_s' must not be negative");
    total += s.count;
    if (total > 1000000) throw Error(path + ": at most 1000000 jobs");
    w.jobs.push_back(s);
  }
  return w;
}

}  // namespace loom::topo::sim

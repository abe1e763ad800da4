// json_reader.cpp — the JSON of `loom-topo export --as json` read back into a Topology, so a
// topology that came from `nvidia-smi topo -m` text (no hwloc tree to export as XML) can be
// the plugin's cache too. nlohmann-json is header-only: the plugin carries no new library.
// Every inconsistency is an Error (the plugin runs as root inside slurmstepd: nothing crashes).

#include "loom/topo/readers.hpp"

#if __has_include(<nlohmann/json.hpp>)
#include <nlohmann/json.hpp>
#define LOOM_TOPO_JSON 1
#endif

namespace loom::topo {

#ifdef LOOM_TOPO_JSON
namespace {

using json = nlohmann::json;
constexpr size_t kMaxItems = 4096;  // GPUs, NICs, NUMA nodes: far beyond any node

const json& list(const json& j, const char* key, const std::string& label) {
  const json& v = j.at(key);
  if (!v.is_array() || v.size() > kMaxItems) throw Error(label + ": '" + key + "' must be a list of at most 4096 items");
  return v;
}

std::vector<int> ints(const json& j, const std::string& label) {
  if (!j.is_array() || j.size() > static_cast<size_t>(kMaxListEntries)) throw Error(label + ": expected a list of integers");
  std::vector<int> out;
  for (const auto& x : j) out.push_back(x.get<int>());
  return out;
}

std::vector<std::vector<Path>> paths(const json& j, const char* key, size_t rows, size_t cols, const std::string& label) {
  const json& m = list(j, key, label);
  if (m.size() != rows) throw Error(label + ": '" + key + "' has " + std::to_string(m.size()) + " rows, not " + std::to_string(rows));
  std::vector<std::vector<Path>> out(rows);
  for (size_t i = 0; i < rows; ++i) {
    if (!m[i].is_array() || m[i].size() != cols)
      throw Error(label + ": '" + key + "' row " + std::to_string(i) + " needs " + std::to_string(cols) + " entries");
    for (const auto& w : m[i]) out[i].push_back(parse_path_word(w.get<std::string>()));
  }
  return out;
}

NumaNode numa_node(const json& n, const std::string& label) {
  NumaNode out;
  out.id = n.at("id").get<int>();
  out.cpus = ints(n.at("cpus"), label);
  out.memory_mb = n.value("memory_mb", std::uint64_t{0});
  out.socket = n.value("socket", 0);
  if (n.contains("cores")) {
    for (const auto& c : list(n, "cores", label)) out.cores.push_back({c.at("logical").get<int>(), ints(c.at("pus"), label)});
  } else {
    for (int cpu : out.cpus) out.cores.push_back({cpu, {cpu}});  // no core facts: each CPU a core
  }
  return out;
}

}  // namespace

Topology parse_topology_json(const std::string& text, const std::string& label) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw Error(label + ": not a JSON object (loom-topo export --as json)");
  try {
    Topology t;
    t.host = j.value("host", std::string());
    t.source = "json:" + label;
    t.sockets = j.value("sockets", 1);
    t.threads_per_core = j.value("threads_per_core", 1);
    t.memory_mb = j.value("memory_mb", std::uint64_t{0});
    for (const auto& n : list(j, "numa_nodes", label)) t.numa_nodes.push_back(numa_node(n, label));
    for (const auto& g : list(j, "gpus", label)) {
      Gpu gpu;
      gpu.index = g.at("index").get<int>();
      gpu.name = g.value("name", std::string());
      gpu.cls = g.value("class", gpu_class_from_name(gpu.name));
      gpu.pci = g.value("pci", std::string());
      gpu.numa = g.value("numa", -1);
      gpu.cpus = ints(g.value("cpus", json::array()), label);
      gpu.memory_mb = g.value("memory_mb", std::uint64_t{0});
      t.gpus.push_back(gpu);
    }
    for (const auto& n : list(j, "nics", label))
      t.nics.push_back({n.at("name").get<std::string>(), n.value("pci", std::string()), n.value("numa", -1)});
    t.gpu_paths = paths(j, "gpu_paths", t.gpus.size(), t.gpus.size(), label);
    t.gpu_nic_paths = paths(j, "gpu_nic_paths", t.gpus.size(), t.nics.size(), label);
    if (t.sockets < 1 || t.sockets > 1024 || t.threads_per_core < 1 || t.threads_per_core > 64)
      throw Error(label + ": 'sockets' or 'threads_per_core' out of range");
    t.validate();
    return t;
  } catch (const json::exception& e) {
    throw Error(label + ": " + e.what());
  }
}

#else

Topology parse_topology_json(const std::string&, const std::string& label) {
  throw Error(label + ": JSON topologies need a build with nlohmann-json (use hwloc XML or nvidia-smi text)");
}

#endif

}  // namespace loom::topo

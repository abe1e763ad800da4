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

// Integers only, in range: a float or a huge number is an error, never a narrowing cast.
int as_int(const json& v, const std::string& label) {
  if (!v.is_number_integer()) throw Error(label + ": expected an integer, not " + v.dump().substr(0, 40));
  const auto x = v.get<std::int64_t>();
  if (x < -1 || x > (1 << 24)) throw Error(label + ": " + std::to_string(x) + " is out of range");
  return static_cast<int>(x);
}
int int_or(const json& j, const char* key, int fallback, const std::string& label) {
  return j.contains(key) ? as_int(j.at(key), label) : fallback;
}
std::uint64_t mb_or_zero(const json& j, const std::string& label) {
  if (!j.contains("memory_mb")) return 0;
  const json& v = j.at("memory_mb");
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
    throw Error(label + ": 'memory_mb' must be a non-negative integer");
  return v.get<std::uint64_t>();
}

const json& list(const json& j, const char* key, const std::string& label) {
  const json& v = j.at(key);
  if (!v.is_array() || v.size() > kMaxItems) throw Error(label + ": '" + key + "' must be a list of at most 4096 items");
  return v;
}

std::vector<int> ints(const json& j, const std::string& label) {
  if (!j.is_array() || j.size() > static_cast<size_t>(kMaxListEntries)) throw Error(label + ": expected a list of integers");
  std::vector<int> out;
  for (const auto& x : j) out.push_back(as_int(x, label));
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
  out.id = as_int(n.at("id"), label);
  out.cpus = ints(n.at("cpus"), label);
  out.memory_mb = mb_or_zero(n, label);
  out.socket = int_or(n, "socket", 0, label);
  if (n.contains("cores")) {
    for (const auto& c : list(n, "cores", label)) out.cores.push_back({as_int(c.at("logical"), label), ints(c.at("pus"), label)});
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
    t.sockets = int_or(j, "sockets", 1, label);
    t.threads_per_core = int_or(j, "threads_per_core", 1, label);
    t.memory_mb = mb_or_zero(j, label);
    for (const auto& n : list(j, "numa_nodes", label)) t.numa_nodes.push_back(numa_node(n, label));
    for (const auto& g : list(j, "gpus", label)) {
      Gpu gpu;
      gpu.index = as_int(g.at("index"), label);
      gpu.name = g.value("name", std::string());
      gpu.cls = g.value("class", gpu_class_from_name(gpu.name));
      gpu.pci = g.value("pci", std::string());
      gpu.numa = int_or(g, "numa", -1, label);
      gpu.cpus = ints(g.value("cpus", json::array()), label);
      gpu.memory_mb = mb_or_zero(g, label);
      t.gpus.push_back(gpu);
    }
    for (const auto& n : list(j, "nics", label))
      t.nics.push_back({n.at("name").get<std::string>(), n.value("pci", std::string()), int_or(n, "numa", -1, label)});
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

// emit_json.cpp — JSON output: the node export and placements, written with nlohmann-json (header
// only: the plugin carries no new library). Names that are not UTF-8 (a hostname, a GPU's name)
// are written with U+FFFD in place of the bad bytes, so the output is always valid JSON.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "loom/json_text.hpp"
#include "loom/topo/emit.hpp"

namespace loom::topo {

using ojson = nlohmann::ordered_json;

namespace {

template <typename F>
ojson matrix(size_t rows, size_t cols, F cell) {
  ojson m = ojson::array();
  for (size_t i = 0; i < rows; ++i) {
    ojson row = ojson::array();
    for (size_t j = 0; j < cols; ++j) row.push_back(cell(i, j));
    m.push_back(std::move(row));
  }
  return m;
}

// A measured figure as the text output shows it: 6 significant digits, a whole number without a
// point ("50", not "50.0").
ojson figure(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  const double r = std::strtod(buf, nullptr);
  if (std::isfinite(r) && r == std::floor(r) && std::fabs(r) < 9e15) return static_cast<int64_t>(r);
  return r;
}

ojson numa_json(const NumaNode& n) {
  ojson cores = ojson::array();
  for (const auto& c : n.cores) cores.push_back({{"logical", c.logical}, {"pus", c.pus}});
  return {{"id", n.id}, {"cpus", n.cpus}, {"memory_mb", n.memory_mb}, {"socket", n.socket}, {"cores", cores}};
}

}  // namespace

std::string emit_json(const Topology& t) {
  ojson numa = ojson::array(), gpus = ojson::array(), nics = ojson::array();
  for (const auto& n : t.numa_nodes) numa.push_back(numa_json(n));
  for (const auto& g : t.gpus)
    gpus.push_back({{"index", g.index}, {"name", g.name}, {"class", g.cls}, {"pci", g.pci}, {"numa", g.numa},
                    {"cpus", g.cpus}, {"memory_mb", g.memory_mb}});
  for (const auto& n : t.nics) nics.push_back({{"name", n.name}, {"pci", n.pci}, {"numa", n.numa}});
  const size_t g = t.gpus.size();
  ojson j = {{"host", t.host}, {"source", t.source}, {"sockets", t.sockets},
             {"threads_per_core", t.threads_per_core}, {"memory_mb", t.memory_mb}};
  j["numa_nodes"] = numa;
  j["gpus"] = gpus;
  j["nics"] = nics;
  j["gpu_paths"] = matrix(g, g, [&](size_t a, size_t b) { return path_word(t.gpu_paths[a][b]); });
  j["nvlinks"] = matrix(g, g, [&](size_t a, size_t b) { return t.gpu_paths[a][b].nvlinks; });
  j["gpu_nic_paths"] = matrix(g, t.nics.size(), [&](size_t a, size_t b) { return path_word(t.gpu_nic_paths[a][b]); });
  return json_text(j) + "\n";
}

std::string emit_placement_json(const Placement& p) {
  ojson tasks = ojson::array();
  for (const auto& task : p.tasks)
    tasks.push_back({{"local_rank", task.local_rank}, {"gpus", task.gpus}, {"cpus", task.cpus}, {"numa", task.numa},
                     {"nic", task.nic.empty() ? ojson() : ojson(task.nic)},
                     {"nic_path", task.nic_path.empty() ? ojson() : ojson(task.nic_path)}});
  ojson j = {{"mode", bind_mode_word(p.mode)}, {"ring", p.ring.gpus}, {"ring_bottleneck_links", p.ring.bottleneck_links},
             {"ring_bottleneck_gbps", figure(p.ring.bottleneck_gbps)}};
  j["tasks"] = tasks;
  return json_text(j) + "\n";
}

}  // namespace loom::topo

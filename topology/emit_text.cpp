// emit_text.cpp — human-readable output: the `show` matrix (re-readable as nvidia-smi text)
// and placements.
#include <sstream>

#include "loom/topo/emit.hpp"

namespace loom::topo {

std::string emit_show(const Topology& t) {
  std::ostringstream os;
  const size_t g = t.gpus.size(), n = t.nics.size();
  for (size_t i = 0; i < g; ++i) os << "\tGPU" << i;
  for (size_t k = 0; k < n; ++k) os << "\tNIC" << k;
  os << "\tCPU Affinity\tNUMA Affinity\n";
  for (size_t i = 0; i < g; ++i) {
    os << "GPU" << i;
    for (size_t j = 0; j < g; ++j) os << "\t " << path_word(t.gpu_paths[i][j]) << " ";
    for (size_t k = 0; k < n; ++k) os << "\t" << path_word(t.gpu_nic_paths[i][k]);
    const Gpu& gpu = t.gpus[i];
    os << "\t" << (gpu.cpus.empty() ? "N/A" : format_cpu_list(gpu.cpus)) << "\t"
       << (gpu.numa < 0 ? std::string("N/A") : std::to_string(gpu.numa)) << "\n";
  }
  for (size_t k = 0; k < n; ++k) {
    os << "NIC" << k;
    for (size_t i = 0; i < g; ++i) os << "\t" << path_word(t.gpu_nic_paths[i][k]);
    for (size_t m = 0; m < n; ++m) {
      // NIC<->NIC paths are not modelled; show them the way they relate through NUMA.
      std::string w = m == k ? " X " : (t.nics[m].numa == t.nics[k].numa && t.nics[k].numa >= 0 ? "NODE" : "SYS");
      os << "\t" << w;
    }
    os << "\n";
  }
  os << "\nLegend:\n\n"
        "  X    = Self\n"
        "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes\n"
        "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
        "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
        "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
        "  PIX  = Connection traversing at most a single PCIe bridge\n"
        "  NV#  = Connection traversing a bonded set of # NVLinks\n";
  if (n) {
    os << "\nNIC Legend:\n\n";
    for (size_t k = 0; k < n; ++k) os << "  NIC" << k << ": " << t.nics[k].name << "\n";
  }
  if (g) {
    os << "\n";
    for (size_t i = 0; i < g; ++i)
      os << "GPU " << i << ": " << (t.gpus[i].name.empty() ? "unknown" : t.gpus[i].name) << " (class "
         << t.gpus[i].cls << (t.gpus[i].pci.empty() ? "" : ", PCI " + t.gpus[i].pci) << ")\n";
  }
  os << "\nNUMA nodes:";
  for (const auto& node : t.numa_nodes) os << " " << node.id << "=" << format_cpu_list(node.cpus);
  os << "\n";
  return os.str();
}

std::string emit_placement_text(const Topology& t, const Placement& p) {
  std::ostringstream os;
  os << "mode " << bind_mode_word(p.mode) << "; ring";
  for (int g : p.ring.gpus) os << " " << g;
  os << "; bottleneck " << p.ring.bottleneck_gbps << " GB/s";
  if (p.ring.bottleneck_links) os << " (NV" << p.ring.bottleneck_links << ")";
  os << "\n";
  for (const auto& task : p.tasks) {
    os << "task " << task.local_rank << ": gpu ";
    if (task.gpus.empty()) os << "-";
    for (size_t i = 0; i < task.gpus.size(); ++i) {
      const Gpu* g = t.gpu_by_index(task.gpus[i]);
      os << (i ? "," : "") << task.gpus[i] << (g ? "(" + g->cls + ")" : "");
    }
    os << " cpus " << format_cpu_list(task.cpus) << " numa " << task.numa << " nic "
       << (task.nic.empty() ? "-" : task.nic + (task.nic_path.empty() ? "" : "(" + task.nic_path + ")")) << "\n";
  }
  return os.str();
}

}  // namespace loom::topo

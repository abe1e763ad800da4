// emit_nccl.cpp — an NCCL_TOPO_FILE: one <cpu> per NUMA node holding its GPUs and NICs as
// <pci> devices, with <nvlink> elements for the NVLinks between GPUs.
#include <cstdio>
#include <sstream>

#include "loom/topo/emit.hpp"

namespace loom::topo {

namespace {

// Linux cpumap form, as NCCL reads it: 32-bit hex words, most significant first.
std::string cpu_mask(const std::vector<int>& cpus) {
  int max = 0;
  for (int c : cpus) max = std::max(max, c);
  std::vector<unsigned> words(static_cast<size_t>(max / 32 + 1), 0);
  for (int c : cpus) words[static_cast<size_t>(c / 32)] |= 1u << (c % 32);
  std::string s;
  for (size_t i = words.size(); i-- > 0;) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", words[i]);
    s += buf;
    if (i) s += ",";
  }
  return s;
}

int sm_of(const std::string& cls) {
  if (cls == "p100") return 60;
  if (cls == "v100") return 70;
  if (cls == "t4") return 75;
  if (cls[0] == 'a' || cls == "rtx3090") return 80;
  if (cls == "l4" || cls == "l40" || cls == "l40s") return 89;
  if (cls == "h100" || cls == "h200" || cls == "gh200") return 90;
  if (cls == "b200" || cls == "gb200") return 100;
  return 0;
}

}  // namespace

std::string emit_nccl_xml(const Topology& t) {
  for (const auto& g : t.gpus)
    if (g.pci.empty())
      throw Error("an NCCL topology needs the GPUs' PCI ids, which " + t.source +
                  " does not give (use hwloc XML or live discovery)");
  std::ostringstream os;
  os << "<system version=\"1\">\n";
  auto numas = t.numa_nodes;
  bool orphan_gpu = false;
  for (const auto& g : t.gpus) orphan_gpu = orphan_gpu || g.numa < 0;
  if (orphan_gpu || numas.empty()) numas.push_back({-1, {}, {}, 0, 0});
  for (const auto& node : numas) {
    bool any = false;
    for (const auto& g : t.gpus) any = any || g.numa == node.id;
    for (const auto& n : t.nics) any = any || (n.numa == node.id && !n.pci.empty());
    if (!any) continue;
    os << "  <cpu numaid=\"" << node.id << "\"";
    if (!node.cpus.empty()) os << " affinity=\"" << cpu_mask(node.cpus) << "\"";
    os << " arch=\"x86_64\">\n";
    for (size_t i = 0; i < t.gpus.size(); ++i) {
      const Gpu& g = t.gpus[i];
      if (g.numa != node.id) continue;
      os << "    <pci busid=\"" << g.pci << "\" class=\"0x030200\" vendor=\"0x10de\" link_width=\"16\">\n"
         << "      <gpu dev=\"" << g.index << "\" sm=\"" << sm_of(g.cls) << "\" rank=\"" << g.index
         << "\" gdr=\"1\">\n";
      for (size_t j = 0; j < t.gpus.size(); ++j) {
        const Path& p = t.gpu_paths[i][j];
        if (p.kind == PathKind::kNVLink)
          os << "        <nvlink target=\"" << t.gpus[j].pci << "\" count=\"" << p.nvlinks
             << "\" tclass=\"0x030200\"/>\n";
      }
      os << "      </gpu>\n    </pci>\n";
    }
    int dev = 0;
    for (const auto& n : t.nics) {
      if (n.numa == node.id && !n.pci.empty())
        os << "    <pci busid=\"" << n.pci << "\" class=\"0x020700\" link_width=\"16\">\n"
           << "      <nic>\n        <net name=\"" << n.name << "\" dev=\"" << dev << "\" port=\"1\" gdr=\"1\"/>\n"
           << "      </nic>\n    </pci>\n";
      ++dev;
    }
    os << "  </cpu>\n";
  }
  os << "</system>\n";
  return os.str();
}

}  // namespace loom::topo

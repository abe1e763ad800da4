// hwloc_reader.cpp — builds a Topology from an hwloc topology: live (with NVML facts merged in
// and attached for export) or loaded from hwloc XML. PCI paths follow nvidia-smi's definitions.
#include <fcntl.h>
#include <hwloc.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <sys/stat.h>

#include "loom/topo/readers.hpp"
#include "nvml_probe.hpp"

namespace loom::topo {

namespace {

constexpr double kNvlinkMBps = 25000.0;  // what hwloc's NVML backend records per link
constexpr const char* kNvlinkDistances = "NVLinkBandwidth";

struct HwlocDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using HwlocPtr = std::unique_ptr<hwloc_topology, HwlocDeleter>;

HwlocPtr new_topology() {
  hwloc_topology_t t = nullptr;
  if (hwloc_topology_init(&t) != 0) throw Error("hwloc_topology_init failed");
  HwlocPtr p(t);
  hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_ALL);
  return p;
}

constexpr int kMaxCpuId = (1 << 20) - 1;  // beyond any machine; guards against hostile XML
constexpr int kMaxPus = 1 << 16;

std::vector<int> pus_of(hwloc_const_cpuset_t set) {
  std::vector<int> out;
  if (!set || hwloc_bitmap_iszero(set)) return out;
  int weight = hwloc_bitmap_weight(set);  // -1 for an infinite set
  if (weight < 0 || weight > kMaxPus || hwloc_bitmap_last(set) > kMaxCpuId)
    throw Error("CPU set " + std::string(weight < 0 ? "is infinite" : "is beyond " + std::to_string(kMaxCpuId)) +
                ": not a real machine");
  int i;
  hwloc_bitmap_foreach_begin(i, set) out.push_back(i);
  hwloc_bitmap_foreach_end();
  return out;
}

std::string pci_id(hwloc_obj_t o) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%01x", o->attr->pcidev.domain, o->attr->pcidev.bus,
                o->attr->pcidev.dev, o->attr->pcidev.func);
  return buf;
}

hwloc_obj_t pci_parent(hwloc_obj_t o) {
  while (o && o->type != HWLOC_OBJ_PCI_DEVICE) o = o->parent;
  return o;
}

bool is_gpu(hwloc_obj_t o) {
  return o->type == HWLOC_OBJ_PCI_DEVICE && o->attr->pcidev.vendor_id == 0x10de &&
         (o->attr->pcidev.class_id >> 8) == 0x03;
}

const char* info_here_or_below(hwloc_obj_t o, const char* key) {
  if (const char* v = hwloc_obj_get_info_by_name(o, key)) return v;
  for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling)
    if (const char* v = info_here_or_below(c, key)) return v;
  return nullptr;
}

int numa_of(hwloc_obj_t non_io) {
  if (!non_io || !non_io->nodeset || hwloc_bitmap_weight(non_io->nodeset) != 1) return -1;
  return hwloc_bitmap_first(non_io->nodeset);
}

// nvidia-smi's path classes from the PCI tree: PIX (one switch), PXB (several), PHB (host
// bridge), NODE (host bridges of one NUMA node), SYS (across NUMA nodes).
Path pci_path(hwloc_topology_t t, hwloc_obj_t a, hwloc_obj_t b) {
  if (a == b) return {PathKind::kSelf, 0};
  std::set<hwloc_obj_t> up;
  for (hwloc_obj_t o = a; o; o = o->parent) up.insert(o);
  hwloc_obj_t lca = b;
  while (lca && !up.count(lca)) lca = lca->parent;
  if (lca && lca->type == HWLOC_OBJ_BRIDGE) {
    // Read as an int: hostile XML can store values outside the enum.
    int upstream = 0;
    std::memcpy(&upstream, &lca->attr->bridge.upstream_type, sizeof upstream);
    if (upstream == HWLOC_OBJ_BRIDGE_HOST) return {PathKind::kPHB, 0};
    auto bridges_below = [lca](hwloc_obj_t o) {
      int n = 0;
      for (o = o->parent; o && o != lca; o = o->parent)
        if (o->type == HWLOC_OBJ_BRIDGE) ++n;
      return n;
    };
    return {std::max(bridges_below(a), bridges_below(b)) <= 1 ? PathKind::kPIX : PathKind::kPXB, 0};
  }
  if (lca && lca->type == HWLOC_OBJ_PCI_DEVICE) return {PathKind::kPIX, 0};
  int na = numa_of(hwloc_get_non_io_ancestor_obj(t, a));
  int nb = numa_of(hwloc_get_non_io_ancestor_obj(t, b));
  return {(na >= 0 && na == nb) ? PathKind::kNODE : PathKind::kSYS, 0};
}

// NVLink counts: direct GPU<->GPU links, plus links into NVSwitches; GPUs that both reach a
// switch talk through it with the smaller of their link counts (NV12 on a DGX A100).
void apply_nvlinks(Topology* topo, const std::vector<std::vector<int>>& direct,
                   const std::vector<int>& switch_links) {
  const size_t g = topo->gpus.size();
  for (size_t i = 0; i < g; ++i)
    for (size_t j = 0; j < g; ++j) {
      if (i == j) continue;
      int n = direct[i][j];
      if (n == 0 && switch_links[i] > 0 && switch_links[j] > 0) n = std::min(switch_links[i], switch_links[j]);
      if (n > 0) topo->gpu_paths[i][j] = {PathKind::kNVLink, n};
    }
}

void fill_cpus_and_numa(hwloc_topology_t t, Topology* topo) {
  if (const char* h = hwloc_obj_get_info_by_name(hwloc_get_root_obj(t), "HostName")) topo->host = h;
  topo->sockets = std::max(1, hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE));
  int ncores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
  int npus = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
  topo->threads_per_core = ncores > 0 ? std::max(1, npus / ncores) : 1;
  for (hwloc_obj_t n = nullptr; (n = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, n));) {
    NumaNode node;
    node.id = static_cast<int>(n->os_index);
    node.cpus = pus_of(n->cpuset);
    node.memory_mb = n->attr->numanode.local_memory >> 20;
    hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, n);
    if (!pkg) {  // memory children hang off their parent; find the package covering the node
      pkg = hwloc_get_next_obj_covering_cpuset_by_type(t, n->cpuset, HWLOC_OBJ_PACKAGE, nullptr);
    }
    node.socket = pkg ? static_cast<int>(pkg->logical_index) : 0;
    topo->memory_mb += node.memory_mb;
    topo->numa_nodes.push_back(node);
  }
  for (hwloc_obj_t c = nullptr; (c = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_CORE, c));) {
    Core core{static_cast<int>(c->logical_index), pus_of(c->cpuset)};
    if (core.pus.empty()) continue;
    int numa = topo->numa_of_cpu(core.pus[0]);
    for (auto& node : topo->numa_nodes)
      if (node.id == numa) node.cores.push_back(core);
  }
  std::sort(topo->numa_nodes.begin(), topo->numa_nodes.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
}

// The GPUs, in PCI order; with NVML's facts (live discovery) attached to the hwloc objects so that
// the exported XML carries them. `pos`: each GPU object's index.
std::vector<hwloc_obj_t> read_gpus(hwloc_topology_t t, const std::map<std::string, const detail::NvmlGpu*>& by_pci,
                                   Topology* topo, std::map<hwloc_obj_t, int>* pos) {
  std::vector<hwloc_obj_t> gpu_objs;
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_pcidev(t, o));)
    if (is_gpu(o)) gpu_objs.push_back(o);
  std::sort(gpu_objs.begin(), gpu_objs.end(), [](hwloc_obj_t a, hwloc_obj_t b) { return pci_id(a) < pci_id(b); });
  for (hwloc_obj_t o : gpu_objs) {
    auto it = by_pci.find(pci_id(o));
    if (it == by_pci.end()) continue;
    if (!it->second->name.empty()) hwloc_obj_add_info(o, "GPUModel", it->second->name.c_str());
    std::string kib = std::to_string(it->second->memory_mb << 10);
    hwloc_obj_add_info(o, "CUDAGlobalMemorySize", kib.c_str());
  }
  for (hwloc_obj_t o : gpu_objs) {
    Gpu g;
    g.index = static_cast<int>(topo->gpus.size());
    g.pci = pci_id(o);
    if (const char* v = info_here_or_below(o, "GPUModel")) g.name = v;
    if (const char* v = info_here_or_below(o, "CUDAGlobalMemorySize")) g.memory_mb = std::strtoull(v, nullptr, 10) >> 10;
    g.cls = gpu_class_from_name(g.name);
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, o);
    g.numa = numa_of(anc);
    g.cpus = pus_of(anc ? anc->cpuset : nullptr);
    (*pos)[o] = static_cast<int>(topo->gpus.size());
    topo->gpus.push_back(g);
  }
  return gpu_objs;
}

// RDMA NICs (OpenFabrics devices), in PCI order like the GPUs; returns their objects.
std::vector<hwloc_obj_t> read_nics(hwloc_topology_t t, Topology* topo) {
  struct NicObj {
    Nic nic;
    hwloc_obj_t obj;
  };
  std::vector<NicObj> found;
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_osdev(t, o));) {
    // hwloc copies the type number from the XML unchecked: read it as an integer, not an enum.
    int type = -1;
    static_assert(sizeof type == sizeof o->attr->osdev.type, "osdev type is an int-sized enum");
    std::memcpy(&type, &o->attr->osdev.type, sizeof type);
    if (type != HWLOC_OBJ_OSDEV_OPENFABRICS || !o->name) continue;
    hwloc_obj_t p = pci_parent(o);
    Nic nic;
    nic.name = o->name;
    nic.pci = p ? pci_id(p) : "";
    nic.numa = numa_of(hwloc_get_non_io_ancestor_obj(t, o));
    found.push_back({nic, p ? p : o});
  }
  std::stable_sort(found.begin(), found.end(), [](const NicObj& a, const NicObj& b) {
    return a.nic.pci != b.nic.pci ? a.nic.pci < b.nic.pci : a.nic.name < b.nic.name;
  });
  std::vector<hwloc_obj_t> nic_objs;
  for (const auto& f : found) {
    topo->nics.push_back(f.nic);
    nic_objs.push_back(f.obj);
  }
  return nic_objs;
}

// NVLinks: direct[i][j] links between GPUs i and j, switch_links[i] to an NVSwitch.
struct NvLinks {
  std::vector<std::vector<int>> direct;
  std::vector<int> switch_links;
};

// From NVML's peers (live), attached to the hwloc topology so that `export --as xml` carries them.
NvLinks nvlinks_from_nvml(hwloc_topology_t t, const std::map<std::string, const detail::NvmlGpu*>& by_pci,
                          const Topology& topo, std::vector<hwloc_obj_t>& gpu_objs) {
  const size_t g = gpu_objs.size();
  NvLinks l{std::vector<std::vector<int>>(g, std::vector<int>(g, 0)), std::vector<int>(g, 0)};
  std::map<std::string, int> gpu_at;
  for (size_t i = 0; i < g; ++i) gpu_at[topo.gpus[i].pci] = static_cast<int>(i);
  for (size_t i = 0; i < g; ++i) {
    auto it = by_pci.find(topo.gpus[i].pci);
    if (it == by_pci.end()) continue;
    for (const auto& peer : it->second->nvlink_peers) {
      auto p = gpu_at.find(peer);
      if (p != gpu_at.end()) ++l.direct[i][p->second];
      else ++l.switch_links[i];
    }
  }
  bool any = false;
  for (size_t i = 0; i < g; ++i)
    any = any || l.switch_links[i] > 0 || std::any_of(l.direct[i].begin(), l.direct[i].end(), [](int n) { return n > 0; });
  if (!any || g < 2) return l;
  std::vector<hwloc_uint64_t> values(g * g, 0);
  for (size_t i = 0; i < g; ++i)
    for (size_t j = 0; j < g; ++j) {
      int n = l.direct[i][j];
      if (i != j && n == 0 && l.switch_links[i] && l.switch_links[j]) n = std::min(l.switch_links[i], l.switch_links[j]);
      values[i * g + j] = static_cast<hwloc_uint64_t>(n * kNvlinkMBps);
    }
  auto h = hwloc_distances_add_create(t, kNvlinkDistances, HWLOC_DISTANCES_KIND_FROM_OS | HWLOC_DISTANCES_KIND_MEANS_BANDWIDTH, 0);
  if (h && hwloc_distances_add_values(t, h, static_cast<unsigned>(g), gpu_objs.data(), values.data(), 0) == 0)
    hwloc_distances_add_commit(t, h, 0);
  return l;
}

// From the NVLink bandwidth matrix an exported XML carries.
NvLinks nvlinks_from_xml(hwloc_topology_t t, const std::map<hwloc_obj_t, int>& pos, size_t g) {
  NvLinks l{std::vector<std::vector<int>>(g, std::vector<int>(g, 0)), std::vector<int>(g, 0)};
  unsigned nr = 0;
  hwloc_distances_get_by_name(t, kNvlinkDistances, &nr, nullptr, 0);
  std::vector<hwloc_distances_s*> dist(nr);
  if (!nr || hwloc_distances_get_by_name(t, kNvlinkDistances, &nr, dist.data(), 0) != 0) return l;
  for (unsigned d = 0; d < nr; ++d) {
    const unsigned n = dist[d]->nbobjs;
    for (unsigned a = 0; a < n; ++a) {
      auto ia = pos.find(pci_parent(dist[d]->objs[a]));
      if (ia == pos.end()) continue;
      for (unsigned b = 0; b < n; ++b) {
        if (a == b) continue;
        long links = std::lround(static_cast<double>(dist[d]->values[a * n + b]) / kNvlinkMBps);
        if (links <= 0) continue;
        auto ib = pos.find(pci_parent(dist[d]->objs[b]));
        if (ib != pos.end()) l.direct[ia->second][ib->second] = static_cast<int>(links);
        else l.switch_links[ia->second] += static_cast<int>(links);  // an NVSwitch
      }
    }
    hwloc_distances_release(t, dist[d]);
  }
  return l;
}

// Builds the model; with `nvml` (live discovery) GPU facts come from the driver and are
// attached to the hwloc objects so that the exported XML carries them.
Topology from_hwloc(hwloc_topology_t t, const std::string& source,
                    const std::vector<detail::NvmlGpu>* nvml) {
  Topology topo;
  topo.source = source;
  if (hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU) > kMaxPus || hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE) > 4096 ||
      hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PCI_DEVICE) > 65536)
    throw Error(source + ": more CPUs, NUMA nodes or PCI devices than any real machine has");
  fill_cpus_and_numa(t, &topo);
  std::map<std::string, const detail::NvmlGpu*> by_pci;
  if (nvml)
    for (const auto& g : *nvml) by_pci[g.pci] = &g;
  std::map<hwloc_obj_t, int> pos;
  std::vector<hwloc_obj_t> gpu_objs = read_gpus(t, by_pci, &topo, &pos);
  const std::vector<hwloc_obj_t> nic_objs = read_nics(t, &topo);

  const size_t g = gpu_objs.size();
  topo.gpu_paths.assign(g, std::vector<Path>(g));
  topo.gpu_nic_paths.assign(g, std::vector<Path>(nic_objs.size()));
  for (size_t i = 0; i < g; ++i) {
    for (size_t j = 0; j < g; ++j) topo.gpu_paths[i][j] = pci_path(t, gpu_objs[i], gpu_objs[j]);
    for (size_t k = 0; k < nic_objs.size(); ++k) {
      topo.gpu_nic_paths[i][k] = pci_path(t, gpu_objs[i], nic_objs[k]);
      if (topo.gpu_nic_paths[i][k].kind == PathKind::kSelf) topo.gpu_nic_paths[i][k] = {PathKind::kPIX, 0};
    }
  }
  const NvLinks links = nvml ? nvlinks_from_nvml(t, by_pci, topo, gpu_objs) : nvlinks_from_xml(t, pos, g);
  apply_nvlinks(&topo, links.direct, links.switch_links);

  if (nvml) {  // live: export, with the NVML facts attached above (XML input keeps its text)
    char* buf = nullptr;
    int len = 0;
    if (hwloc_topology_export_xmlbuffer(t, &buf, &len, 0) == 0 && buf) {
      topo.hwloc_xml.assign(buf, len > 0 ? static_cast<size_t>(len - 1) : 0);
      hwloc_free_xmlbuffer(t, buf);
    }
  }
  topo.validate();
  return topo;
}

// hwloc's XML parser is not hardened against hostile input (fuzzing found inputs that make
// hwloc_topology_load() dereference NULL). The plugin reads XML inside slurmstepd, where a
// crash is never acceptable, so every XML is first parsed in a forked child with a time limit.
// hwloc's parse is deterministic: when the child survives, the same parse is safe here.
void probe_xml_in_child(const std::string& xml, const std::string& label) {
  int fds[2];
  if (pipe(fds) != 0) throw Error(label + ": cannot create a pipe: " + std::strerror(errno));
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw Error(label + ": cannot fork to check the XML: " + std::strerror(errno));
  }
  if (pid == 0) {
    close(fds[0]);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDERR_FILENO);
    alarm(5);
    hwloc_topology_t t = nullptr;
    bool ok = hwloc_topology_init(&t) == 0;
    if (ok) hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_ALL);
    ok = ok && hwloc_topology_set_xmlbuffer(t, xml.data(), static_cast<int>(xml.size())) == 0 &&
         hwloc_topology_load(t) == 0;
    char c = ok ? 'K' : 'E';
    if (write(fds[1], &c, 1) != 1) _exit(3);
    _exit(0);
  }
  close(fds[1]);
  char c = 0;
  ssize_t n;
  do n = read(fds[0], &c, 1);
  while (n < 0 && errno == EINTR);
  close(fds[0]);
  int status = 0;
  pid_t w;
  do w = waitpid(pid, &status, 0);
  while (w < 0 && errno == EINTR);
  if (n == 1 && c == 'K') return;
  if (n == 1 && c == 'E') throw Error(label + ": not valid hwloc XML (malformed, truncated or of an unknown version)");
  std::string how = (w == pid && WIFSIGNALED(status)) ? std::string(" (") + strsignal(WTERMSIG(status)) + ")" : "";
  throw Error(label + ": not valid hwloc XML: hwloc's parser failed on it" + how);
}

Topology load_xml(const std::string& xml, const std::string& label) {
  if (xml.find_first_not_of(" \t\r\n") == std::string::npos) throw Error(label + ": empty file");
  if (xml.size() > (64u << 20)) throw Error(label + ": XML larger than 64 MiB");
  probe_xml_in_child(xml, label);
  HwlocPtr t = new_topology();
  if (hwloc_topology_set_xmlbuffer(t.get(), xml.data(), static_cast<int>(xml.size())) != 0)
    throw Error(label + ": not valid hwloc XML (malformed, truncated or of an unknown version)");
  if (hwloc_topology_load(t.get()) != 0) throw Error(label + ": hwloc could not load the XML topology");
  Topology topo = from_hwloc(t.get(), "hwloc-xml:" + label, nullptr);
  topo.hwloc_xml = xml;
  return topo;
}

}  // namespace

std::string read_small_file(const std::string& path, size_t limit) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) throw Error(path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw Error(path + ": not a regular file");
  if (static_cast<size_t>(st.st_size) > limit)
    throw Error(path + ": file of " + std::to_string(st.st_size) + " bytes is larger than the " +
                std::to_string(limit) + "-byte limit");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Topology read_hwloc_xml_file(const std::string& path) { return load_xml(read_small_file(path), path); }

Topology read_hwloc_xml_buffer(const std::string& xml, const std::string& label) { return load_xml(xml, label); }

Topology discover(std::string* notes) {
  HwlocPtr t = new_topology();
  if (hwloc_topology_load(t.get()) != 0) throw Error("hwloc could not discover this node's topology");
  std::vector<detail::NvmlGpu> nvml;
  std::string why;
  bool have = detail::probe_nvml(&nvml, &why);
  if (!have && notes) *notes = why;
  return from_hwloc(t.get(), "live", &nvml);
}

Topology read_topology_file(const std::string& path) {
  std::string text = read_small_file(path);
  auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) throw Error(path + ": empty file");
  if (text[first] == '<') return load_xml(text, path);
  if (text[first] == '{') return parse_topology_json(text, path);
  return parse_nvidia_smi(text, path);
}

std::string export_hwloc_xml(const Topology& t) {
  if (t.hwloc_xml.empty())
    throw Error("hwloc XML export needs a topology read by hwloc (live or --xml), not " + t.source);
  return t.hwloc_xml;
}

}  // namespace loom::topo

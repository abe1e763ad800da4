// emit_slurm.cpp — what Slurm's own scheduler needs to see the node as it is: gres.conf lines
// (Type, File, Cores in Slurm's abstract core ids, Links as NVLink counts) and the NodeName line.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "loom/json_text.hpp"
#include "loom/topo/emit.hpp"

namespace loom::topo {

namespace {

struct GresLine {
  std::string type, file, cores, links;
};

bool any_nvlink(const Topology& t) {
  for (const auto& row : t.gpu_paths)
    for (const auto& p : row)
      if (p.kind == PathKind::kNVLink) return true;
  return false;
}

std::vector<GresLine> gres_lines(const Topology& t, const std::string& dev_dir) {
  if (t.gpus.empty()) throw Error("no GPUs in this topology: there is nothing for gres.conf");
  std::vector<GresLine> out;
  const bool links = any_nvlink(t);
  for (size_t i = 0; i < t.gpus.size(); ++i) {
    const Gpu& g = t.gpus[i];
    GresLine l;
    l.type = g.cls;
    l.file = dev_dir + "/nvidia" + std::to_string(g.index);
    std::set<int> cpus(g.cpus.begin(), g.cpus.end());
    std::vector<int> cores;
    for (const auto& node : t.numa_nodes)
      for (const auto& core : node.cores)
        if (std::any_of(core.pus.begin(), core.pus.end(), [&](int pu) { return cpus.count(pu) > 0; }))
          cores.push_back(core.logical);
    l.cores = format_cpu_list(cores);
    if (links) {
      for (size_t j = 0; j < t.gpus.size(); ++j) {
        const Path& p = t.gpu_paths[i][j];
        l.links += (j ? "," : "") + std::string(i == j ? "-1" : std::to_string(p.nvlinks));
      }
    }
    out.push_back(l);
  }
  return out;
}

std::string basename_of(const std::string& source) {
  auto slash = source.find_last_of('/');
  auto colon = source.find(':');
  if (slash != std::string::npos) return source.substr(0, colon + 1) + source.substr(slash + 1);
  return source;
}

struct NodeLine {
  int cpus = 0, sockets = 1, cores_per_socket = 1, threads = 1;
  std::string gres;
  std::vector<std::string> features;
};

NodeLine node_line(const Topology& t) {
  NodeLine n;
  n.cpus = t.total_cpus();
  n.sockets = std::max(1, t.sockets);
  n.threads = std::max(1, t.threads_per_core);
  int cores = 0;
  for (const auto& node : t.numa_nodes) cores += static_cast<int>(node.cores.size());
  if (cores == 0) cores = n.cpus / n.threads;
  n.cores_per_socket = std::max(1, cores / n.sockets);
  std::vector<std::pair<std::string, int>> classes;  // in order of first GPU
  for (const auto& g : t.gpus) {
    auto it = std::find_if(classes.begin(), classes.end(), [&](const auto& c) { return c.first == g.cls; });
    if (it == classes.end()) classes.push_back({g.cls, 1});
    else ++it->second;
  }
  for (size_t i = 0; i < classes.size(); ++i) {
    n.gres += (i ? "," : "") + std::string("gpu:") + classes[i].first + ":" + std::to_string(classes[i].second);
    n.features.push_back(classes[i].first);
  }
  if (any_nvlink(t)) n.features.push_back("nvlink");
  if (t.is_nvswitch()) n.features.push_back("nvswitch");
  if (!t.nics.empty()) n.features.push_back("rdma");
  return n;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

}  // namespace

std::string emit_gres(const Topology& t, const std::string& dev_dir) {
  std::ostringstream os;
  os << "# gres.conf for " << (t.host.empty() ? "this node" : t.host) << ", written by loom-topo from "
     << basename_of(t.source) << "\n";
  for (const auto& l : gres_lines(t, dev_dir)) {
    os << "Name=gpu Type=" << l.type << " File=" << l.file;
    if (!l.cores.empty()) os << " Cores=" << l.cores;
    if (!l.links.empty()) os << " Links=" << l.links;
    os << "\n";
  }
  return os.str();
}

std::string emit_gres_json(const Topology& t, const std::string& dev_dir) {
  nlohmann::ordered_json gres = nlohmann::ordered_json::array();
  for (const auto& l : gres_lines(t, dev_dir))
    gres.push_back({{"name", "gpu"}, {"type", l.type}, {"file", l.file}, {"cores", l.cores}, {"links", l.links}});
  return json_text(nlohmann::ordered_json{{"gres", gres}}) + "\n";
}

std::string emit_node_conf(const Topology& t, const std::string& host) {
  NodeLine n = node_line(t);
  std::ostringstream os;
  os << "NodeName=" << host << " CPUs=" << n.cpus << " Boards=1 SocketsPerBoard=" << n.sockets
     << " CoresPerSocket=" << n.cores_per_socket << " ThreadsPerCore=" << n.threads;
  if (t.memory_mb) os << " RealMemory=" << t.memory_mb;
  if (!n.gres.empty()) os << " Gres=" << n.gres;
  if (!n.features.empty()) os << " Features=" << join(n.features, ",");
  os << "\n";
  return os.str();
}

std::string emit_node_conf_json(const Topology& t, const std::string& host) {
  NodeLine n = node_line(t);
  std::string line = emit_node_conf(t, host);
  line.pop_back();
  return json_text(nlohmann::ordered_json{{"node_name", host}, {"cpus", n.cpus}, {"sockets", n.sockets},
                    {"cores_per_socket", n.cores_per_socket}, {"threads_per_core", n.threads},
                    {"real_memory", t.memory_mb}, {"gres", n.gres}, {"features", n.features}, {"line", line}}) + "\n";
}

}  // namespace loom::topo

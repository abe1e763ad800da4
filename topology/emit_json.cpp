// emit_json.cpp — JSON output: the node export of Contract 1 and placements. A small writer
// of our own keeps libloomtopo free of dependencies the SPANK plugin would have to carry.
#include <cstdio>
#include <sstream>

#include "loom/topo/emit.hpp"

namespace loom::topo {

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

namespace {

std::string ints(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

std::string num(double d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", d);
  return buf;
}

template <typename F>
std::string matrix(size_t rows, size_t cols, F cell) {
  std::string s = "[";
  for (size_t i = 0; i < rows; ++i) {
    s += i ? ",[" : "[";
    for (size_t j = 0; j < cols; ++j) s += (j ? "," : "") + cell(i, j);
    s += "]";
  }
  return s + "]";
}

}  // namespace

std::string emit_json(const Topology& t) {
  std::ostringstream os;
  os << "{\"host\":" << json_quote(t.host) << ",\"source\":" << json_quote(t.source) << ",\"sockets\":" << t.sockets
     << ",\"threads_per_core\":" << t.threads_per_core << ",\"memory_mb\":" << t.memory_mb << ",\"numa_nodes\":[";
  for (size_t i = 0; i < t.numa_nodes.size(); ++i) {
    const auto& n = t.numa_nodes[i];
    os << (i ? "," : "") << "{\"id\":" << n.id << ",\"cpus\":" << ints(n.cpus) << ",\"memory_mb\":" << n.memory_mb
       << ",\"socket\":" << n.socket << ",\"cores\":[";
    for (size_t c = 0; c < n.cores.size(); ++c)
      os << (c ? "," : "") << "{\"logical\":" << n.cores[c].logical << ",\"pus\":" << ints(n.cores[c].pus) << "}";
    os << "]}";
  }
  os << "],\"gpus\":[";
  for (size_t i = 0; i < t.gpus.size(); ++i) {
    const auto& g = t.gpus[i];
    os << (i ? "," : "") << "{\"index\":" << g.index << ",\"name\":" << json_quote(g.name)
       << ",\"class\":" << json_quote(g.cls) << ",\"pci\":" << json_quote(g.pci) << ",\"numa\":" << g.numa
       << ",\"cpus\":" << ints(g.cpus) << ",\"memory_mb\":" << g.memory_mb << "}";
  }
  os << "],\"nics\":[";
  for (size_t i = 0; i < t.nics.size(); ++i) {
    const auto& n = t.nics[i];
    os << (i ? "," : "") << "{\"name\":" << json_quote(n.name) << ",\"pci\":" << json_quote(n.pci)
       << ",\"numa\":" << n.numa << "}";
  }
  const size_t g = t.gpus.size();
  os << "],\"gpu_paths\":"
     << matrix(g, g, [&](size_t i, size_t j) { return json_quote(path_word(t.gpu_paths[i][j])); })
     << ",\"nvlinks\":" << matrix(g, g, [&](size_t i, size_t j) { return std::to_string(t.gpu_paths[i][j].nvlinks); })
     << ",\"gpu_nic_paths\":"
     << matrix(g, t.nics.size(), [&](size_t i, size_t j) { return json_quote(path_word(t.gpu_nic_paths[i][j])); })
     << "}\n";
  return os.str();
}

std::string emit_placement_json(const Placement& p) {
  std::ostringstream os;
  os << "{\"mode\":" << json_quote(bind_mode_word(p.mode)) << ",\"ring\":" << ints(p.ring.gpus)
     << ",\"ring_bottleneck_links\":" << p.ring.bottleneck_links
     << ",\"ring_bottleneck_gbps\":" << num(p.ring.bottleneck_gbps) << ",\"tasks\":[";
  for (size_t i = 0; i < p.tasks.size(); ++i) {
    const auto& task = p.tasks[i];
    os << (i ? "," : "") << "{\"local_rank\":" << task.local_rank << ",\"gpus\":" << ints(task.gpus)
       << ",\"cpus\":" << ints(task.cpus) << ",\"numa\":" << task.numa
       << ",\"nic\":" << (task.nic.empty() ? "null" : json_quote(task.nic))
       << ",\"nic_path\":" << (task.nic_path.empty() ? "null" : json_quote(task.nic_path)) << "}";
  }
  os << "]}\n";
  return os.str();
}

}  // namespace loom::topo

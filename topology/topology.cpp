// topology.cpp — path words, the bandwidth model, GPU classes and CPU lists: the small
// vocabulary every reader, algorithm and emitter of libloomtopo shares.
#include "loom/topo/topology.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <set>
#include <sstream>

namespace loom::topo {

std::string path_word(const Path& p) {
  switch (p.kind) {
    case PathKind::kSelf: return "X";
    case PathKind::kNVLink: return "NV" + std::to_string(p.nvlinks);
    case PathKind::kPIX: return "PIX";
    case PathKind::kPXB: return "PXB";
    case PathKind::kPHB: return "PHB";
    case PathKind::kNODE: return "NODE";
    case PathKind::kSYS: return "SYS";
  }
  return "SYS";
}

Path parse_path_word(const std::string& w) {
  if (w == "X") return {PathKind::kSelf, 0};
  if (w == "PIX") return {PathKind::kPIX, 0};
  if (w == "PXB") return {PathKind::kPXB, 0};
  if (w == "PHB") return {PathKind::kPHB, 0};
  if (w == "NODE") return {PathKind::kNODE, 0};
  if (w == "SYS" || w == "SOC") return {PathKind::kSYS, 0};  // SOC: drivers before 410
  if (w.size() > 2 && w.size() <= 4 && w.compare(0, 2, "NV") == 0 &&
      std::all_of(w.begin() + 2, w.end(), [](unsigned char c) { return std::isdigit(c); })) {
    int n = std::stoi(w.substr(2));
    if (n >= 1 && n <= 64) return {PathKind::kNVLink, n};
  }
  throw Error("unknown path word '" + w + "' (expected X, NV<n>, PIX, PXB, PHB, NODE or SYS)");
}

double path_gbps(const Path& p, double per_link) {
  switch (p.kind) {
    case PathKind::kSelf: return 0.0;
    case PathKind::kNVLink: return p.nvlinks * per_link;
    case PathKind::kPIX: return 16.0;  // PCIe below any NVLink, so rings always prefer NVLink
    case PathKind::kPXB: return 14.0;
    case PathKind::kPHB: return 12.0;
    case PathKind::kNODE: return 10.0;
    case PathKind::kSYS: return 6.0;
  }
  return 6.0;
}

namespace {

double nvlink_per_link(const std::string& cls) {
  if (cls == "p100") return 20.0;  // NVLink 1
  return 25.0;                     // NVLink 2, 3 and 4 all carry 25 GB/s per link and direction
}

}  // namespace

int Topology::total_cpus() const { return static_cast<int>(all_cpus().size()); }

std::vector<int> Topology::all_cpus() const {
  std::set<int> s;
  for (const auto& n : numa_nodes) s.insert(n.cpus.begin(), n.cpus.end());
  return {s.begin(), s.end()};
}

int Topology::numa_of_cpu(int cpu) const {
  for (const auto& n : numa_nodes)
    if (std::binary_search(n.cpus.begin(), n.cpus.end(), cpu)) return n.id;
  return -1;
}

const Gpu* Topology::gpu_by_index(int index) const {
  int p = gpu_pos(index);
  return p < 0 ? nullptr : &gpus[p];
}

int Topology::gpu_pos(int index) const {
  for (size_t i = 0; i < gpus.size(); ++i)
    if (gpus[i].index == index) return static_cast<int>(i);
  return -1;
}

double Topology::nvlink_gbps(int a, int b) const {
  return std::min(nvlink_per_link(gpus[a].cls), nvlink_per_link(gpus[b].cls));
}

double Topology::gpu_gbps(int a, int b) const { return path_gbps(gpu_paths[a][b], nvlink_gbps(a, b)); }

bool Topology::is_nvswitch() const {
  if (gpus.size() < 2) return false;
  int links = gpu_paths[0][1].nvlinks;
  if (links < 12) return false;
  for (size_t i = 0; i < gpus.size(); ++i)
    for (size_t j = 0; j < gpus.size(); ++j)
      if (i != j && !(gpu_paths[i][j].kind == PathKind::kNVLink && gpu_paths[i][j].nvlinks == links))
        return false;
  return true;
}

void Topology::validate() const {
  const size_t g = gpus.size();
  if (gpu_paths.size() != g) throw Error("GPU path matrix has " + std::to_string(gpu_paths.size()) +
                                         " rows for " + std::to_string(g) + " GPUs");
  for (size_t i = 0; i < g; ++i) {
    if (gpu_paths[i].size() != g)
      throw Error("GPU path matrix row " + std::to_string(i) + " has " +
                  std::to_string(gpu_paths[i].size()) + " entries for " + std::to_string(g) + " GPUs");
    for (size_t j = 0; j < g; ++j) {
      const Path& p = gpu_paths[i][j];
      if ((i == j) != (p.kind == PathKind::kSelf))
        throw Error("GPU" + std::to_string(gpus[i].index) + " to GPU" + std::to_string(gpus[j].index) +
                    " is '" + path_word(p) + "': X belongs on the diagonal and only there");
      if (!(p == gpu_paths[j][i]))
        throw Error("GPU path matrix is not symmetric: GPU" + std::to_string(gpus[i].index) + "->GPU" +
                    std::to_string(gpus[j].index) + " is " + path_word(p) + " but the reverse is " +
                    path_word(gpu_paths[j][i]));
    }
  }
  if (gpu_nic_paths.size() != g) throw Error("GPU-NIC path matrix does not have one row per GPU");
  for (size_t i = 0; i < g; ++i) {
    if (gpu_nic_paths[i].size() != nics.size())
      throw Error("GPU-NIC path matrix row " + std::to_string(i) + " does not have one entry per NIC");
    for (const Path& p : gpu_nic_paths[i])
      if (p.kind == PathKind::kSelf || p.kind == PathKind::kNVLink)
        throw Error("GPU" + std::to_string(gpus[i].index) + " to a NIC cannot be '" + path_word(p) + "'");
  }
  std::set<int> seen;
  for (const auto& gpu : gpus)
    if (!seen.insert(gpu.index).second) throw Error("GPU index " + std::to_string(gpu.index) + " appears twice");
  std::set<int> cpus;
  for (const auto& n : numa_nodes)
    for (int c : n.cpus)
      if (!cpus.insert(c).second) throw Error("CPU " + std::to_string(c) + " belongs to two NUMA nodes");
}

std::string gpu_class_from_name(const std::string& name) {
  std::vector<std::string> words;
  std::string cur;
  for (char ch : name) {
    if (std::isalnum(static_cast<unsigned char>(ch))) {
      cur += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    } else if (!cur.empty()) {
      words.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) words.push_back(cur);
  auto has_digit = [](const std::string& w) { return std::any_of(w.begin(), w.end(), ::isdigit); };
  auto has_alpha = [](const std::string& w) { return std::any_of(w.begin(), w.end(), ::isalpha); };
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w == "nvidia" || w == "tesla" || w == "geforce" || w == "quadro") continue;
    if (has_digit(w) && has_alpha(w) && std::isalpha(static_cast<unsigned char>(w[0]))) {
      // "a100", "v100", "h100", "l40s"; drop memory suffixes such as "80gb" that follow.
      return w;
    }
    if (!has_digit(w) && i + 1 < words.size() && !has_alpha(words[i + 1])) return w + words[i + 1];  // "rtx 3090"
  }
  return "gpu";
}

namespace {
struct DeviceEntry {
  const char* cls;
  double tflops;  // dense fp16/bf16 tensor TFLOP/s (fp16 where the device has no bf16)
  bool bf16;
};
const DeviceEntry kDevices[] = {
    {"cpu", 1, true},     {"p100", 21, false},  {"v100", 125, false}, {"t4", 65, false},    {"a10", 125, true},
    {"a30", 165, true},   {"a40", 150, true},   {"a100", 312, true},  {"l4", 121, true},    {"l40", 181, true},
    {"l40s", 362, true},  {"h100", 989, true},  {"h200", 989, true},  {"gh200", 989, true}, {"b200", 2250, true}};
}  // namespace

double device_weight(const std::string& cls) {
  for (const auto& e : kDevices)
    if (cls == e.cls) return e.tflops;
  return 100;
}

bool device_has_bf16(const std::string& cls) {
  for (const auto& e : kDevices)
    if (cls == e.cls) return e.bf16;
  return true;  // unknown classes are newer than this table
}

std::string format_cpu_list(const std::vector<int>& in) {
  std::vector<int> cpus(in);
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::ostringstream os;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (i) os << ',';
    os << cpus[i];
    if (j > i) os << '-' << cpus[j];
    i = j + 1;
  }
  return os.str();
}

namespace {

int parse_cpu_number(const std::string& text, const std::string& whole) {
  if (text.empty() || text.size() > 7 ||
      !std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); }))
    throw Error("bad CPU list '" + whole + "'");
  return std::stoi(text);
}

}  // namespace

std::vector<int> parse_cpu_list(const std::string& text) {
  std::set<int> out;
  std::stringstream ss(text);
  std::string item;
  if (text.empty()) throw Error("empty CPU list");
  // Bounded work whatever the text: a few KB of ranges must not expand to millions of entries
  // (the plugin parses lists inside root's slurmstepd).
  int64_t expanded = 0;
  auto too_long = [&] {
    return Error("CPU list '" + text.substr(0, 60) + (text.size() > 60 ? "...'" : "'") + " names more than " +
                 std::to_string(kMaxListEntries) + " entries");
  };
  while (std::getline(ss, item, ',')) {
    auto dash = item.find('-');
    if (dash == std::string::npos) {
      if (++expanded > kMaxListEntries) throw too_long();
      out.insert(parse_cpu_number(item, text));
    } else {
      int a = parse_cpu_number(item.substr(0, dash), text);
      int b = parse_cpu_number(item.substr(dash + 1), text);
      if (b < a) throw Error("bad CPU range '" + item + "' in '" + text + "'");
      expanded += static_cast<int64_t>(b) - a + 1;
      if (expanded > kMaxListEntries) throw too_long();
      for (int c = a; c <= b; ++c) out.insert(c);
    }
  }
  if (!text.empty() && text.back() == ',') throw Error("bad CPU list '" + text + "'");
  return {out.begin(), out.end()};
}

}  // namespace loom::topo

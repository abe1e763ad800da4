// nvsmi_reader.cpp — parses `nvidia-smi topo -m` (old and new layouts: NIC legend or mlx5
// column names) and, when present, the `nvidia-smi -L` lines that name the GPUs.
#include <algorithm>
#include <cctype>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "loom/topo/readers.hpp"

namespace loom::topo {

namespace {

std::vector<std::string> split_ws(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream ss(line);
  std::string w;
  while (ss >> w) out.push_back(w);
  return out;
}

bool is_gpu_label(const std::string& w) {
  return w.size() > 3 && w.compare(0, 3, "GPU") == 0 &&
         std::all_of(w.begin() + 3, w.end(), [](unsigned char c) { return std::isdigit(c); });
}

std::string at_line(const std::string& label, size_t line) { return label + ":" + std::to_string(line) + ": "; }

// The matrix of `nvidia-smi topo -m`: its columns (GPUs first, then NICs), every path, and each
// GPU's CPU and NUMA affinity words.
struct Matrix {
  std::vector<std::string> cols;
  size_t ngpu = 0;
  bool numa_col = false;
  std::vector<std::vector<Path>> m;
  std::vector<std::string> affinity, numa_word;
  size_t end = 0;  // the first line after the matrix
};

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream ss(text);
  std::string l;
  while (std::getline(ss, l)) {
    if (!l.empty() && l.back() == '\r') l.pop_back();
    lines.push_back(l);
  }
  return lines;
}

// The header: the first line whose first word is GPU0.
size_t read_header(const std::vector<std::string>& lines, const std::string& label, Matrix* x) {
  size_t hdr = lines.size();
  for (size_t i = 0; i < lines.size(); ++i) {
    auto w = split_ws(lines[i]);
    if (!w.empty() && w[0] == "GPU0") {
      hdr = i;
      break;
    }
  }
  if (hdr == lines.size())
    throw Error(label + ": no 'nvidia-smi topo -m' matrix found (expected a header line starting with GPU0)");
  auto w = split_ws(lines[hdr]);
  size_t i = 0;
  for (; i < w.size() && w[i] != "CPU"; ++i) x->cols.push_back(w[i]);
  if (i == w.size()) throw Error(at_line(label, hdr + 1) + "header has no 'CPU Affinity' column");
  for (size_t k = i; k + 1 < w.size(); ++k)
    if (w[k] == "NUMA" && w[k + 1] == "Affinity") x->numa_col = true;
  while (x->ngpu < x->cols.size() && is_gpu_label(x->cols[x->ngpu])) {
    if (x->cols[x->ngpu] != "GPU" + std::to_string(x->ngpu))
      throw Error(at_line(label, hdr + 1) + "GPU columns must be GPU0, GPU1, ... in order; found " + x->cols[x->ngpu]);
    ++x->ngpu;
  }
  for (size_t k = x->ngpu; k < x->cols.size(); ++k)
    if (is_gpu_label(x->cols[k])) throw Error(at_line(label, hdr + 1) + "GPU column " + x->cols[k] + " after the NIC columns");
  if (x->ngpu > 1024 || x->cols.size() - x->ngpu > 1024) throw Error(label + ": too many columns");
  return hdr;
}

Matrix read_matrix(const std::vector<std::string>& lines, const std::string& label) {
  Matrix x;
  const size_t hdr = read_header(lines, label, &x);
  const size_t ncol = x.cols.size(), ngpu = x.ngpu;
  std::map<std::string, size_t> col_of;
  for (size_t k = 0; k < ncol; ++k)
    if (!col_of.emplace(x.cols[k], k).second) throw Error(at_line(label, hdr + 1) + "column " + x.cols[k] + " appears twice");
  x.m.assign(ncol, {});
  std::vector<bool> seen(ncol, false);
  x.affinity.assign(ngpu, "");
  x.numa_word.assign(ngpu, "");
  size_t i = hdr + 1;
  for (; i < lines.size(); ++i) {
    auto w = split_ws(lines[i]);
    if (w.empty() || w[0] == "Legend:") break;
    auto c = col_of.find(w[0]);
    if (c == col_of.end()) throw Error(at_line(label, i + 1) + "row '" + w[0] + "' names no column of the header");
    const size_t r = c->second;
    if (seen[r]) throw Error(at_line(label, i + 1) + "row " + w[0] + " appears twice");
    seen[r] = true;
    const std::string entries = "row " + w[0] + " has " + std::to_string(w.size() - 1) + " entries for " +
                                std::to_string(ncol) + " columns";
    if (w.size() < 1 + ncol) throw Error(at_line(label, i + 1) + entries);
    for (size_t k = 0; k < ncol; ++k) {
      try {
        x.m[r].push_back(parse_path_word(w[1 + k]));
      } catch (const Error& e) {
        throw Error(at_line(label, i + 1) + e.what());
      }
    }
    if (r < ngpu) {
      if (w.size() < 2 + ncol) throw Error(at_line(label, i + 1) + "row " + w[0] + " has no CPU affinity");
      x.affinity[r] = w[1 + ncol];
      if (x.numa_col && w.size() > 2 + ncol) x.numa_word[r] = w[2 + ncol];
    } else if (w.size() > 1 + ncol) {
      throw Error(at_line(label, i + 1) + entries);
    }
  }
  for (size_t k = 0; k < ncol; ++k)
    if (!seen[k]) throw Error(label + ": the matrix has no row for " + x.cols[k]);
  x.end = i;
  return x;
}

void check_matrix(const Matrix& x, const std::string& label) {
  const auto& m = x.m;
  const auto& cols = x.cols;
  const size_t ncol = cols.size(), ngpu = x.ngpu;
  for (size_t a = 0; a < ncol; ++a)
    for (size_t b = 0; b < ncol; ++b) {
      if ((a == b) != (m[a][b].kind == PathKind::kSelf))
        throw Error(label + ": " + cols[a] + " to " + cols[b] + " is '" + path_word(m[a][b]) +
                    "': X belongs on the diagonal and only there");
      if (!(m[a][b] == m[b][a]))
        throw Error(label + ": inconsistent matrix: " + cols[a] + "->" + cols[b] + " is " + path_word(m[a][b]) +
                    " but " + cols[b] + "->" + cols[a] + " is " + path_word(m[b][a]));
      if (a >= ngpu && b >= ngpu && a != b && m[a][b].kind == PathKind::kNVLink)
        throw Error(label + ": NICs " + cols[a] + " and " + cols[b] + " cannot be joined by NVLink");
      if ((a < ngpu) != (b < ngpu) && m[a][b].kind == PathKind::kNVLink)
        throw Error(label + ": " + cols[a] + " to " + cols[b] + " is NVLink, but one of them is a NIC");
    }
}

// The legends after the matrix: NIC names ("  NIC0: mlx5_0"; old drivers use the column label
// itself) and GPU names (`nvidia-smi -L` lines).
void read_legends(const std::vector<std::string>& lines, size_t from, std::map<std::string, std::string>* nic_name,
                  std::map<int, std::string>* gpu_name) {
  static const std::regex nic_re(R"(^\s*(NIC\d+):\s*(\S+)\s*$)");
  static const std::regex gpu_re(R"(^\s*GPU\s+(\d+):\s*([^(]*?)\s*(\(.*)?$)");
  for (size_t k = from; k < lines.size(); ++k) {
    std::smatch mt;
    if (lines[k].size() > 512) continue;
    if (std::regex_match(lines[k], mt, nic_re)) {
      (*nic_name)[mt[1]] = mt[2];
    } else if (std::regex_match(lines[k], mt, gpu_re)) {
      std::string idx = mt[1];
      if (idx.size() < 5 && mt[2] != "unknown") (*gpu_name)[std::stoi(idx)] = mt[2];
    }
  }
}

Gpu read_gpu(const Matrix& x, size_t g, const std::map<int, std::string>& gpu_name, const std::string& label) {
  Gpu gpu;
  gpu.index = static_cast<int>(g);
  auto nm = gpu_name.find(static_cast<int>(g));
  if (nm != gpu_name.end()) gpu.name = nm->second;
  gpu.cls = gpu_class_from_name(gpu.name);
  if (x.affinity[g] != "N/A") {
    try {
      gpu.cpus = parse_cpu_list(x.affinity[g]);
    } catch (const Error& e) {
      throw Error(label + ": GPU" + std::to_string(g) + ": " + e.what());
    }
  }
  const std::string& nw = x.numa_word[g];
  if (!nw.empty() && nw != "N/A") {
    if (nw.size() > 4 || !std::all_of(nw.begin(), nw.end(), ::isdigit))
      throw Error(label + ": GPU" + std::to_string(g) + ": bad NUMA affinity '" + nw + "'");
    gpu.numa = std::stoi(nw);
  }
  return gpu;
}

// NUMA nodes from the GPUs' affinities; without a NUMA column, each distinct CPU affinity is
// taken as one NUMA node.
void derive_numa_nodes(bool numa_col, Topology* t) {
  if (!numa_col) {
    std::vector<std::vector<int>> distinct;
    for (auto& gpu : t->gpus) {
      if (gpu.cpus.empty()) continue;
      auto it = std::find(distinct.begin(), distinct.end(), gpu.cpus);
      if (it == distinct.end()) {
        distinct.push_back(gpu.cpus);
        it = distinct.end() - 1;
      }
      gpu.numa = static_cast<int>(it - distinct.begin());
    }
  }
  std::map<int, std::set<int>> numa_cpus;
  for (const auto& gpu : t->gpus)
    if (gpu.numa >= 0) numa_cpus[gpu.numa].insert(gpu.cpus.begin(), gpu.cpus.end());
  for (const auto& [id, cpus] : numa_cpus) {
    NumaNode n;
    n.id = id;
    n.cpus.assign(cpus.begin(), cpus.end());
    t->numa_nodes.push_back(n);
  }
}

// nvidia-smi prints CPU ids, not cores. Hardware threads show in an affinity as k ranges of
// equal length a fixed stride apart ("0-19,40-59": siblings 40 apart, as Linux numbers them on
// x86): then there are k threads per core and a CPU's core is its id modulo the stride, which is
// Slurm's abstract core id (gres.conf Cores=). Returns the stride, or 0 when no affinity shows
// threads (then every CPU is a core of its own).
int smt_stride(const Topology& t, int* threads) {
  int stride = 0, k = 1;
  for (const auto& gpu : t.gpus) {
    if (gpu.cpus.empty()) continue;
    std::vector<std::pair<int, int>> ranges;  // [first, last]
    for (int c : gpu.cpus) {
      if (!ranges.empty() && c == ranges.back().second + 1) ranges.back().second = c;
      else ranges.push_back({c, c});
    }
    if (ranges.size() < 2) continue;
    const int len = ranges[0].second - ranges[0].first, s = ranges[1].first - ranges[0].first;
    for (size_t i = 1; i < ranges.size(); ++i)
      if (ranges[i].second - ranges[i].first != len || ranges[i].first - ranges[i - 1].first != s) return 0;
    if (s <= len || (stride != 0 && (s != stride || static_cast<int>(ranges.size()) != k))) return 0;
    stride = s;
    k = static_cast<int>(ranges.size());
  }
  for (const auto& n : t.numa_nodes)
    for (int c : n.cpus)
      if (stride > 0 && c / stride >= k) return 0;  // a CPU beyond the last sibling: not this pattern
  *threads = stride > 0 ? k : 1;
  return stride;
}

void derive_cores(Topology* t) {
  int threads = 1;
  const int stride = smt_stride(*t, &threads);
  t->threads_per_core = threads;
  for (auto& n : t->numa_nodes) {
    std::map<int, std::vector<int>> by_core;
    for (int cpu : n.cpus) by_core[stride > 0 ? cpu % stride : cpu].push_back(cpu);
    for (auto& [id, pus] : by_core) n.cores.push_back({id, pus});
  }
}

}  // namespace

Topology parse_nvidia_smi(const std::string& text, const std::string& label) {
  const std::vector<std::string> lines = split_lines(text);
  const Matrix x = read_matrix(lines, label);
  check_matrix(x, label);
  std::map<std::string, std::string> nic_name;
  std::map<int, std::string> gpu_name;
  read_legends(lines, x.end, &nic_name, &gpu_name);

  Topology t;
  t.source = "nvidia-smi:" + label;
  for (size_t g = 0; g < x.ngpu; ++g) t.gpus.push_back(read_gpu(x, g, gpu_name, label));
  derive_numa_nodes(x.numa_col, &t);
  derive_cores(&t);
  t.sockets = std::max<int>(1, static_cast<int>(t.numa_nodes.size()));
  for (size_t k = x.ngpu; k < x.cols.size(); ++k) {
    Nic nic;
    auto nm = nic_name.find(x.cols[k]);
    nic.name = nm != nic_name.end() ? nm->second : x.cols[k];
    // A NIC shares the NUMA node of any GPU it reaches without crossing the SMP link.
    for (size_t g = 0; g < x.ngpu && nic.numa < 0; ++g)
      if (x.m[g][k].kind != PathKind::kSYS) nic.numa = t.gpus[g].numa;
    t.nics.push_back(nic);
  }
  t.gpu_paths.assign(x.ngpu, {});
  t.gpu_nic_paths.assign(x.ngpu, {});
  for (size_t g = 0; g < x.ngpu; ++g) {
    t.gpu_paths[g].assign(x.m[g].begin(), x.m[g].begin() + static_cast<std::ptrdiff_t>(x.ngpu));
    t.gpu_nic_paths[g].assign(x.m[g].begin() + static_cast<std::ptrdiff_t>(x.ngpu), x.m[g].end());
  }
  t.validate();
  return t;
}

Topology read_nvidia_smi_file(const std::string& path) { return parse_nvidia_smi(read_small_file(path), path); }

}  // namespace loom::topo

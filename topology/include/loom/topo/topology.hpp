// topology.hpp — the node model shared by loom-topo, the SPANK plugin and the runtime:
// NUMA nodes, cores, GPUs, NICs, and the GPU<->GPU / GPU<->NIC path classes of `nvidia-smi topo -m`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/error.hpp"

namespace loom::topo {

// Every recoverable failure of the library (bad input, missing file, impossible request): a
// loom::Error of kind kInput. The message is one line, without the program prefix.
class Error : public loom::Error {
 public:
  explicit Error(const std::string& msg) : loom::Error(msg, Kind::kInput) {}
};

// Path classes, best first, in the words `nvidia-smi topo -m` prints.
enum class PathKind { kSelf, kNVLink, kPIX, kPXB, kPHB, kNODE, kSYS };

struct Path {
  PathKind kind = PathKind::kSYS;
  int nvlinks = 0;  // number of NVLinks when kind == kNVLink
  bool operator==(const Path& o) const { return kind == o.kind && nvlinks == o.nvlinks; }
};

std::string path_word(const Path& p);          // "X", "NV12", "PIX", ...
Path parse_path_word(const std::string& word);  // throws Error on unknown words

// Modelled one-direction bandwidth of a path, GB/s (see doc/topology.md for the table).
double path_gbps(const Path& p, double nvlink_gbps_per_link);

struct Core {
  int logical = 0;          // Slurm's abstract core id (hwloc logical index)
  std::vector<int> pus;     // OS CPU ids of its hardware threads
};

struct NumaNode {
  int id = 0;
  std::vector<int> cpus;    // OS CPU ids, sorted
  std::vector<Core> cores;  // cores whose PUs are on this node
  std::uint64_t memory_mb = 0;
  int socket = 0;
};

struct Gpu {
  int index = 0;            // PCI bus order, as Slurm numbers /dev/nvidiaN
  std::string name;         // "NVIDIA A100-SXM4-40GB", may be empty
  std::string cls;          // "a100", "v100", ... "gpu" when unknown
  std::string pci;          // "0000:07:00.0", may be empty
  int numa = -1;
  std::vector<int> cpus;    // CPU affinity (OS ids)
  std::uint64_t memory_mb = 0;
};

struct Nic {
  std::string name;         // "mlx5_0"
  std::string pci;
  int numa = -1;
};

struct Topology {
  std::string host;
  std::string source;       // "hwloc-xml:FILE", "nvidia-smi:FILE", "live"
  std::string hwloc_xml;    // the hwloc XML it came from (with GPU facts attached); empty otherwise
  int sockets = 0;
  int threads_per_core = 1;
  std::uint64_t memory_mb = 0;
  std::vector<NumaNode> numa_nodes;
  std::vector<Gpu> gpus;
  std::vector<Nic> nics;
  std::vector<std::vector<Path>> gpu_paths;      // [gpus][gpus]
  std::vector<std::vector<Path>> gpu_nic_paths;  // [gpus][nics]

  int total_cpus() const;
  std::vector<int> all_cpus() const;  // sorted OS ids
  int numa_of_cpu(int cpu) const;     // -1 when unknown
  const Gpu* gpu_by_index(int index) const;
  int gpu_pos(int index) const;       // position in gpus, -1 when absent
  // Per-link NVLink bandwidth between two GPU positions, from their classes.
  double nvlink_gbps(int a, int b) const;
  double gpu_gbps(int a, int b) const;  // modelled bandwidth between GPU positions a and b
  bool is_nvswitch() const;             // every GPU pair joined by the same (>= 12) NVLink count
  // Checks sizes and symmetry; throws Error naming what is inconsistent.
  void validate() const;
};

// "NVIDIA A100-SXM4-40GB" -> "a100", "Tesla V100-SXM2-32GB" -> "v100"; "gpu" when unknown.
std::string gpu_class_from_name(const std::string& name);

// Relative speed hint of a device class: dense fp16 tensor TFLOP/s (v100 125, a100 312,
// h100 989; "cpu" 1). Unknown GPU classes get 100 so that they still count as GPUs.
double device_weight(const std::string& cls);
// Whether a GPU class computes in bf16 (Volta, Pascal and Turing do not).
bool device_has_bf16(const std::string& cls);

// CPU lists in Linux/Slurm form: "0-3,8,10-11".
std::string format_cpu_list(const std::vector<int>& cpus);
// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; throws Error for bad text or more than kMaxListEntries
// entries (ranges counted as they expand, repeats included).
constexpr int64_t kMaxListEntries = 65536;
std::vector<int> parse_cpu_list(const std::string& text);

}  // namespace loom::topo

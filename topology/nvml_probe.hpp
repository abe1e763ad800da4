// nvml_probe.hpp — GPU facts from the NVIDIA driver's NVML, loaded with dlopen so that
// libloomtopo builds and runs where no driver is installed (Debian's hwloc has no NVML plugin).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::topo::detail {

struct NvmlGpu {
  std::string name;
  std::string pci;                       // "0000:07:00.0"
  std::uint64_t memory_mb = 0;
  std::vector<std::string> nvlink_peers;  // remote PCI id of every active link
};

// Fills `out` and returns true when NVML answered; otherwise returns false and says why.
bool probe_nvml(std::vector<NvmlGpu>* out, std::string* why);

// "00000000:07:00.0" or "0000:07:00.0" -> "0000:07:00.0" (lower case).
std::string normalize_pci(const std::string& id);

}  // namespace loom::topo::detail

// nvml_probe.cpp — dlopen("libnvidia-ml.so.1") and read names, PCI ids, memory and NVLink
// remote ends. Only the few NVML entry points and structs we need are declared here.
#include "nvml_probe.hpp"

#include <dlfcn.h>

#include <cctype>
#include <cstdio>

namespace loom::topo::detail {

namespace {

using nvmlDevice_t = void*;
struct NvmlPciInfo {  // nvmlPciInfo_t (v3): layout fixed by NVML's ABI
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
struct NvmlMemory {  // nvmlMemory_t
  unsigned long long total, free, used;
};

constexpr int kNvmlSuccess = 0;
constexpr unsigned kMaxLinks = 18;  // NVML_NVLINK_MAX_LINKS

struct Nvml {
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*count)(unsigned*) = nullptr;
  int (*handle)(unsigned, nvmlDevice_t*) = nullptr;
  int (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  int (*pci)(nvmlDevice_t, NvmlPciInfo*) = nullptr;
  int (*memory)(nvmlDevice_t, NvmlMemory*) = nullptr;
  int (*link_state)(nvmlDevice_t, unsigned, int*) = nullptr;
  int (*link_remote)(nvmlDevice_t, unsigned, NvmlPciInfo*) = nullptr;
  ~Nvml() {
    if (shutdown) shutdown();
    if (lib) dlclose(lib);
  }
};

template <typename F>
bool sym(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  return *fn != nullptr;
}

}  // namespace

std::string normalize_pci(const std::string& id) {
  std::string s;
  for (char c : id) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // NVML prints an 8-digit domain; hwloc and nvidia-smi print 4.
  auto colon = s.find(':');
  if (colon == 8 && s.compare(0, 4, "0000") == 0) s = s.substr(4);
  return s;
}

bool probe_nvml(std::vector<NvmlGpu>* out, std::string* why) {
  Nvml n;
  n.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!n.lib) {
    *why = "no NVIDIA driver (libnvidia-ml.so.1 not found): GPUs not discovered";
    return false;
  }
  if (!sym(n.lib, "nvmlInit_v2", &n.init) || !sym(n.lib, "nvmlShutdown", &n.shutdown) ||
      !sym(n.lib, "nvmlDeviceGetCount_v2", &n.count) ||
      !sym(n.lib, "nvmlDeviceGetHandleByIndex_v2", &n.handle) ||
      !sym(n.lib, "nvmlDeviceGetName", &n.name) || !sym(n.lib, "nvmlDeviceGetPciInfo_v3", &n.pci) ||
      !sym(n.lib, "nvmlDeviceGetMemoryInfo", &n.memory)) {
    n.shutdown = nullptr;
    *why = "NVML library lacks required entry points: GPUs not discovered";
    return false;
  }
  sym(n.lib, "nvmlDeviceGetNvLinkState", &n.link_state);
  sym(n.lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &n.link_remote);
  if (n.init() != kNvmlSuccess) {
    n.shutdown = nullptr;
    *why = "no NVIDIA driver (nvmlInit failed): GPUs not discovered";
    return false;
  }
  unsigned count = 0;
  if (n.count(&count) != kNvmlSuccess) {
    *why = "NVML could not count GPUs";
    return false;
  }
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t dev = nullptr;
    if (n.handle(i, &dev) != kNvmlSuccess) continue;
    NvmlGpu g;
    char name[96] = {0};
    if (n.name(dev, name, sizeof name - 1) == kNvmlSuccess) g.name = name;
    NvmlPciInfo pci{};
    if (n.pci(dev, &pci) == kNvmlSuccess) g.pci = normalize_pci(pci.bus_id);
    NvmlMemory mem{};
    if (n.memory(dev, &mem) == kNvmlSuccess) g.memory_mb = mem.total >> 20;
    if (n.link_state && n.link_remote) {
      for (unsigned l = 0; l < kMaxLinks; ++l) {
        int active = 0;
        if (n.link_state(dev, l, &active) != kNvmlSuccess || !active) continue;
        NvmlPciInfo remote{};
        if (n.link_remote(dev, l, &remote) == kNvmlSuccess) g.nvlink_peers.push_back(normalize_pci(remote.bus_id));
      }
    }
    out->push_back(g);
  }
  return true;
}

}  // namespace loom::topo::detail

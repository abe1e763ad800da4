// fuzz_nvsmi.cpp — libFuzzer target for the `nvidia-smi topo -m` reader.
#include "topology_fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz_topology_reader(data, size, 1u << 16, [](const std::string& s) { return loom::topo::parse_nvidia_smi(s, "fuzz"); });
}

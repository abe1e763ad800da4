// fuzz_topo_json.cpp — libFuzzer target for the JSON topology reader, which the plugin runs as root.
#include "topology_fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz_topology_reader(data, size, 1u << 16, [](const std::string& s) { return loom::topo::parse_topology_json(s, "fuzz"); });
}

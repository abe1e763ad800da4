// fuzz_hwloc_xml.cpp — libFuzzer target for the hwloc XML reader (hwloc's own parser plus our
// walk over the objects, PCI paths and NVLink distances it yields).
#include "topology_fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz_topology_reader(data, size, 1u << 18, [](const std::string& s) { return loom::topo::read_hwloc_xml_buffer(s, "fuzz"); });
}

// fixtures.hpp — helpers for the topology unit tests: fixture paths and small in-memory
// topologies written as nvidia-smi text.
#pragma once

#include <string>

#include "loom/topo/readers.hpp"

namespace loom::topo::test {

inline std::string fixture(const std::string& name) { return std::string(LOOM_TOPO_FIXTURES) + "/" + name; }

inline Topology xml_fixture(const std::string& machine) { return read_hwloc_xml_file(fixture(machine + ".xml")); }

inline Topology nvsmi_fixture(const std::string& machine) {
  return read_nvidia_smi_file(fixture(machine + ".nvsmi.txt"));
}

}  // namespace loom::topo::test

// readers.hpp — the ways a Topology comes to be: live discovery (hwloc + NVML by dlopen),
// hwloc XML (a cached export or a fixture) and `nvidia-smi topo -m` text (+ optional `-L`).
#pragma once

#include <string>

#include "loom/topo/topology.hpp"

namespace loom::topo {

// hwloc XML from a file or a buffer. Throws Error for unreadable or malformed XML.
Topology read_hwloc_xml_file(const std::string& path);
Topology read_hwloc_xml_buffer(const std::string& xml, const std::string& label);

// `nvidia-smi topo -m` text, optionally followed by `nvidia-smi -L` lines.
Topology read_nvidia_smi_file(const std::string& path);
Topology parse_nvidia_smi(const std::string& text, const std::string& label);

// The JSON of `loom-topo export --as json`. Throws Error naming what is wrong.
Topology parse_topology_json(const std::string& text, const std::string& label);

// Live discovery of this node. `notes` receives warnings such as "no NVIDIA driver".
Topology discover(std::string* notes);

// A file in any of the three forms, told apart by its first non-blank character ('<' hwloc XML,
// '{' JSON, else nvidia-smi text).
Topology read_topology_file(const std::string& path);

// hwloc XML describing `t`, with GPU names, memory and NVLinks attached so that
// read_hwloc_xml_* gives the same Topology back. Only for topologies that came from hwloc.
std::string export_hwloc_xml(const Topology& t);

// Reads a whole regular file of at most `limit` bytes; throws Error naming the path.
std::string read_small_file(const std::string& path, size_t limit = 64u << 20);

}  // namespace loom::topo

// emit_svg.hpp — `loom-topo draw`: a node's topology as an SVG picture (sockets, NUMA nodes with
// their cores and memory, GPUs with their NVLinks, NICs and their PCIe paths to the GPUs), with a
// placement drawn over it when one is given (each task's cores, GPU and NIC in its colour, the
// ring's order).
#pragma once

#include <string>

#include "loom/topo/placement.hpp"
#include "loom/topo/topology.hpp"

namespace loom::topo {

std::string emit_svg(const Topology& t, const Placement* placement);

}  // namespace loom::topo

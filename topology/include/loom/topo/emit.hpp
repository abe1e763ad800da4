// emit.hpp — text that leaves libloomtopo: the `show` matrix, JSON export, gres.conf lines,
// the slurm.conf NodeName line, an NCCL topology XML, and placements as text or JSON.
#pragma once

#include <string>

#include "loom/topo/placement.hpp"
#include "loom/topo/topology.hpp"

namespace loom::topo {

// A matrix in the layout of `nvidia-smi topo -m` followed by `-L`-style GPU lines, so that
// parse_nvidia_smi() reads it back.
std::string emit_show(const Topology& t);
std::string emit_json(const Topology& t);  // the JSON of Contract 1 (`export --as json`)

// gres.conf lines; File= is <dev_dir>/nvidiaN. Throws Error when there is no GPU.
std::string emit_gres(const Topology& t, const std::string& dev_dir);
std::string emit_gres_json(const Topology& t, const std::string& dev_dir);
// slurm.conf NodeName line for host `host`.
std::string emit_node_conf(const Topology& t, const std::string& host);
std::string emit_node_conf_json(const Topology& t, const std::string& host);
// NCCL_TOPO_FILE XML. Throws Error when GPU PCI ids are unknown (nvidia-smi input).
std::string emit_nccl_xml(const Topology& t);

std::string emit_placement_text(const Topology& t, const Placement& p);
std::string emit_placement_json(const Placement& p);

}  // namespace loom::topo

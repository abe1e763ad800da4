// topology_fuzz.hpp — what every topology reader's libFuzzer target does with what it parsed:
// shows and exports it and, for up to 12 GPUs, places a task on each GPU and writes gres.conf
// and the NCCL topology XML, so the algorithms see odd but valid topologies too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "loom/topo/emit.hpp"
#include "loom/topo/placement.hpp"
#include "loom/topo/readers.hpp"

template <typename Read>
int fuzz_topology_reader(const uint8_t* data, size_t size, size_t limit, Read read) {
  using namespace loom::topo;
  if (size > limit) return 0;
  try {
    const Topology t = read(std::string(reinterpret_cast<const char*>(data), size));
    emit_show(t);
    emit_json(t);
    if (t.gpus.size() > 12) return 0;
    PlaceRequest r;
    r.ntasks = static_cast<int>(t.gpus.size());
    r.oversubscribe = true;
    try {
      place(t, r);
    } catch (const Error&) {
    }
    try {
      emit_gres(t, "/dev");
    } catch (const Error&) {
    }
    emit_nccl_xml(t);
  } catch (const Error&) {
  }
  return 0;
}

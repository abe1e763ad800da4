// fuzz_topo_json.cpp — libFuzzer target for the JSON topology reader, which the plugin runs as root.
// Whatever parses is also placed and emitted, so the algorithms see odd but valid topologies too.
#include <cstddef>
#include <cstdint>
#include <string>

#include "loom/topo/emit.hpp"
#include "loom/topo/placement.hpp"
#include "loom/topo/readers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace loom::topo;
  if (size > (1u << 16)) return 0;
  try {
    Topology t = parse_topology_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    emit_show(t);
    emit_json(t);
    if (t.gpus.size() <= 12) {
      PlaceRequest r;
      r.ntasks = static_cast<int>(t.gpus.size());
      r.oversubscribe = true;
      place(t, r);
      emit_gres(t, "/dev");
    }
  } catch (const Error&) {
  }
  return 0;
}

// fuzz_hwloc_xml.cpp — libFuzzer target for the hwloc XML reader (hwloc's own parser plus our
// walk over the objects, PCI paths and NVLink distances it yields).
#include <cstddef>
#include <cstdint>
#include <string>

#include "loom/topo/emit.hpp"
#include "loom/topo/placement.hpp"
#include "loom/topo/readers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace loom::topo;
  if (size > (1u << 18)) return 0;
  try {
    Topology t = read_hwloc_xml_buffer(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    emit_show(t);
    emit_json(t);
    if (!t.gpus.empty() && t.gpus.size() <= 12 && t.total_cpus() > 0) {
      PlaceRequest r;
      r.ntasks = static_cast<int>(t.gpus.size());
      r.oversubscribe = true;
      place(t, r);
      emit_nccl_xml(t);
    }
  } catch (const Error&) {
  }
  return 0;
}

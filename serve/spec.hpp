// spec.hpp — an InferenceService spec (examples/inferenceservice.yaml), read and validated.
#pragma once

#include <string>

#include "status.hpp"

namespace loom::serve {

// An InferenceService spec (examples/inferenceservice.yaml), validated. Throws ServeError
// kBadRequest naming the field at fault, unknown fields included.
struct InferenceServiceSpec {
  std::string name, path, format;
  int requests_gpu = 0, limits_gpu = 0;
  std::string requests_memory, limits_memory;
  int min_replicas = 1, max_replicas = 1, queue_length = 0;
};
InferenceServiceSpec load_spec(const std::string& file);

}  // namespace loom::serve

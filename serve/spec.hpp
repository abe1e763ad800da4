// spec.hpp — an InferenceService spec (examples/inferenceservice.yaml), read and validated.
#pragma once

#include <set>
#include <string>

#include <yaml-cpp/yaml.h>

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

// "InferenceService" or "InferencePipeline": what a --spec file is (apiVersion, kind and
// metadata.name checked).
std::string spec_kind(const std::string& file);

// What every spec reader shares (the pipeline's too): errors that name the file, unknown fields
// refused by name, strings required; spec_root reads the file and checks apiVersion, `kind`
// (when given) and metadata.name.
[[noreturn]] void spec_error(const std::string& file, const std::string& msg);
void spec_only(const std::string& file, const YAML::Node& n, const std::string& at, const std::set<std::string>& known);
std::string spec_str(const std::string& file, const YAML::Node& n, const std::string& at);
YAML::Node spec_root(const std::string& file, const std::string& kind);
// read(), with yaml-cpp's own errors (a list or a map where a string belongs) as spec_error
// naming the file, the line and the column.
template <class Read>
auto spec_guard(const std::string& file, Read read) -> decltype(read()) {
  try {
    return read();
  } catch (const YAML::Exception& e) {
    spec_error(file, "line " + std::to_string(e.mark.line + 1) + ", column " + std::to_string(e.mark.column + 1) +
                         ": a value of the wrong kind (" + e.msg + ")");
  }
}

}  // namespace loom::serve

// spec.hpp — an InferenceService spec (examples/inferenceservice.yaml), read and validated.
#pragma once

#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/status.hpp"

namespace loom::serve {

// An InferenceService spec, validated, in any of the dialects --spec takes (Contract 15):
// Loom's own (examples/inferenceservice.yaml), KServe's serving.kserve.io/v1beta1
// (examples/kserve-inferenceservice.yaml) and the seed's ai.baidu.com/v1 as written. Throws
// ServeError kInput naming the field at fault; in Loom's dialect unknown fields are errors
// too (a typo must not pass), in the others they are listed in `ignored` for one warning.
struct InferenceServiceSpec {
  std::string name, path, format;  // format: ONNX or loom-hdf5
  int requests_gpu = 0, limits_gpu = 0;
  std::string requests_memory, limits_memory;
  int min_replicas = 1, max_replicas = 1, queue_length = 0;
  std::string metric = "concurrency";  // what queue_length counts per replica: requests in flight, or per second (rps)
  std::vector<std::string> ignored;    // fields the file holds that Loom does not act on
  // Serverless: how long the last replica stays once no request wants it (Knative's
  // scaleToZeroGracePeriod), and how many replicas are kept parked (their jobs suspended) instead
  // of ended.
  double scale_to_zero_grace_s = 30;
  int warm_pool = 0;
  // spec.slurm: where the replicas run; preemptible: a spot partition or QOS whose jobs Slurm may
  // preempt (each replaced at once, its requests drained or handed to another replica).
  std::string partition, qos;
  bool preemptible = false;
};
InferenceServiceSpec load_spec(const std::string& file);

constexpr const char* kLoomApi = "loom.ai/v1";
constexpr const char* kKServeApi = "serving.kserve.io/v1beta1";
constexpr const char* kSeedApi = "ai.baidu.com/v1";

// "InferenceService" or "InferencePipeline": what a --spec file is (apiVersion, kind and
// metadata.name checked).
std::string spec_kind(const std::string& file);

// What every spec reader shares (the pipeline's too): errors that name the file, unknown fields
// refused by name, strings required; spec_root reads the file and checks apiVersion, `kind`
// (when given) and metadata.name.
// spec_only refuses a field not in `known` by name, or, given `ignored`, lists it there instead.
// spec_root with `ignored` takes every InferenceService dialect (their metadata beyond the name,
// namespace or labels, listed there), without it Loom's alone (pipelines).
[[noreturn]] void spec_error(const std::string& file, const std::string& msg);
void spec_only(const std::string& file, const YAML::Node& n, const std::string& at, const std::set<std::string>& known,
               std::vector<std::string>* ignored = nullptr);
std::string spec_str(const std::string& file, const YAML::Node& n, const std::string& at);
YAML::Node spec_root(const std::string& file, const std::string& kind, std::vector<std::string>* ignored = nullptr);
// Shared by the dialects' readers: an integer in [lo, hi]; a memory quantity (8Gi); the model's
// location (a path or file:// URI, a file or a folder holding model.onnx / model.h5) and format
// as users write it (onnx, ONNX, hdf5, loom-hdf5), into s->path and s->format.
int spec_int(const std::string& file, const YAML::Node& n, const std::string& at, int lo, int hi);
std::string spec_quantity(const std::string& file, const YAML::Node& n, const std::string& at);
// A duration as Knative writes it ("30s", "2m", "1h", "1m30s") or whole seconds; within [0, hi_s].
double spec_duration(const std::string& file, const YAML::Node& n, const std::string& at, double hi_s);
// requests or limits: GPUs under `gpu_key` (gpu; KServe's nvidia.com/gpu) and memory.
void spec_resources(const std::string& file, const YAML::Node& n, const std::string& at, const std::string& gpu_key, int* gpu,
                    std::string* memory, std::vector<std::string>* ignored);
void spec_model(const std::string& file, const std::string& location, const std::string& format, const std::string& at,
                const std::string& format_at, InferenceServiceSpec* s);
// KServe's InferenceService (spec_kserve.cpp): `root` as spec_root read it.
void read_kserve_spec(const std::string& file, const YAML::Node& root, InferenceServiceSpec* s);
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

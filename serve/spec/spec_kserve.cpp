// spec_kserve.cpp — KServe's InferenceService (serving.kserve.io/v1beta1) as KServe users write
// it, mapped onto Loom's spec: spec.predictor.model (modelFormat.name, storageUri, resources) or
// the older spec.predictor.onnx, the replica bounds, scaleMetric/scaleTarget. What KServe has and
// Loom does not act on (namespaces, annotations, transformers, runtimes, cpu requests, ...) is
// listed for one warning, not refused: the file is the user's, written for KServe.
#include <algorithm>

#include "spec/spec.hpp"

namespace loom::serve {
namespace {

// Knative's defaults when scaleTarget is not given: 100 requests in flight, 200 per second.
constexpr int kDefaultConcurrency = 100;
constexpr int kDefaultRps = 200;

// The predictor's model: spec.predictor.model with modelFormat, or spec.predictor.onnx.
void kserve_model(const std::string& file, const YAML::Node& p, InferenceServiceSpec* s) {
  // (yaml-cpp's Node::operator= writes into the document: each node here is bound once.)
  const bool model = static_cast<bool>(p["model"]), onnx = !model && p["onnx"];
  const YAML::Node m = model ? p["model"] : p["onnx"];
  std::string at = model ? "spec.predictor.model" : "spec.predictor.onnx", format;
  if (model) {
    spec_only(file, m, at, {"modelFormat", "storageUri", "resources"}, &s->ignored);
    if (!m["modelFormat"]) spec_error(file, at + ".modelFormat is missing");
    spec_only(file, m["modelFormat"], at + ".modelFormat", {"name"}, &s->ignored);
    format = spec_str(file, m["modelFormat"]["name"], at + ".modelFormat.name");
  } else if (onnx) {
    spec_only(file, m, at, {"storageUri", "resources"}, &s->ignored);
    format = "onnx";
  } else {
    for (const char* other : {"sklearn", "xgboost", "lightgbm", "tensorflow", "pytorch", "triton", "huggingface", "paddle", "pmml"})
      if (p[other])
        spec_error(file, std::string("spec.predictor.") + other + ": loom-serve runs ONNX and Loom's HDF5 models (export the model to "
                         "ONNX and give spec.predictor.model with modelFormat.name: onnx)");
    spec_error(file, "spec.predictor.model is missing (KServe's model: modelFormat.name onnx, storageUri)");
  }
  spec_model(file, spec_str(file, m["storageUri"], at + ".storageUri"), format, at + ".storageUri",
             at + (model ? ".modelFormat.name" : ""), s);
  if (const YAML::Node r = m["resources"]) {
    spec_only(file, r, at + ".resources", {"requests", "limits"}, &s->ignored);
    // nvidia.com/gpu and memory; cpu and the rest noted.
    spec_resources(file, r["requests"], at + ".resources.requests", "nvidia.com/gpu", &s->requests_gpu, &s->requests_memory, &s->ignored);
    spec_resources(file, r["limits"], at + ".resources.limits", "nvidia.com/gpu", &s->limits_gpu, &s->limits_memory, &s->ignored);
  }
}

// minReplicas, maxReplicas, scaleMetric (concurrency or rps) and scaleTarget.
void kserve_scaling(const std::string& file, const YAML::Node& p, InferenceServiceSpec* s) {
  if (p["minReplicas"]) s->min_replicas = spec_int(file, p["minReplicas"], "spec.predictor.minReplicas", 0, 1000);
  s->max_replicas = p["maxReplicas"] ? spec_int(file, p["maxReplicas"], "spec.predictor.maxReplicas", 1, 1000)
                                     : std::max(s->min_replicas, 1);
  if (p["scaleMetric"]) {
    s->metric = spec_str(file, p["scaleMetric"], "spec.predictor.scaleMetric");
    if (s->metric != "concurrency" && s->metric != "rps")
      spec_error(file, "spec.predictor.scaleMetric '" + s->metric + "' is not one the controller scales on (concurrency or rps)");
  }
  s->queue_length = p["scaleTarget"] ? spec_int(file, p["scaleTarget"], "spec.predictor.scaleTarget", 1, 1000000)
                                     : (s->metric == "rps" ? kDefaultRps : kDefaultConcurrency);
}

}  // namespace

void read_kserve_spec(const std::string& file, const YAML::Node& root, InferenceServiceSpec* s) {
  const YAML::Node spec = root["spec"];
  if (!spec) spec_error(file, "spec is missing");
  spec_only(file, spec, "spec", {"predictor"}, &s->ignored);
  const YAML::Node p = spec["predictor"];
  if (!p) spec_error(file, "spec.predictor is missing");
  spec_only(file, p, "spec.predictor", {"model", "onnx", "minReplicas", "maxReplicas", "scaleMetric", "scaleTarget"}, &s->ignored);
  kserve_model(file, p, s);
  kserve_scaling(file, p, s);
  // Knative's per-revision scale-to-zero grace, as KServe passes its annotations on.
  const YAML::Node notes = root["metadata"]["annotations"];
  const char* key = "autoscaling.knative.dev/scale-to-zero-pod-retention-period";
  if (notes && notes.IsMap() && notes[key])
    s->scale_to_zero_grace_s =
        spec_duration(file, notes[key], "metadata.annotations.autoscaling.knative.dev/scale-to-zero-pod-retention-period", 86400);
}

}  // namespace loom::serve

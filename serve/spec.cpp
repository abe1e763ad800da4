// spec.cpp — the declarative InferenceService spec (examples/inferenceservice.yaml), validated
// field by field; unknown fields are errors that name them (a typo must not pass silently).
#include "spec.hpp"

#include <set>

#include "tensor_in.hpp"

namespace loom::serve {

[[noreturn]] void spec_error(const std::string& file, const std::string& msg) {
  throw ServeError(Status::kBadRequest, file + ": " + msg);
}

void spec_only(const std::string& file, const YAML::Node& n, const std::string& at, const std::set<std::string>& known) {
  if (!n.IsMap()) spec_error(file, at + " must be a mapping");
  for (const auto& kv : n) {
    const std::string key = kv.first.as<std::string>();
    if (!known.count(key)) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      spec_error(file, "unknown field " + (at.empty() ? key : at + "." + key) + " (known here: " + list + ")");
    }
  }
}

std::string spec_str(const std::string& file, const YAML::Node& n, const std::string& at) {
  if (!n || !n.IsScalar()) spec_error(file, at + " is missing or not a string");
  return n.as<std::string>();
}

YAML::Node spec_root(const std::string& file, const std::string& kind) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::BadFile&) {
    spec_error(file, "cannot read the file");
  } catch (const YAML::Exception& e) {
    spec_error(file, std::string("not valid YAML: ") + e.what());
  }
  spec_only(file, root, "", {"apiVersion", "kind", "metadata", "spec"});
  if (spec_str(file, root["apiVersion"], "apiVersion") != "loom.ai/v1")
    spec_error(file, "apiVersion must be loom.ai/v1, not '" + root["apiVersion"].as<std::string>() + "'");
  if (!kind.empty() && spec_str(file, root["kind"], "kind") != kind)
    spec_error(file, "kind must be " + kind + ", not '" + root["kind"].as<std::string>() + "'");
  if (!root["metadata"]) spec_error(file, "metadata is missing");
  spec_only(file, root["metadata"], "metadata", {"name"});
  const std::string name = spec_str(file, root["metadata"]["name"], "metadata.name");
  if (!valid_name(name)) spec_error(file, "metadata.name '" + name + "' must be letters, digits, '-', '_' or '.'");
  return root;
}

std::string spec_kind(const std::string& file) {
  const YAML::Node root = spec_root(file, "");
  const std::string kind = spec_str(file, root["kind"], "kind");
  if (kind != "InferenceService" && kind != "InferencePipeline")
    spec_error(file, "kind must be InferenceService or InferencePipeline, not '" + kind + "'");
  return kind;
}

namespace {

int integer(const std::string& file, const YAML::Node& n, const std::string& at, int lo, int hi) {
  if (!n || !n.IsScalar()) spec_error(file, at + " is missing or not a number");
  int v = 0;
  try {
    v = n.as<int>();
  } catch (const YAML::Exception&) {
    spec_error(file, at + " must be an integer, not '" + n.as<std::string>() + "'");
  }
  if (v < lo || v > hi) spec_error(file, at + " must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return v;
}

std::string quantity(const std::string& file, const YAML::Node& n, const std::string& at) {
  const std::string q = spec_str(file, n, at);
  size_t digits = 0;
  while (digits < q.size() && std::isdigit(static_cast<unsigned char>(q[digits]))) ++digits;
  const std::string unit = q.substr(digits);
  static const std::set<std::string> units{"", "Ki", "Mi", "Gi", "Ti", "K", "M", "G", "T"};
  if (digits == 0 || !units.count(unit)) spec_error(file, at + " must be a quantity such as 8Gi, not '" + q + "'");
  return q;
}

void resources(const std::string& file, const YAML::Node& n, const std::string& at, int* gpu, std::string* memory) {
  if (!n) return;
  spec_only(file, n, at, {"gpu", "memory"});
  if (n["gpu"]) *gpu = integer(file, n["gpu"], at + ".gpu", 0, 64);
  if (n["memory"]) *memory = quantity(file, n["memory"], at + ".memory");
}

}  // namespace

namespace {
InferenceServiceSpec read_service_spec(const std::string& file) {
  const YAML::Node root = spec_root(file, "InferenceService");
  InferenceServiceSpec s;
  s.name = root["metadata"]["name"].as<std::string>();
  const YAML::Node spec = root["spec"];
  if (!spec) spec_error(file, "spec is missing");
  spec_only(file, spec, "spec", {"model", "resources", "autoscaling"});
  if (!spec["model"]) spec_error(file, "spec.model is missing");
  spec_only(file, spec["model"], "spec.model", {"path", "format"});
  s.path = spec_str(file, spec["model"]["path"], "spec.model.path");
  const size_t colon = s.path.find("://");
  if (colon != std::string::npos) {
    const std::string scheme = s.path.substr(0, colon);
    if (scheme != "file") spec_error(file, "spec.model.path: scheme " + scheme + ":// is not supported (a file path or file://)");
    s.path = s.path.substr(colon + 3);
  }
  if (s.path.empty() || s.path[0] != '/') spec_error(file, "spec.model.path must be an absolute path");
  s.format = spec["model"]["format"] ? spec_str(file, spec["model"]["format"], "spec.model.format") : "loom-hdf5";
  const bool onnx_file = s.path.size() > 5 && s.path.compare(s.path.size() - 5, 5, ".onnx") == 0;
  if (s.format == "ONNX" || s.format == "onnx") {
    s.format = "ONNX";
    if (!onnx_file) spec_error(file, "spec.model.format ONNX needs spec.model.path to name a .onnx file");
  } else if (s.format == "loom-hdf5") {
    if (onnx_file) spec_error(file, "spec.model.path names a .onnx file: say spec.model.format: ONNX");
  } else {
    spec_error(file, "spec.model.format '" + s.format + "' is not supported (loom-hdf5 or ONNX)");
  }
  if (spec["resources"]) {
    spec_only(file, spec["resources"], "spec.resources", {"requests", "limits"});
    resources(file, spec["resources"]["requests"], "spec.resources.requests", &s.requests_gpu, &s.requests_memory);
    resources(file, spec["resources"]["limits"], "spec.resources.limits", &s.limits_gpu, &s.limits_memory);
    if (s.limits_gpu && s.requests_gpu > s.limits_gpu) spec_error(file, "spec.resources: requests.gpu exceeds limits.gpu");
  }
  if (const YAML::Node a = spec["autoscaling"]) {
    spec_only(file, a, "spec.autoscaling", {"minReplicas", "maxReplicas", "metrics"});
    if (a["minReplicas"]) s.min_replicas = integer(file, a["minReplicas"], "spec.autoscaling.minReplicas", 0, 1000);
    if (a["maxReplicas"]) s.max_replicas = integer(file, a["maxReplicas"], "spec.autoscaling.maxReplicas", 1, 1000);
    if (s.min_replicas > s.max_replicas) spec_error(file, "spec.autoscaling: minReplicas exceeds maxReplicas");
    if (const YAML::Node m = a["metrics"]) {
      if (!m.IsSequence()) spec_error(file, "spec.autoscaling.metrics must be a list");
      for (size_t i = 0; i < m.size(); ++i) {
        const std::string at = "spec.autoscaling.metrics[" + std::to_string(i) + "]";
        spec_only(file, m[i], at, {"type", "queueLength"});
        if (spec_str(file, m[i]["type"], at + ".type") != "Requests")
          spec_error(file, at + ".type must be Requests, not '" + m[i]["type"].as<std::string>() + "'");
        s.queue_length = integer(file, m[i]["queueLength"], at + ".queueLength", 1, 1000000);
      }
    }
  }
  return s;
}
}  // namespace

InferenceServiceSpec load_spec(const std::string& file) {
  return spec_guard(file, [&] { return read_service_spec(file); });
}

}  // namespace loom::serve

// spec.cpp — the declarative InferenceService spec (examples/inferenceservice.yaml) and what every
// spec reader shares, validated field by field; in Loom's dialect unknown fields are errors that
// name them (a typo must not pass silently). KServe's dialect is spec_kserve.cpp.
#include "spec/spec.hpp"

#include <cctype>
#include <set>

#include "core/model_files.hpp"
#include "core/tensor_in.hpp"

namespace loom::serve {

[[noreturn]] void spec_error(const std::string& file, const std::string& msg) {
  throw ServeError(Status::kInput, file + ": " + msg);
}

void spec_only(const std::string& file, const YAML::Node& n, const std::string& at, const std::set<std::string>& known,
               std::vector<std::string>* ignored) {
  if (!n.IsMap()) spec_error(file, at + " must be a mapping");
  for (const auto& kv : n) {
    const std::string key = kv.first.as<std::string>();
    if (known.count(key)) continue;
    const std::string path = at.empty() ? key : at + "." + key;
    if (ignored) {
      ignored->push_back(path);
      continue;
    }
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    spec_error(file, "unknown field " + path + " (known here: " + list + ")");
  }
}

std::string spec_str(const std::string& file, const YAML::Node& n, const std::string& at) {
  if (!n || !n.IsScalar()) spec_error(file, at + " is missing or not a string");
  return n.as<std::string>();
}

YAML::Node spec_root(const std::string& file, const std::string& kind, std::vector<std::string>* ignored) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::BadFile&) {
    spec_error(file, "cannot read the file");
  } catch (const YAML::Exception& e) {
    spec_error(file, std::string("not valid YAML: ") + e.what());
  }
  if (!root.IsMap()) spec_error(file, "not a spec: a mapping with apiVersion, kind, metadata and spec");
  const std::string api = spec_str(file, root["apiVersion"], "apiVersion");
  const bool loom = api == kLoomApi;
  if (!ignored && !loom) spec_error(file, "apiVersion must be " + std::string(kLoomApi) + ", not '" + api + "'");
  if (!loom && api != kKServeApi && api != kSeedApi)
    spec_error(file, "apiVersion '" + api + "' is not one loom-serve reads (" + kLoomApi + ", " + kKServeApi + ", " + kSeedApi + ")");
  std::vector<std::string>* note = loom ? nullptr : ignored;  // Loom's own dialect stays strict
  spec_only(file, root, "", {"apiVersion", "kind", "metadata", "spec"}, note);
  if (!kind.empty() && spec_str(file, root["kind"], "kind") != kind)
    spec_error(file, "kind must be " + kind + ", not '" + root["kind"].as<std::string>() + "'");
  if (!root["metadata"]) spec_error(file, "metadata is missing");
  spec_only(file, root["metadata"], "metadata", {"name"}, note);
  const std::string name = spec_str(file, root["metadata"]["name"], "metadata.name");
  if (!valid_name(name)) spec_error(file, "metadata.name '" + name + "' must be letters, digits, '-', '_' or '.'");
  return root;
}

std::string spec_kind(const std::string& file) {
  std::vector<std::string> ignored;
  const YAML::Node root = spec_root(file, "", &ignored);
  const std::string kind = spec_str(file, root["kind"], "kind");
  if (kind != "InferenceService" && kind != "InferencePipeline")
    spec_error(file, "kind must be InferenceService or InferencePipeline, not '" + kind + "'");
  if (kind == "InferencePipeline" && root["apiVersion"].as<std::string>() != kLoomApi)
    spec_error(file, "an InferencePipeline is Loom's own: apiVersion must be " + std::string(kLoomApi));
  return kind;
}

int spec_int(const std::string& file, const YAML::Node& n, const std::string& at, int lo, int hi) {
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

std::string spec_quantity(const std::string& file, const YAML::Node& n, const std::string& at) {
  const std::string q = spec_str(file, n, at);
  size_t digits = 0;
  while (digits < q.size() && std::isdigit(static_cast<unsigned char>(q[digits]))) ++digits;
  const std::string unit = q.substr(digits);
  static const std::set<std::string> units{"", "Ki", "Mi", "Gi", "Ti", "K", "M", "G", "T"};
  if (digits == 0 || !units.count(unit)) spec_error(file, at + " must be a quantity such as 8Gi, not '" + q + "'");
  return q;
}

namespace {

// onnx, ONNX, Onnx -> ONNX; hdf5, HDF5, loom-hdf5 -> loom-hdf5; huggingface, safetensors ->
// huggingface (KServe's name for a Hugging Face model folder: GPT-2's config.json +
// model.safetensors) (formats as users write them).
std::string model_format(const std::string& file, const std::string& written, const std::string& at) {
  std::string f;
  for (char c : written) f += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (f == "onnx") return "ONNX";
  if (f == "hdf5" || f == "loom-hdf5") return "loom-hdf5";
  if (f == "huggingface" || f == "safetensors") return "huggingface";
  spec_error(file, at + " '" + written + "' is not a format loom-serve runs (onnx; hdf5 / loom-hdf5 for Loom's models; "
                                           "huggingface for a GPT-2 folder; export other frameworks' models to ONNX)");
}

}  // namespace

void spec_model(const std::string& file, const std::string& location, const std::string& format, const std::string& at,
                const std::string& format_at, InferenceServiceSpec* s) {
  s->format = model_format(file, format, format_at);
  std::string path = location;
  const size_t colon = path.find("://");
  if (colon != std::string::npos) {
    const std::string scheme = path.substr(0, colon);
    if (scheme != "file")
      spec_error(file, at + ": scheme " + scheme + ":// is not supported (a file path or file://, on a file system the replicas' nodes mount)");
    path = path.substr(colon + 3);
  }
  if (path.empty() || path[0] != '/') spec_error(file, at + " must be an absolute path");
  const bool onnx_file = is_onnx_file(path), h5_file = is_h5_file(path), st_file = is_safetensors_file(path);
  if (s->format == "huggingface") {  // the folder's config.json and tokenizer are read beside the weights
    if (onnx_file || h5_file) spec_error(file, format_at + " huggingface needs " + at + " to name a folder or its model.safetensors");
    s->path = st_file ? path : path + "/model.safetensors";
    return;
  }
  if (st_file) spec_error(file, at + " names a .safetensors file: say " + format_at + ": huggingface");
  if (!onnx_file && !h5_file) path += s->format == "ONNX" ? "/model.onnx" : "/model.h5";  // a folder, as KServe's storageUri
  if (s->format == "ONNX" && h5_file) spec_error(file, format_at + " ONNX needs " + at + " to name a .onnx file or a folder");
  if (s->format == "loom-hdf5" && onnx_file) spec_error(file, at + " names a .onnx file: say " + format_at + ": onnx");
  s->path = path;
}

double spec_duration(const std::string& file, const YAML::Node& n, const std::string& at, double hi_s) {
  const std::string text = spec_str(file, n, at);
  double total = 0;
  size_t i = 0;
  const bool bare = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  while (i < text.size()) {
    size_t digits = i;
    while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
    const char unit = digits < text.size() ? text[digits] : 's';
    const double scale = unit == 's' ? 1 : unit == 'm' ? 60 : unit == 'h' ? 3600 : -1;
    if (digits == i || digits - i > 9 || scale < 0 || (digits == text.size() && !bare))
      spec_error(file, at + " '" + text + "' is not a duration (30s, 2m, 1h, 1m30s, or whole seconds)");
    total += std::stod(text.substr(i, digits - i)) * scale;
    i = digits + 1;
  }
  if (text.empty() || total > hi_s)
    spec_error(file, at + " '" + text + "' must be a duration up to " + std::to_string(static_cast<long>(hi_s)) + " s");
  return total;
}

void spec_resources(const std::string& file, const YAML::Node& n, const std::string& at, const std::string& gpu_key, int* gpu,
                    std::string* memory, std::vector<std::string>* ignored) {
  if (!n) return;
  spec_only(file, n, at, {gpu_key, "memory"}, ignored);
  if (n[gpu_key]) *gpu = spec_int(file, n[gpu_key], at + "." + gpu_key, 0, 64);
  if (n["memory"]) *memory = spec_quantity(file, n["memory"], at + ".memory");
}

namespace {
// spec.slurm: partition, qos, preemptible.
void read_slurm(const std::string& file, const YAML::Node& n, InferenceServiceSpec* s, std::vector<std::string>* note) {
  if (!n) return;
  spec_only(file, n, "spec.slurm", {"partition", "qos", "preemptible"}, note);
  auto name = [&](const char* key) {
    if (!n[key]) return std::string();
    const std::string v = spec_str(file, n[key], std::string("spec.slurm.") + key);
    if (v.empty() || v.size() > 64 || v.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != std::string::npos)
      spec_error(file, std::string("spec.slurm.") + key + " '" + v + "' must be a Slurm name (letters, digits, '-', '_', '.')");
    return v;
  };
  s->partition = name("partition");
  s->qos = name("qos");
  if (n["preemptible"]) {
    const std::string v = spec_str(file, n["preemptible"], "spec.slurm.preemptible");
    if (v != "true" && v != "false") spec_error(file, "spec.slurm.preemptible must be true or false, not '" + v + "'");
    s->preemptible = v == "true";
  }
}

// Loom's own dialect, and the seed's ai.baidu.com/v1 written the same way (its unknown fields
// noted in `ignored` instead of refused).
void read_loom_spec(const std::string& file, const YAML::Node& root, InferenceServiceSpec* s) {
  std::vector<std::string>* note = root["apiVersion"].as<std::string>() == kLoomApi ? nullptr : &s->ignored;
  const YAML::Node spec = root["spec"];
  if (!spec) spec_error(file, "spec is missing");
  spec_only(file, spec, "spec", {"model", "resources", "autoscaling", "slurm"}, note);
  if (!spec["model"]) spec_error(file, "spec.model is missing");
  spec_only(file, spec["model"], "spec.model", {"path", "format"}, note);
  spec_model(file, spec_str(file, spec["model"]["path"], "spec.model.path"),
             spec["model"]["format"] ? spec_str(file, spec["model"]["format"], "spec.model.format") : "loom-hdf5", "spec.model.path",
             "spec.model.format", s);
  if (spec["resources"]) {
    spec_only(file, spec["resources"], "spec.resources", {"requests", "limits"}, note);
    spec_resources(file, spec["resources"]["requests"], "spec.resources.requests", "gpu", &s->requests_gpu, &s->requests_memory, note);
    spec_resources(file, spec["resources"]["limits"], "spec.resources.limits", "gpu", &s->limits_gpu, &s->limits_memory, note);
  }
  if (const YAML::Node a = spec["autoscaling"]) {
    spec_only(file, a, "spec.autoscaling", {"minReplicas", "maxReplicas", "metrics", "scaleToZeroGracePeriod", "warmPool"}, note);
    if (a["scaleToZeroGracePeriod"])
      s->scale_to_zero_grace_s = spec_duration(file, a["scaleToZeroGracePeriod"], "spec.autoscaling.scaleToZeroGracePeriod", 86400);
    if (a["warmPool"]) s->warm_pool = spec_int(file, a["warmPool"], "spec.autoscaling.warmPool", 0, 1000);
    if (a["minReplicas"]) s->min_replicas = spec_int(file, a["minReplicas"], "spec.autoscaling.minReplicas", 0, 1000);
    if (a["maxReplicas"]) s->max_replicas = spec_int(file, a["maxReplicas"], "spec.autoscaling.maxReplicas", 1, 1000);
    if (const YAML::Node m = a["metrics"]) {
      if (!m.IsSequence()) spec_error(file, "spec.autoscaling.metrics must be a list");
      for (size_t i = 0; i < m.size(); ++i) {
        const std::string at = "spec.autoscaling.metrics[" + std::to_string(i) + "]";
        spec_only(file, m[i], at, {"type", "queueLength"}, note);
        if (spec_str(file, m[i]["type"], at + ".type") != "Requests")
          spec_error(file, at + ".type must be Requests, not '" + m[i]["type"].as<std::string>() + "'");
        s->queue_length = spec_int(file, m[i]["queueLength"], at + ".queueLength", 1, 1000000);
      }
    }
  }
  read_slurm(file, spec["slurm"], s, note);
}

InferenceServiceSpec read_service_spec(const std::string& file) {
  InferenceServiceSpec s;
  const YAML::Node root = spec_root(file, "InferenceService", &s.ignored);
  s.name = root["metadata"]["name"].as<std::string>();
  if (root["apiVersion"].as<std::string>() == kKServeApi) read_kserve_spec(file, root, &s);
  else read_loom_spec(file, root, &s);
  if (s.limits_gpu && s.requests_gpu > s.limits_gpu) spec_error(file, "resources: the GPUs requested exceed the limit");
  if (s.min_replicas > s.max_replicas) spec_error(file, "minReplicas exceeds maxReplicas");
  if (s.warm_pool > s.max_replicas) spec_error(file, "warmPool exceeds maxReplicas (parked replicas are replicas)");
  return s;
}
}  // namespace

InferenceServiceSpec load_spec(const std::string& file) {
  return spec_guard(file, [&] { return read_service_spec(file); });
}

}  // namespace loom::serve

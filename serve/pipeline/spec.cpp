// spec.cpp (pipeline) — kind: InferencePipeline, read and checked before anything connects.
#include <map>
#include <set>

#include "loom/rt/error.hpp"
#include "pipeline/pipeline.hpp"
#include "spec/services.hpp"
#include "spec/spec.hpp"

namespace loom::serve {

namespace {

// grpc://host:port -> host:port, or an error naming the field.
std::string address_of(const std::string& file, const std::string& url, const std::string& at) {
  const std::string scheme = "grpc://";
  if (url.compare(0, scheme.size(), scheme) != 0)
    spec_error(file, at + " must be grpc://host:port (every hop is KServe v2 gRPC), not '" + url + "'");
  const std::string hp = url.substr(scheme.size());
  const size_t colon = hp.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == hp.size() ||
      hp.find_first_not_of("0123456789", colon + 1) != std::string::npos || hp.find('/') != std::string::npos)
    spec_error(file, at + " must be grpc://host:port, not '" + url + "'");
  return hp;
}

std::vector<std::pair<std::string, std::string>> mapping(const std::string& file, const YAML::Node& n, const std::string& at) {
  if (!n || !n.IsMap() || n.size() == 0) spec_error(file, at + " must map names to sources");
  std::vector<std::pair<std::string, std::string>> m;
  for (const auto& kv : n) {
    const std::string key = kv.first.as<std::string>();
    if (!valid_name(key)) spec_error(file, at + ": '" + key + "' is not a tensor name");
    m.emplace_back(key, spec_str(file, kv.second, at + "." + key));
  }
  return m;
}

// Orders the steps so each follows the steps it reads; a source that names no tensor, or a
// cycle, is an error.
void order_steps(const std::string& file, PipelineSpec& p) {
  std::map<std::string, const PipelineStep*> by_name;
  for (const auto& s : p.steps)
    if (!by_name.emplace(s.name, &s).second) spec_error(file, "two steps are named '" + s.name + "'");
  auto check_source = [&](const std::string& src, const std::string& at) {
    const size_t dot = src.find('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == src.size())
      spec_error(file, at + ": '" + src + "' must be request.<input> or <step>.<output>");
    const std::string head = src.substr(0, dot);
    if (head != "request" && !by_name.count(head))
      spec_error(file, at + ": '" + src + "' names no known tensor (no step '" + head + "', nor request.<input>)");
    return head;
  };
  // Kahn's algorithm, linear in steps and inputs (a pass per level was quadratic: a 10,000-step
  // chain in reverse order took 16 s); among steps ready at once the spec's order is kept.
  const size_t k = p.steps.size();
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < k; ++i) index[p.steps[i].name] = i;
  std::vector<std::vector<size_t>> readers(k);
  std::vector<size_t> waiting(k, 0);
  for (size_t i = 0; i < k; ++i) {
    const auto& s = p.steps[i];
    std::set<size_t> from;
    for (const auto& [in, src] : s.inputs) {
      const std::string head = check_source(src, "step " + s.name + " input " + in);
      if (head == s.name) spec_error(file, "step " + s.name + " reads its own output '" + src + "'");
      if (head != "request") from.insert(index.at(head));
    }
    for (size_t f : from) readers[f].push_back(i);
    waiting[i] = from.size();
  }
  std::set<size_t> ready;
  for (size_t i = 0; i < k; ++i)
    if (!waiting[i]) ready.insert(i);
  std::vector<PipelineStep> ordered;
  while (!ready.empty()) {
    const size_t i = *ready.begin();
    ready.erase(ready.begin());
    ordered.push_back(p.steps[i]);
    for (size_t r : readers[i])
      if (--waiting[r] == 0) ready.insert(r);
  }
  if (ordered.size() < k) {
    std::string rest;
    for (size_t i = 0; i < k; ++i)
      if (waiting[i]) rest += (rest.empty() ? "" : ", ") + p.steps[i].name;
    spec_error(file, "the steps " + rest + " form a cycle (each waits for another's output)");
  }
  for (const auto& [out, src] : p.outputs)
    if (check_source(src, "spec.outputs." + out) == "request") spec_error(file, "spec.outputs." + out + " must name a step's output");
  p.steps = std::move(ordered);
}

}  // namespace

void require_connected(const PipelineRunner& p) {
  std::string why;
  if (!p.connected(&why)) throw ServeError(Status::kUnavailable, "pipeline " + p.name() + " is not ready: " + why);
}

namespace {
PipelineSpec read_pipeline_spec(const std::string& file, const std::string& services_dir) {
  const YAML::Node root = spec_root(file, "InferencePipeline");
  PipelineSpec p;
  p.file = file;
  p.services_dir = services_dir;
  p.name = root["metadata"]["name"].as<std::string>();
  const YAML::Node spec = root["spec"];
  if (!spec) spec_error(file, "spec is missing");
  spec_only(file, spec, "spec", {"steps", "outputs"});
  if (!spec["steps"] || !spec["steps"].IsSequence() || spec["steps"].size() == 0)
    spec_error(file, "spec.steps must be a non-empty list");
  for (size_t i = 0; i < spec["steps"].size(); ++i) {
    const YAML::Node s = spec["steps"][i];
    const std::string at = "spec.steps[" + std::to_string(i) + "]";
    spec_only(file, s, at, {"name", "url", "service", "model", "inputs"});
    PipelineStep st;
    st.name = spec_str(file, s["name"], at + ".name");
    if (!valid_name(st.name) || st.name == "request") spec_error(file, at + ".name '" + st.name + "' is not a step name");
    if (s["service"] && s["url"]) spec_error(file, at + " has both url and service: give one");
    if (s["service"]) {
      st.service = spec_str(file, s["service"], at + ".service");
      if (!valid_name(st.service)) spec_error(file, at + ".service '" + st.service + "' is not a service name");
    } else {
      st.address = address_of(file, spec_str(file, s["url"], at + ".url"), at + ".url");
    }
    st.model = spec_str(file, s["model"], at + ".model");
    if (!valid_name(st.model)) spec_error(file, at + ".model '" + st.model + "' is not a model name");
    st.inputs = mapping(file, s["inputs"], at + ".inputs");
    p.steps.push_back(std::move(st));
  }
  p.outputs = mapping(file, spec["outputs"], "spec.outputs");
  order_steps(file, p);
  for (auto& st : p.steps) {
    if (st.service.empty()) continue;
    try {
      st.address = service_grpc_address(services_dir, st.service);
    } catch (const std::exception& e) {
      throw rt::Error(file + ": step '" + st.name + "': " + e.what());
    }
  }
  return p;
}
}  // namespace

PipelineSpec load_pipeline_spec(const std::string& file, const std::string& services_dir) {
  return spec_guard(file, [&] { return read_pipeline_spec(file, services_dir); });
}

}  // namespace loom::serve

// context.cpp — context.hpp's Context: readiness, the token check, metrics labels, pipelines
// by name, and the server's and a model's metadata.
#include <functional>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/kserve_json.hpp"
#include "frontend/context.hpp"
#include "repository/batcher.hpp"
#include "repository/model_config.hpp"

namespace loom::serve {

using json = nlohmann::json;

bool Context::authorized(const std::string& authorization) const {
  if (token.empty()) return true;
  const std::string want = "Bearer " + token;
  if (authorization.size() != want.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned char>(authorization[i] ^ want[i]);
  return diff == 0;
}

bool Context::is_ready() const {
  if (forward) return ready.load() && !stopping.load() && forward->any_ready();
  for (const auto& p : pipelines)
    if (!p->ready()) return false;
  return ready.load() && !stopping.load() && (!strict_readiness || repo->all_ready());
}

std::string Context::metrics_label(const std::string& name) const {
  return (repo && repo->loaded(name)) || pipeline(name) || (forward && forward->serves(name)) ? name : kUnknownModelLabel;
}

PipelineRunner* Context::pipeline(const std::string& name) const {
  for (const auto& p : pipelines)
    if (p->name() == name) return p.get();
  return nullptr;
}

const std::vector<std::string>& server_extensions() {
  static const std::vector<std::string> all = {"binary_tensor_data", "model_repository", "model_configuration", "statistics"};
  return all;
}

std::string Context::server_metadata_json() const {
  return dump_json({{"name", kServerName}, {"version", kServerVersion}, {"extensions", server_extensions()}});
}

inference::ModelConfig Context::model_config(const std::string& name, const std::string& version) const {
  if (const PipelineRunner* p = pipeline(name)) {
    require_connected(*p);
    return described_config(name, "loom-pipeline", p->inputs(), p->outputs());
  }
  return repo->find(name, version)->config();
}

inference::ModelStatisticsResponse Context::statistics(const std::string& name, const std::string& version) const {
  if (!name.empty() && pipeline(name))
    throw ServeError(Status::kInput, "pipeline " + name + " keeps no statistics of its own: its steps' servers do");
  if (!name.empty()) repo->find(name, version);  // 404 naming the model or the version
  inference::ModelStatisticsResponse r;
  for (const auto& v : repo->loaded_versions()) {
    if ((!name.empty() && v.name != name) || (!version.empty() && v.version != version)) continue;
    inference::ModelStatistics* s = r.add_model_stats();
    s->set_name(v.name);
    s->set_version(v.version);
    v.batcher->stats().fill(s);
  }
  return r;
}

namespace {

// The decoder engines of the loaded language models (vLLM's gauges and counters, Loom's names).
void llm_prometheus(rt::PrometheusText& t, const std::vector<Repository::Loaded>& loaded) {
  std::vector<std::pair<rt::PrometheusText::Labels, llm::EngineStats>> all;
  for (const auto& v : loaded)
    if (const llm::Engine* e = v.batcher->model().engine()) all.push_back({{{"model", v.name}, {"version", v.version}}, e->stats()});
  if (all.empty()) return;
  using S = llm::EngineStats;
  const std::vector<std::tuple<const char*, const char*, const char*, std::function<double(const S&)>>> families = {
      {"loom_llm_running_sequences", "gauge", "Sequences being decoded.", [](const S& s) { return s.running; }},
      {"loom_llm_waiting_sequences", "gauge", "Sequences waiting for a slot or KV blocks.", [](const S& s) { return s.waiting; }},
      {"loom_llm_kv_blocks_used", "gauge", "KV cache blocks held by sequences.", [](const S& s) { return s.blocks_used; }},
      {"loom_llm_kv_blocks_free", "gauge", "KV cache blocks free or cached and unused.", [](const S& s) { return s.blocks_total - s.blocks_used; }},
      {"loom_llm_kv_tokens_held", "gauge", "Positions the running sequences keep in the KV cache.", [](const S& s) { return double(s.tokens_held); }},
      {"loom_llm_prefix_cache_hits_total", "counter", "Prompt blocks found in the prefix cache.", [](const S& s) { return double(s.prefix_hits); }},
      {"loom_llm_prefix_cache_misses_total", "counter", "Full prompt blocks not found in the prefix cache.", [](const S& s) { return double(s.prefix_misses); }},
      {"loom_llm_preemptions_total", "counter", "Sequences preempted for KV blocks (recomputed later).", [](const S& s) { return double(s.preemptions); }},
      {"loom_llm_generation_tokens_total", "counter", "Tokens generated.", [](const S& s) { return double(s.output_tokens); }},
      {"loom_llm_steps_total", "counter", "Forward passes of the engine.", [](const S& s) { return double(s.steps); }}};
  for (const auto& f : families) {
    t.family(std::get<0>(f), std::get<1>(f), std::get<2>(f));
    for (const auto& a : all) t.sample(std::get<0>(f), a.first, std::get<3>(f)(a.second));
  }
  t.family("loom_llm_time_to_first_token_seconds", "histogram", "From a request's arrival to its first token.");
  for (const auto& a : all)
    t.histogram("loom_llm_time_to_first_token_seconds", a.first, llm::kLatencyBounds, a.second.ttft_buckets, a.second.ttft_sum_s, a.second.ttft_count);
  t.family("loom_llm_inter_token_latency_seconds", "histogram", "Between a sequence's successive tokens.");
  for (const auto& a : all)
    t.histogram("loom_llm_inter_token_latency_seconds", a.first, llm::kLatencyBounds, a.second.itl_buckets, a.second.itl_sum_s, a.second.itl_count);
}

}  // namespace

std::string Context::metrics_text() const {
  std::string out = metrics->text();
  if (repo) {
    std::vector<Repository::Loaded> loaded = repo->loaded_versions();  // holds the batchers while read
    std::vector<std::pair<std::pair<std::string, std::string>, const ModelStats*>> all;
    for (auto& v : loaded) all.push_back({{v.name, v.version}, &v.batcher->stats()});
    rt::PrometheusText text;
    stats_prometheus(text, all);
    llm_prometheus(text, loaded);
    out += text.str();
  }
  return out + (forward ? forward->metrics_text() : "");
}

std::vector<Repository::State> Context::repository_index() const {
  std::vector<Repository::State> out = repo->index();
  for (const auto& p : pipelines) {  // a pipeline that waits for its steps says for which
    std::string why;
    const bool ready = p->ready(&why);
    out.push_back({p->name(), "1", ready ? "READY" : "UNAVAILABLE", why});
  }
  return out;
}

ModelMetadata Context::model_metadata(const std::string& name, const std::string& version) const {
  if (const PipelineRunner* p = pipeline(name)) {
    require_connected(*p);
    return {name, "loom-pipeline", {"1"}, p->inputs(), p->outputs(), "", 0};
  }
  auto b = repo->find(name, version);
  const ServedModel& m = b->model();
  ModelMetadata md{m.name(), m.platform(), repo->versions(name), m.inputs(), m.outputs(), m.precision(), m.opset()};
  if (m.engine()) {  // a language model: KServe's generate extension's tensors
    md.inputs = {{"text_input", "BYTES", {1}}};
    md.outputs = {{"text_output", "BYTES", {1}}};
  }
  return md;
}

bool Context::model_ready(const std::string& name, const std::string& version) const {
  const PipelineRunner* pipe = pipeline(name);
  if (!pipe) repo->find(name, version);  // 404 when unknown
  return ready.load() && !stopping.load() && (!pipe || pipe->ready());
}

}  // namespace loom::serve

// stats.cpp — counting inferences, and the statistics extension's and Prometheus's views of them.
#include "core/stats.hpp"

#include <chrono>

namespace loom::serve {
namespace {

uint64_t now_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

template <typename D>
void set(inference::StatisticDuration* out, const D& d) {
  out->set_count(d.count);
  out->set_ns(d.ns);
}

}  // namespace

void ModelStats::executed(int rows, int requests, uint64_t input_ns, uint64_t infer_ns, uint64_t output_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  ++executions_;
  inferences_ += static_cast<uint64_t>(rows);
  last_ms_ = now_ms();
  // Triton's per-request figures: each request of the batch spent the batch's times.
  input_.add(input_ns, static_cast<uint64_t>(requests));
  infer_.add(infer_ns, static_cast<uint64_t>(requests));
  output_.add(output_ns, static_cast<uint64_t>(requests));
  Batch& b = batches_[rows];
  b.input.add(input_ns);
  b.infer.add(infer_ns);
  b.output.add(output_ns);
}

void ModelStats::answered(bool ok, uint64_t queue_ns, uint64_t total_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  (ok ? success_ : fail_).add(total_ns);
  if (ok) queue_.add(queue_ns);
}

void ModelStats::refused(uint64_t total_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_.add(total_ns);
}

void ModelStats::fill(inference::ModelStatistics* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  out->set_last_inference(last_ms_);
  out->set_inference_count(inferences_);
  out->set_execution_count(executions_);
  inference::InferStatistics* s = out->mutable_inference_stats();
  set(s->mutable_success(), success_);
  set(s->mutable_fail(), fail_);
  set(s->mutable_queue(), queue_);
  set(s->mutable_compute_input(), input_);
  set(s->mutable_compute_infer(), infer_);
  set(s->mutable_compute_output(), output_);
  set(s->mutable_cache_hit(), Duration());
  set(s->mutable_cache_miss(), Duration());
  for (const auto& b : batches_) {
    inference::InferBatchStatistics* e = out->add_batch_stats();
    e->set_batch_size(static_cast<uint64_t>(b.first));
    set(e->mutable_compute_input(), b.second.input);
    set(e->mutable_compute_infer(), b.second.infer);
    set(e->mutable_compute_output(), b.second.output);
  }
}

void stats_prometheus(rt::PrometheusText& out,
                      const std::vector<std::pair<std::pair<std::string, std::string>, const ModelStats*>>& models) {
  std::vector<std::pair<rt::PrometheusText::Labels, inference::ModelStatistics>> all;
  for (const auto& m : models) {
    all.emplace_back(rt::PrometheusText::Labels{{"model", m.first.first}, {"version", m.first.second}},
                     inference::ModelStatistics());
    m.second->fill(&all.back().second);
  }
  using S = inference::ModelStatistics;
  struct Family {
    const char* name;
    const char* help;
    double (*value)(const S&);
  };
  static const Family families[] = {
      {"nv_inference_request_success", "requests answered", [](const S& s) { return double(s.inference_stats().success().count()); }},
      {"nv_inference_request_failure", "requests failed", [](const S& s) { return double(s.inference_stats().fail().count()); }},
      {"nv_inference_count", "rows inferred", [](const S& s) { return double(s.inference_count()); }},
      {"nv_inference_exec_count", "forward passes (batches) run", [](const S& s) { return double(s.execution_count()); }},
      {"nv_inference_request_duration_us", "arrival to answer of answered requests, microseconds",
       [](const S& s) { return s.inference_stats().success().ns() / 1e3; }},
      {"nv_inference_queue_duration_us", "time answered requests waited in the queue, microseconds",
       [](const S& s) { return s.inference_stats().queue().ns() / 1e3; }},
      {"nv_inference_compute_input_duration_us", "stacking requests' inputs, per request, microseconds",
       [](const S& s) { return s.inference_stats().compute_input().ns() / 1e3; }},
      {"nv_inference_compute_infer_duration_us", "the forward pass, per request, microseconds",
       [](const S& s) { return s.inference_stats().compute_infer().ns() / 1e3; }},
      {"nv_inference_compute_output_duration_us", "handing out outputs, per request, microseconds",
       [](const S& s) { return s.inference_stats().compute_output().ns() / 1e3; }},
  };
  if (all.empty()) return;
  for (const Family& f : families) {
    out.family(f.name, "counter", f.help);
    for (const auto& m : all) out.sample(f.name, m.first, f.value(m.second));
  }
}

}  // namespace loom::serve

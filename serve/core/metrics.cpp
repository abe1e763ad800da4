// metrics.cpp — counters, gauges and histograms, and their Prometheus text.
#include "core/metrics.hpp"

#include "loom/rt/io/prometheus.hpp"

namespace loom::serve {

namespace {
const std::vector<double> kSecondsBounds{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
const std::vector<double> kBatchBounds{1, 2, 4, 8, 16, 32, 64, 128, 256};

}  // namespace

Metrics::PerModel& Metrics::at(const std::string& model) {
  auto it = models_.find(model);
  if (it != models_.end()) return it->second;
  PerModel& p = models_[model];
  p.queue_s.bounds = kSecondsBounds;
  p.compute_s.bounds = kSecondsBounds;
  p.batch.bounds = kBatchBounds;
  return p;
}

void Metrics::request(const std::string& model, const std::string& protocol, Status s) {
  std::lock_guard<std::mutex> lock(mu_);
  PerModel& p = at(model);
  ++p.requests[protocol + "|" + std::to_string(protocol == "grpc" ? grpc_code(s) : http_status(s))];
  if (s != Status::kOk) ++p.failures[status_reason(s)];
}

void Metrics::observe(const std::string& model, double queue_s, double compute_s, int batch_rows, bool batch_start) {
  std::lock_guard<std::mutex> lock(mu_);
  PerModel& p = at(model);
  p.queue_s.add(queue_s);
  if (batch_start) {
    p.compute_s.add(compute_s);
    p.batch.add(batch_rows);
    ++p.batches;
  }
}

void Metrics::set_queue(const std::string& model, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  at(model).queue = n;
}

void Metrics::set_info(const std::string& model, const std::string& version, const std::string& precision) {
  std::lock_guard<std::mutex> lock(mu_);
  at(model).precision[version] = precision;
}

std::string Metrics::text() const {
  std::lock_guard<std::mutex> lock(mu_);
  rt::PrometheusText p;
  p.family("loom_serve_requests_total", "counter", "Inference requests by model, protocol and status code.");
  for (const auto& m : models_)
    for (const auto& r : m.second.requests) {
      const size_t bar = r.first.find('|');
      p.sample("loom_serve_requests_total",
               {{"model", m.first}, {"protocol", r.first.substr(0, bar)}, {"code", r.first.substr(bar + 1)}},
               static_cast<double>(r.second));
    }
  p.family("loom_serve_request_failures_total", "counter", "Failed inference requests by model and reason.");
  for (const auto& m : models_)
    for (const auto& f : m.second.failures)
      p.sample("loom_serve_request_failures_total", {{"model", m.first}, {"reason", f.first}}, static_cast<double>(f.second));
  p.family("loom_serve_queue_length", "gauge", "Requests waiting for a batch.");
  for (const auto& m : models_) p.sample("loom_serve_queue_length", {{"model", m.first}}, static_cast<double>(m.second.queue));
  p.family("loom_serve_model_info", "gauge", "Loaded model versions and their precision.");
  for (const auto& m : models_)
    for (const auto& v : m.second.precision)
      p.sample("loom_serve_model_info", {{"model", m.first}, {"version", v.first}, {"precision", v.second}}, 1);
  struct Family {
    const char* name;
    const char* help;
    Histogram PerModel::*of;
  };
  const Family histograms[] = {{"loom_serve_queue_seconds", "Time a request waited for its batch.", &PerModel::queue_s},
                               {"loom_serve_compute_seconds", "Time a batch's forward pass took.", &PerModel::compute_s},
                               {"loom_serve_batch_size", "Rows per batch run.", &PerModel::batch}};
  for (const Family& f : histograms) {
    p.family(f.name, "histogram", f.help);
    for (const auto& m : models_) {
      const Histogram& h = m.second.*f.of;
      p.histogram(f.name, {{"model", m.first}}, h.bounds, h.counts, h.sum, h.n);
    }
  }
  return p.str();
}

}  // namespace loom::serve

// metrics.cpp — counters, gauges and histograms, and their Prometheus text.
#include "metrics.hpp"

#include <sstream>

namespace loom::serve {

namespace {
const std::vector<double> kSecondsBounds{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
const std::vector<double> kBatchBounds{1, 2, 4, 8, 16, 32, 64, 128, 256};

std::string label(const std::string& v) {  // Prometheus label value escaping
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}
}  // namespace

void Metrics::Histogram::add(double v) {
  if (counts.empty()) counts.assign(bounds.size() + 1, 0);
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++n;
}

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
  std::ostringstream os;
  auto histogram = [&](const char* name, const char* help, const std::string& model, const Histogram& h) {
    os << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
    uint64_t cum = 0;
    for (size_t i = 0; i <= h.bounds.size(); ++i) {
      cum += h.counts.empty() ? 0 : h.counts[i];
      os << name << "_bucket{model=\"" << label(model) << "\",le=\"";
      if (i < h.bounds.size()) os << h.bounds[i];
      else os << "+Inf";
      os << "\"} " << cum << "\n";
    }
    os << name << "_sum{model=\"" << label(model) << "\"} " << h.sum << "\n";
    os << name << "_count{model=\"" << label(model) << "\"} " << h.n << "\n";
  };
  os << "# HELP loom_serve_requests_total Inference requests by model, protocol and status code.\n"
        "# TYPE loom_serve_requests_total counter\n";
  for (const auto& m : models_)
    for (const auto& r : m.second.requests) {
      const size_t bar = r.first.find('|');
      os << "loom_serve_requests_total{model=\"" << label(m.first) << "\",protocol=\"" << r.first.substr(0, bar)
         << "\",code=\"" << r.first.substr(bar + 1) << "\"} " << r.second << "\n";
    }
  os << "# HELP loom_serve_request_failures_total Failed inference requests by model and reason.\n"
        "# TYPE loom_serve_request_failures_total counter\n";
  for (const auto& m : models_)
    for (const auto& f : m.second.failures)
      os << "loom_serve_request_failures_total{model=\"" << label(m.first) << "\",reason=\"" << f.first << "\"} "
         << f.second << "\n";
  os << "# HELP loom_serve_queue_length Requests waiting for a batch.\n# TYPE loom_serve_queue_length gauge\n";
  for (const auto& m : models_) os << "loom_serve_queue_length{model=\"" << label(m.first) << "\"} " << m.second.queue << "\n";
  os << "# HELP loom_serve_model_info Loaded model versions and their precision.\n# TYPE loom_serve_model_info gauge\n";
  for (const auto& m : models_)
    for (const auto& v : m.second.precision)
      os << "loom_serve_model_info{model=\"" << label(m.first) << "\",version=\"" << label(v.first) << "\",precision=\""
         << v.second << "\"} 1\n";
  for (const auto& m : models_) {
    histogram("loom_serve_queue_seconds", "Time a request waited for its batch.", m.first, m.second.queue_s);
    histogram("loom_serve_compute_seconds", "Time a batch's forward pass took.", m.first, m.second.compute_s);
    histogram("loom_serve_batch_size", "Rows per batch run.", m.first, m.second.batch);
  }
  return os.str();
}

}  // namespace loom::serve

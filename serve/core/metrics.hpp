// metrics.hpp — loom-serve's Prometheus metrics: requests and failures by model, protocol and
// code, queue length, and histograms of queue time, compute time and batch size.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/histogram.hpp"
#include "core/status.hpp"

namespace loom::serve {

// Prometheus text: counters, gauges and histograms per model.
class Metrics {
 public:
  void request(const std::string& model, const std::string& protocol, Status s);
  void observe(const std::string& model, double queue_s, double compute_s, int batch_rows, bool batch_start);
  void set_queue(const std::string& model, size_t n);
  // A loaded version's precision (fp32, int8, int8-weights): loom_serve_model_info.
  void set_info(const std::string& model, const std::string& version, const std::string& precision);
  std::string text() const;

 private:
  struct PerModel {
    std::map<std::string, uint64_t> requests;  // "protocol|code" -> count
    std::map<std::string, uint64_t> failures;  // reason -> count
    size_t queue = 0;
    Histogram queue_s, compute_s, batch;
    uint64_t batches = 0;
    std::map<std::string, std::string> precision;  // version -> precision
  };
  PerModel& at(const std::string& model);
  mutable std::mutex mu_;
  std::map<std::string, PerModel> models_;
};

}  // namespace loom::serve

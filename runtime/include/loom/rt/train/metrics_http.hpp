// metrics_http.hpp — `loom-train --metrics-port P` (rank 0): the run's step, loss, samples/s,
// per-rank shares of the global batch, gradient bytes and test accuracy in the Prometheus text
// format at http://BIND:P/metrics, so one dashboard scrapes training beside loom-serve. One
// small thread answers GET /metrics on Boost.Beast, as loom-serve does (at most 16 clients;
// headers over 8 KiB get 431, requests slower than 2 s are dropped); it binds 127.0.0.1 unless
// --metrics-bind says otherwise.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace loom::rt {

struct TrainGauges {
  int64_t step = 0, steps_planned = 0, epoch = 0;
  double loss = 0, samples_per_s = 0, loss_scale = 1;
  std::vector<int> shares;  // rows of the global batch per rank
  uint64_t comm_bytes = 0;
  double test_accuracy = -1;  // < 0: not evaluated yet
  int ranks = 1;
  std::string model;
};

// The exposition text for a set of gauges (tested without a socket).
std::string prometheus_text(const TrainGauges& g);

class MetricsServer {
 public:
  // Listens on bind:port (0: any free port); throws Error when it cannot.
  MetricsServer(const std::string& bind, int port);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  int port() const { return port_; }
  template <typename F>
  void update(F&& f) {
    std::lock_guard<std::mutex> lock(mu_);
    f(gauges_);
  }

 private:
  struct Impl;
  std::string scrape_text();  // the gauges' exposition text, under the lock
  std::mutex mu_;
  TrainGauges gauges_;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace loom::rt

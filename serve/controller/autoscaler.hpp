// autoscaler.hpp — how many replicas a service wants, from its request concurrency, the way
// Knative's KPA decides: desired = ceil(concurrency / queueLength) averaged over the stable
// window (60 s), or over the panic window (6 s) when that asks for at least twice the ready
// replicas; within [minReplicas, maxReplicas]; no scale-down in panic, and none until the
// higher wish has been gone for the scale-down delay; the last replica only once zero has been
// wanted for the scale-to-zero grace period (Knative's scaleToZeroGracePeriod).
#pragma once

#include <deque>
#include <string>
#include <utility>

namespace loom::serve {

struct ScalerConfig {
  int min_replicas = 1, max_replicas = 1;
  double target = 1;                // queueLength: requests in flight or queued per replica
  double stable_window_s = 60, panic_window_s = 6, scale_down_delay_s = 30;
  double scale_to_zero_grace_s = 30;  // the last replica stays this long once zero is wanted
};

struct ScaleDecision {
  int desired = 0;
  bool panic = false;
  double stable_concurrency = 0, panic_concurrency = 0;
  std::string reason;  // one line, for the log
};

class Autoscaler {
 public:
  explicit Autoscaler(ScalerConfig c) : c_(c) {}
  // The mean concurrency (queued + in flight) over the interval that ends at time t (seconds).
  void sample(double t, double concurrency);
  // What to run at time t, with `ready` replicas taking requests now.
  ScaleDecision decide(double t, int ready);
  const ScalerConfig& config() const { return c_; }

 private:
  double mean_since(double t0) const;
  int clamp(int n) const;
  ScalerConfig c_;
  std::deque<std::pair<double, double>> samples_;  // (t, concurrency), oldest first
  std::deque<std::pair<double, int>> wishes_;      // (t, desired before the delay), for the delay
  double panic_until_ = -1;
  double zero_since_ = -1;  // when zero replicas were first wanted, while they are
  int last_ = -1;
};

}  // namespace loom::serve

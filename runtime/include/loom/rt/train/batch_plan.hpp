// batch_plan.hpp — how the global batch is split over the ranks each step: static shares from
// every rank's device weight, re-planned from measured step times (comm/balancer.hpp), with the
// stragglers reported.
#pragma once

#include <string>

#include "loom/rt/comm/balancer.hpp"
#include "loom/rt/train/ranks.hpp"
#include "loom/rt/train/reporter.hpp"

namespace loom::rt {

struct TrainConfig;

class BatchPlan {
 public:
  // Collective: gathers every rank's device weight.
  BatchPlan(const TrainConfig& c, const Ranks& ranks, const Reporter& rep);
  int share() const { return bal_.shares()[static_cast<size_t>(ranks_.me)]; }
  int offset() const { return bal_.offset(ranks_.me); }
  // This rank's gradient weight: its share of the global batch.
  float weight() const { return static_cast<float>(share()) / static_cast<float>(global_); }
  std::string shares_text() const;  // "64,32"
  // Collective: every rank's compute seconds of the last step; reports new stragglers and
  // re-plans the shares when the balancer says so.
  void observe(double compute_seconds);
  Balancer& balancer() { return bal_; }

 private:
  int global_;
  Ranks ranks_;
  const Reporter& rep_;
  Balancer bal_;
};

}  // namespace loom::rt

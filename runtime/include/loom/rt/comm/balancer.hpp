// balancer.hpp — how a fixed global batch is split among ranks of unequal speed. `static`
// starts from each rank's device weight (LOOM_DEVICE_WEIGHT); `dynamic` then follows the
// measured samples/s of every rank (smoothed, re-planned every few steps); `off` splits evenly.
// Shares are integers that always sum to the global batch, each at least 1.
#pragma once

#include <string>
#include <vector>

#include "loom/choice.hpp"

namespace loom::rt {

enum class Balance { kOff, kStatic, kDynamic };

class Balancer {
 public:
  Balancer(Balance mode, int global_batch, int ranks, int replan_every = 10);
  // Initial shares from per-rank weights (ignored when mode is off).
  void start(const std::vector<double>& weights);
  const std::vector<int>& shares() const { return shares_; }
  int offset(int rank) const;
  // Every rank's compute seconds for its share in the last step; returns true when the
  // shares were re-planned.
  bool observe(const std::vector<double>& seconds);
  // Ranks that just became stragglers: their step took over 1.5x what their smoothed speed
  // predicts (and 1 ms more) three steps in a row. A rank is reported once, and again only
  // after it has kept up for a step; one slow step (noise, a page fault) is not reported.
  std::vector<int> stragglers(const std::vector<double>& seconds);
  Balance mode() const { return mode_; }
  // For checkpoints: smoothed speeds and the steps observed; restore() needs the same ranks.
  const std::vector<double>& speeds() const { return speed_; }
  int observed() const { return observed_; }
  void restore(std::vector<int> shares, std::vector<double> speeds, int observed);

  // Largest-remainder split of `total` in proportion to `weights`, each share at least 1.
  static std::vector<int> split(int total, const std::vector<double>& weights);

 private:
  double predicted_step(const std::vector<int>& shares) const;  // seconds of the slowest rank
  Balance mode_;
  int global_, replan_every_, observed_ = 0;
  std::vector<int> shares_;
  std::vector<double> speed_;  // smoothed samples/s per rank
  std::vector<int> slow_steps_;  // consecutive slow steps per rank
};

}  // namespace loom::rt

LOOM_CHOICE(loom::rt::Balance, "--balance", "off", "static", "dynamic");


// balancer.cpp — batch shares for heterogeneous data parallelism.
#include "loom/rt/comm/balancer.hpp"

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "loom/rt/error.hpp"

namespace loom::rt {

Balancer::Balancer(Balance mode, int global_batch, int ranks, int replan_every)
    : mode_(mode), global_(global_batch), replan_every_(std::max(1, replan_every)) {
  if (ranks <= 0) throw Error("the balancer needs at least one rank");
  if (global_batch < ranks)
    throw Error("--global-batch " + std::to_string(global_batch) + " is smaller than the " + std::to_string(ranks) +
                " ranks");
  shares_ = split(global_, std::vector<double>(static_cast<size_t>(ranks), 1.0));
  speed_.assign(static_cast<size_t>(ranks), 0.0);
}

std::vector<int> Balancer::split(int total, const std::vector<double>& weights) {
  const size_t p = weights.size();
  double sum = 0;
  for (double w : weights) sum += std::max(w, 0.0);
  std::vector<int> out(p, 1);
  if (sum <= 0) return split(total, std::vector<double>(p, 1.0));
  const int rest = total - static_cast<int>(p);  // everyone keeps at least one sample
  std::vector<std::pair<double, size_t>> remainders;
  int given = 0;
  for (size_t i = 0; i < p; ++i) {
    double exact = rest * std::max(weights[i], 0.0) / sum;
    int whole = static_cast<int>(exact);
    out[i] += whole;
    given += whole;
    remainders.push_back({exact - whole, i});
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int k = 0; k < rest - given; ++k) ++out[remainders[static_cast<size_t>(k)].second];
  return out;
}

void Balancer::restore(std::vector<int> shares, std::vector<double> speeds, int observed) {
  int sum = 0;
  for (int s : shares) sum += s;
  LOOM_CHECK(shares.size() == shares_.size() && speeds.size() == shares_.size() && sum == global_,
             "balancer state of another world size or global batch");
  shares_ = std::move(shares);
  speed_ = std::move(speeds);
  observed_ = observed;
}

void Balancer::start(const std::vector<double>& weights) {
  if (mode_ == Balance::kOff) return;
  LOOM_CHECK(weights.size() == shares_.size(), "one weight per rank");
  shares_ = split(global_, weights);
}

int Balancer::offset(int rank) const {
  return std::accumulate(shares_.begin(), shares_.begin() + rank, 0);
}

bool Balancer::observe(const std::vector<double>& seconds) {
  LOOM_CHECK(seconds.size() == shares_.size(), "one time per rank");
  for (size_t i = 0; i < seconds.size(); ++i) {
    double s = shares_[i] / std::max(seconds[i], 1e-9);
    speed_[i] = speed_[i] > 0 ? 0.75 * speed_[i] + 0.25 * s : s;  // smoothed over about 4 steps
  }
  ++observed_;
  if (mode_ != Balance::kDynamic || observed_ % replan_every_ != 0) return false;
  std::vector<int> next = split(global_, speed_);
  // Hysteresis: step times are noisy, and moving a sample back and forth gains nothing. A new
  // plan is taken when it shortens the predicted step (the slowest rank's share over its speed)
  // by 2%: a few samples off the slowest rank can be worth that, where a count of samples moved
  // (it was global / 50) left such an imbalance standing.
  if (next == shares_ || predicted_step(next) > 0.98 * predicted_step(shares_)) return false;
  shares_ = next;
  return true;
}

double Balancer::predicted_step(const std::vector<int>& shares) const {
  double slowest = 0;
  for (size_t i = 0; i < shares.size(); ++i) slowest = std::max(slowest, shares[i] / std::max(speed_[i], 1e-9));
  return slowest;
}

std::vector<int> Balancer::stragglers(const std::vector<double>& seconds) {
  std::vector<int> out;
  slow_steps_.resize(seconds.size(), 0);
  if (observed_ < 3) return out;
  for (size_t i = 0; i < seconds.size(); ++i) {
    const double predicted = speed_[i] > 0 ? shares_[i] / speed_[i] : seconds[i];
    if (seconds[i] > 1.5 * predicted && seconds[i] > predicted + 1e-3) {
      if (++slow_steps_[i] == 3) out.push_back(static_cast<int>(i));
    } else {
      slow_steps_[i] = 0;
    }
  }
  return out;
}

}  // namespace loom::rt

// autoscaler.cpp — autoscaler.hpp.
#include "autoscaler.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace loom::serve {

void Autoscaler::sample(double t, double concurrency) {
  samples_.emplace_back(t, std::max(0.0, concurrency));
  const double keep = std::max(c_.stable_window_s, c_.panic_window_s);
  while (!samples_.empty() && samples_.front().first < t - keep) samples_.pop_front();
}

double Autoscaler::mean_since(double t0) const {
  double sum = 0;
  int n = 0;
  for (const auto& [t, v] : samples_)
    if (t >= t0) sum += v, ++n;
  return n ? sum / n : 0;
}

int Autoscaler::clamp(int n) const { return std::min(c_.max_replicas, std::max(c_.min_replicas, n)); }

ScaleDecision Autoscaler::decide(double t, int ready) {
  ScaleDecision d;
  d.stable_concurrency = mean_since(t - c_.stable_window_s);
  d.panic_concurrency = mean_since(t - c_.panic_window_s);
  const int want_stable = clamp(static_cast<int>(std::ceil(d.stable_concurrency / c_.target - 1e-9)));
  const int want_panic = clamp(static_cast<int>(std::ceil(d.panic_concurrency / c_.target - 1e-9)));
  // Panic: the short window asks for twice what is ready. It lasts a stable window from the
  // last time that held, and meanwhile the count only grows.
  if (want_panic >= 2 * std::max(ready, 1) && want_panic > ready) panic_until_ = t + c_.stable_window_s;
  d.panic = t < panic_until_;
  std::ostringstream why;
  int want;
  if (d.panic) {
    want = std::max(want_panic, std::max(last_, c_.min_replicas));
    why << "panic: " << d.panic_concurrency << " requests over " << c_.panic_window_s << " s";
  } else {
    want = want_stable;
    why << d.stable_concurrency << " requests over " << c_.stable_window_s << " s";
  }
  why << " at " << c_.target << " per replica";
  // Scale-down delay: the highest wish of the last delay seconds holds.
  wishes_.emplace_back(t, want);
  while (!wishes_.empty() && wishes_.front().first < t - c_.scale_down_delay_s) wishes_.pop_front();
  int held = want;
  for (const auto& w : wishes_) held = std::max(held, w.second);
  if (held > want) why << "; holding " << held << " for the scale-down delay (" << c_.scale_down_delay_s << " s)";
  d.desired = clamp(held);
  if (d.desired > 0) {
    zero_since_ = -1;
  } else if (last_ > 0) {  // scale to zero: after the grace period
    if (zero_since_ < 0) zero_since_ = t;
    if (t - zero_since_ < c_.scale_to_zero_grace_s) {
      d.desired = 1;
      why << "; keeping the last replica for the scale-to-zero grace period (" << c_.scale_to_zero_grace_s << " s)";
    }
  }
  d.reason = why.str();
  last_ = d.desired;
  return d;
}

}  // namespace loom::serve

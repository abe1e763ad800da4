// warm_pool.cpp — the controller's warm pool (controller.hpp): replicas parked instead of ended
// (drained, then their job suspended with scontrol suspend) and resumed for the next request.
#include "controller.hpp"

namespace loom::serve {

void Controller::park(Replica& r, double now) {
  r.park = false;
  const std::string err = jobs_.suspend(r.job);
  if (err.empty()) {
    pool_.set_state(r, ReplicaState::kParked, now);
    parks_.fetch_add(1);
    log_("info", "replica job " + r.job + " parked (its job suspended: memory and model kept, CPUs free)",
         {{"event", "parked"}, {"job", r.job}});
    return;
  }
  if (!park_refused_)  // said once: from here on replicas are ended
    log_("warning", "cannot park replica job " + r.job + ", ending replicas instead of parking them: " + err,
         {{"event", "park_refused"}, {"job", r.job}, {"error", err}});
  park_refused_ = true;
  end_replica(r, now, "scaled down (parking refused)");
}

bool Controller::resume_parked(double now) {
  for (const auto& r : pool_.all()) {
    if (r->state != ReplicaState::kParked) continue;
    const std::string err = jobs_.resume(r->job);
    if (!err.empty()) {
      log_("warning", "cannot resume parked replica job " + r->job + ", ending it: " + err, {{"event", "resume_failed"}, {"job", r->job}});
      end_replica(*r, now, "could not be resumed");
      continue;
    }
    resumes_.fetch_add(1);
    r->activated = now;
    r->resumed = true;
    pool_.set_state(*r, ReplicaState::kStarting, now);
    log_("info", "replica job " + r->job + " resumed", {{"event", "resumed"}, {"job", r->job}});
    // slurmd delivers SIGCONT a moment after scontrol returns: short checks for up to 2 s, so the
    // held requests go the moment it answers (a stopped process would hold a long check).
    for (int i = 0; i < 40 && r->state == ReplicaState::kStarting; ++i)
      if (pool_.health_check(*r, 50)) became_ready(*r, monotonic_s());
    return true;
  }
  return false;
}

void Controller::retire(Replica& r, double now) {
  int parked = 0;
  for (const auto& p : pool_.all()) parked += p->state == ReplicaState::kParked || p->park;
  if (!park_refused_ && parked < warm_pool_ && r.state == ReplicaState::kReady) {
    r.park = true;
    pool_.set_state(r, ReplicaState::kDraining, now);  // no new requests; parked once idle
    log_("info", "parking replica job " + r.job + " (warm pool " + std::to_string(parked + 1) + " of " + std::to_string(warm_pool_) + ")",
         {{"event", "parking"}, {"job", r.job}});
    check(r, now);
    return;
  }
  end_replica(r, now, "scaled down");
}

}  // namespace loom::serve

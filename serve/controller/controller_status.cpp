// controller_status.cpp — what the controller shows (controller.hpp): its /metrics, the status
// page's data and its memory of the last hour, and Prometheus' targets file.
#include <algorithm>
#include <chrono>

#include "activator.hpp"
#include "controller.hpp"
#include "loom/rt/io/prometheus.hpp"
#include "loom/rt/proc/process.hpp"

namespace loom::serve {

namespace {
double unix_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }
}  // namespace

void Controller::remember(double demand) {
  std::lock_guard<std::mutex> lock(status_mu_);
  const double t = unix_s();
  history_.push_back({t, count(ReplicaState::kReady), static_cast<int>(pool_.all().size()), demand});
  while (!history_.empty() && history_.front().t < t - 3600) history_.pop_front();
}

void Controller::remember_event(int from, int to, const ScaleDecision& d) {
  std::lock_guard<std::mutex> lock(status_mu_);
  events_.push_back({{"time", unix_s()}, {"from", from}, {"to", to}, {"panic", d.panic}, {"reason", d.reason}});
  while (events_.size() > 20) events_.pop_front();
}

nlohmann::json Controller::status_json() const {
  nlohmann::json replicas = nlohmann::json::array();
  const double now = monotonic_s(), wall = unix_s();
  for (const auto& r : pool_.all())
    replicas.push_back({{"job", r->job}, {"node", r->node}, {"state", state_name(r->state.load())},
                        {"outstanding", r->outstanding.load()}, {"routed", r->routed.load()},
                        {"since", wall - (now - r->since.load())}, {"reason", r->state.load() == ReplicaState::kPending ? r->reason : ""}});
  std::lock_guard<std::mutex> lock(status_mu_);
  nlohmann::json history = nlohmann::json::array();
  const size_t step = std::max<size_t>(1, history_.size() / 360);  // at most 360 points
  for (size_t i = 0; i < history_.size(); i += step)
    history.push_back({history_[i].t, history_[i].ready, history_[i].replicas, history_[i].demand});
  return {{"service", {{"name", service_}, {"min_replicas", min_replicas_}, {"max_replicas", max_replicas_},
                       {"desired", last_.desired}, {"panic", last_.panic}}},
          {"replicas", replicas}, {"history", history}, {"events", nlohmann::json(events_)},
          {"rejected", pool_.rejected()}, {"held", pool_.activator() ? pool_.activator()->held() : 0}};
}

void Controller::write_targets() {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& r : pool_.all())
    if (r->state == ReplicaState::kReady && !r->host.empty())
      groups.push_back({{"targets", {r->host + ":" + std::to_string(r->http_port)}},
                        {"labels", {{"loom_service", service_}, {"slurm_job_id", r->job}, {"node", r->node}}}});
  const std::string text = groups.dump(2) + "\n";
  if (text == targets_) return;
  targets_ = text;  // a failure is said once for each change
  try {
    rt::write_file_atomic(o_.state_dir + "/prometheus-targets.json", text, 0644);
  } catch (const std::exception& e) {
    log_("warning", std::string("cannot write Prometheus' targets: ") + e.what(), {{"event", "targets_failed"}});
  }
}

std::string Controller::metrics_text() const {
  rt::PrometheusText m;
  const auto all = pool_.all();
  m.family("loom_controller_replicas", "gauge", "Replica jobs by state.");
  for (auto s : {ReplicaState::kPending, ReplicaState::kStarting, ReplicaState::kReady, ReplicaState::kDraining, ReplicaState::kParked}) {
    int n = 0;
    for (const auto& r : all) n += r->state == s;
    m.sample("loom_controller_replicas", {{"state", state_name(s)}}, n);
  }
  m.single("loom_controller_desired_replicas", "gauge", "What the autoscaler asks for.", last_.desired);
  m.single("loom_controller_panic", "gauge", "1 while the autoscaler is in its panic window.", last_.panic ? 1 : 0);
  m.family("loom_controller_concurrency", "gauge", "Average requests in flight over the stable and the panic window.");
  m.sample("loom_controller_concurrency", {{"window", "stable"}}, last_.stable_concurrency);
  m.sample("loom_controller_concurrency", {{"window", "panic"}}, last_.panic_concurrency);
  m.family("loom_controller_replica_outstanding", "gauge", "Requests in flight at each replica.");
  for (const auto& r : all) m.sample("loom_controller_replica_outstanding", {{"job", r->job}}, r->outstanding.load());
  m.family("loom_controller_routed_total", "counter", "Requests routed to each replica.");
  for (const auto& r : all) m.sample("loom_controller_routed_total", {{"job", r->job}}, static_cast<double>(r->routed.load()));
  m.single("loom_controller_rejected_total", "counter", "Requests refused with no replica ready or every one full.",
           static_cast<double>(pool_.rejected()));
  m.single("loom_controller_broken_streams_total", "counter",
           "generate_stream answers whose replica stopped before the end.", static_cast<double>(pool_.broken_streams()));
  m.family("loom_controller_scale_events_total", "counter", "Replicas the autoscaler added or drained.");
  m.sample("loom_controller_scale_events_total", {{"direction", "up"}}, static_cast<double>(up_.load()));
  m.sample("loom_controller_scale_events_total", {{"direction", "down"}}, static_cast<double>(down_.load()));
  m.single("loom_controller_replaced_total", "counter", "Replica jobs that ended and were submitted again.",
           static_cast<double>(replaced_.load()));
  m.single("loom_controller_submit_failures_total", "counter", "sbatch calls that failed.",
           static_cast<double>(submit_failures_.load()));
  m.single("loom_controller_parked_total", "counter", "Replicas parked (their jobs suspended) instead of ended.",
           static_cast<double>(parks_.load()));
  m.single("loom_controller_resumed_total", "counter", "Parked replicas resumed for requests.", static_cast<double>(resumes_.load()));
  m.single("loom_controller_preemptions_total", "counter", "Replica jobs preempted by Slurm (each replaced).",
           static_cast<double>(preemptions_.load()));
  {
    std::lock_guard<std::mutex> lock(status_mu_);
    m.family("loom_controller_cold_start_seconds", "histogram", "From a replica's submission or resumption to its first ready check.");
    m.histogram("loom_controller_cold_start_seconds", {{"from", "job"}}, cold_job_.bounds, cold_job_.counts, cold_job_.sum, cold_job_.n);
    m.histogram("loom_controller_cold_start_seconds", {{"from", "parked"}}, cold_parked_.bounds, cold_parked_.counts,
                cold_parked_.sum, cold_parked_.n);
  }
  const Activator* a = pool_.activator();
  return m.str() + (a ? a->metrics_text() : "");
}

}  // namespace loom::serve

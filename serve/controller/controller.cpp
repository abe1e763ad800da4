// controller.cpp — controller.hpp: the reconcile loop.
#include "controller.hpp"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "frontend/servers.hpp"
#include "activator.hpp"
#include "grpc_router.hpp"
#include "loom/rt/error.hpp"
#include "loom/rt/io/prometheus.hpp"
#include "loom/rt/proc/process.hpp"
#include "spec/services.hpp"
#include "spec/spec.hpp"

namespace loom::serve {

using json = nlohmann::json;

namespace {

bool active_state(const std::string& s) {
  static const std::set<std::string> active = {"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "REQUEUED",
                                               "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT"};
  return active.count(s) > 0;
}

bool pending_state(const std::string& s) { return s == "PENDING" || s.rfind("REQUEUE", 0) == 0; }

ScalerConfig scaler_config(const InferenceServiceSpec& s, const ControllerOptions& o) {
  if (s.queue_length <= 0)
    throw ServeError(Status::kInput, o.spec_file + ": spec.autoscaling.metrics needs a Requests metric with "
                                                        "queueLength (the controller scales on it)");
  ScalerConfig c;
  c.min_replicas = s.min_replicas;
  c.max_replicas = s.max_replicas;
  c.target = s.queue_length;
  c.stable_window_s = o.stable_window_s;
  c.panic_window_s = o.panic_window_s;
  c.scale_down_delay_s = o.scale_down_delay_s;
  c.scale_to_zero_grace_s = s.scale_to_zero_grace_s;
  return c;
}

ReplicaJobSpec job_spec(const InferenceServiceSpec& s, const ControllerOptions& o) {
  ReplicaJobSpec j;
  j.service = s.name;
  j.state_dir = o.state_dir;
  j.partition = o.partition.empty() ? s.partition : o.partition;  // --partition overrides the spec's
  j.qos = s.qos;
  j.preemptible = s.preemptible;
  j.gpus = s.requests_gpu ? s.requests_gpu : s.limits_gpu;
  // Slurm has one memory figure, the allocation; the request is what the replica is given
  // (a limit alone stands in for it).
  j.mem = slurm_memory(!s.requests_memory.empty() ? s.requests_memory : s.limits_memory);
  j.cpus = o.replica_cpus;
  return j;
}

// host/http_port/grpc_port from the replica's ready file; false while there is none.
bool read_replica(const std::string& path, Replica& r) {
  Announcement a;
  if (!read_announcement(path, &a)) return false;
  r.host = a.host;
  r.http_port = a.http_port;
  r.grpc_port = a.grpc_port;
  return true;
}

// Pipelines find the service by its name in the services folder (services.hpp). A controller
// that cannot announce itself still serves, by its address.
void announce(const ControllerOptions& o, const std::string& name, const std::string& bind, int http_port, int grpc_port,
              const EventLog& log) {
  if (o.services_dir.empty()) return;
  try {
    announce_service(o.services_dir, name, bind, http_port, grpc_port);
    log("info", "announced as service " + name + " in " + service_file(o.services_dir, name),
        {{"event", "announced"}, {"file", service_file(o.services_dir, name)}});
  } catch (const std::exception& e) {
    log("warning", std::string("cannot announce the service (pipelines will not find it by name): ") + e.what(),
        {{"event", "announce_failed"}});
  }
}

}  // namespace

Controller::Controller(ControllerOptions o, const InferenceServiceSpec& spec, ReplicaPool& pool, EventLog log)
    : o_(std::move(o)), pool_(pool), log_(std::move(log)), jobs_(job_spec(spec, o_)), scaler_(scaler_config(spec, o_)),
      metric_(spec.metric), warm_pool_(spec.warm_pool), service_(spec.name), min_replicas_(spec.min_replicas),
      max_replicas_(spec.max_replicas) {
  cold_job_.bounds = cold_parked_.bounds = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
  write_replica_script(o_.state_dir, o_.loom_serve, o_.spec_file, o_.replica_bind, o_.token_file, o_.serve_args,
                       spec.requests_gpu > 0 ? spec.requests_gpu : spec.limits_gpu);
}

int Controller::count(ReplicaState s) const {
  int n = 0;
  for (const auto& r : pool_.all()) n += r->state == s;
  return n;
}

void Controller::run(const std::atomic<bool>& stop) {
  while (!stop.load()) {
    tick(monotonic_s());
    const double next = monotonic_s() + o_.tick_s;
    std::unique_lock<std::mutex> lock(poke_mu_);
    while (!stop.load() && !poked_ && monotonic_s() < next) poke_cv_.wait_for(lock, std::chrono::milliseconds(20));
    poked_ = false;
  }
}

void Controller::poke() {
  {
    std::lock_guard<std::mutex> lock(poke_mu_);
    poked_ = true;
  }
  poke_cv_.notify_all();
}

void Controller::tick(double now) {
  std::vector<JobInfo> jobs;
  try {
    jobs = jobs_.list();
  } catch (const std::exception& e) {
    // Without squeue nothing is known: change nothing, keep routing to what was ready.
    if (squeue_ok_) log_("error", std::string("cannot list the replica jobs, holding: ") + e.what(), {{"event", "squeue"}});
    squeue_ok_ = false;
    return;
  }
  squeue_ok_ = true;
  observe(jobs, now);
  for (const auto& r : pool_.all()) check(*r, now);
  // Refused requests with no replica at all say there is demand (a service scaled to zero must
  // start one), not how much: clients retrying a 503 in a loop would ask for every one allowed.
  const ReplicaPool::Load load = pool_.take_load();
  double demand = metric_ == "rps" ? load.rate : load.concurrency;  // what scaleTarget counts per replica
  // A language model's concurrency is its sequences, running and waiting (a request with n
  // choices is n of them), as its replicas count them.
  if (metric_ != "rps") {
    double seqs = -1;
    for (const auto& r : pool_.all())
      if (r->state == ReplicaState::kReady) {
        const double s = pool_.sequences(*r, 1000, o_.authorization);
        if (s >= 0) seqs = std::max(seqs, 0.0) + s;
      }
    if (seqs >= 0) demand = std::max(demand, seqs);
  }
  if (pool_.take_refused() > 0 && pool_.all().empty()) demand = std::max(demand, 1.0);
  // Requests held for a replica want one each (a service at zero starts one for the first).
  if (const Activator* a = pool_.activator()) demand = std::max(demand, static_cast<double>(a->held()));
  scaler_.sample(now, demand);
  const ScaleDecision d = scaler_.decide(now, count(ReplicaState::kReady));
  scale(d, now);
  last_ = d;
  write_targets();
  remember(demand);
}

void Controller::observe(const std::vector<JobInfo>& jobs, double now) {
  std::set<std::string> seen;
  for (const auto& j : jobs) {
    seen.insert(j.id);
    auto r = pool_.find(j.id);
    if (!active_state(j.state)) {
      if (!r) continue;  // an old replica's record, kept by squeue for MinJobAge
      pool_.remove(j.id);
      pruned_ = false;
      const auto ours = ended_by_us_.find(j.id);
      if (ours != ended_by_us_.end()) {
        log_("info", "replica job " + j.id + " ended (" + j.state + "): " + ours->second, {{"event", "replica_end"}, {"job", j.id}});
        ended_by_us_.erase(ours);
      } else {
        lost(*r, j.state, now);
      }
      continue;
    }
    if (!r) {  // submitted by an earlier run of this controller: adopted, never submitted again
      r = std::make_shared<Replica>();
      r->job = j.id;
      r->since = now;
      r->state = pending_state(j.state) ? ReplicaState::kPending
                 : j.state == "SUSPENDED"  ? ReplicaState::kParked
                                           : ReplicaState::kStarting;
      if (r->state == ReplicaState::kParked) read_replica(ready_file(o_.state_dir, j.id), *r);  // resumed without a start
      pool_.put(r);
      log_("info", "adopted replica job " + j.id + " (" + j.state + ")", {{"event", "adopt"}, {"job", j.id}});
    }
    // Suspended by someone else (an admin, gang scheduling): out of routing, parked, so that a
    // request resumes it rather than waiting on a stopped process.
    if (j.state == "SUSPENDED" && r->state != ReplicaState::kParked && r->state != ReplicaState::kDraining) {
      pool_.set_state(*r, ReplicaState::kParked, now);
      log_("warning", "replica job " + j.id + " was suspended by Slurm: parked", {{"event", "suspended"}, {"job", j.id}});
    }
    r->reason = j.reason;
    r->node = j.node;
    if (r->state == ReplicaState::kPending && !pending_state(j.state)) pool_.set_state(*r, ReplicaState::kStarting, now);
  }
  for (const auto& r : pool_.all()) {
    if (seen.count(r->job)) continue;
    pool_.remove(r->job);  // gone from squeue altogether
    pruned_ = false;
    if (!ended_by_us_.erase(r->job)) lost(*r, "", now);
  }
  if (pruned_) return;  // after a start (an old state dir) and whenever a replica left the pool
  std::set<std::string> live;
  for (const auto& r : pool_.all()) live.insert(r->job);
  prune_replica_files(o_.state_dir, live, kKeptReplicaLogs);
  pruned_ = true;
}

void Controller::lost(const Replica& r, const std::string& state, double now) {
  replaced_.fetch_add(1);
  if (preempted(r.job, state)) {  // a spot replica: replaced at once
    preemptions_.fetch_add(1);
    log_(jobs_.spec().preemptible ? "info" : "warning", "replica job " + r.job + " was preempted by Slurm; a new one replaces it",
         {{"event", "preempted"}, {"job", r.job}});
    return;
  }
  if (state.empty())  // squeue forgot it (MinJobAge)
    log_("warning", "replica job " + r.job + " is gone from squeue; a new one replaces it", {{"event", "replica_lost"}, {"job", r.job}});
  else
    log_("warning", "replica job " + r.job + " ended on its own (" + state + "); a new one replaces it",
         {{"event", "replica_lost"}, {"job", r.job}, {"state", state}});
  if (r.activated >= 0) failed_start(r.job, now, (state.empty() ? "ended" : "ended (" + state + ")") + std::string(" before it was ready"));
}

void Controller::check(Replica& r, double now) {
  const double age = now - r.since;
  switch (r.state.load()) {
    case ReplicaState::kPending:
      // Until the scheduler has looked at a job its reason is "None": the warning waits for a
      // reason that tells the admin something, or reports that none came in another minute
      // (Slurm's main scheduler runs at least once a minute: sched_interval).
      if (!r.warned && age > o_.pending_warn_s) {
        const bool known = !r.reason.empty() && r.reason != "None";
        if (!known && age <= o_.pending_warn_s + 60) return;
        r.warned = true;
        const std::string why = known ? r.reason : "None (the scheduler has not considered the job yet)";
        log_("warning", "replica job " + r.job + " has been pending for " + std::to_string(static_cast<int>(age)) +
                            " s: Slurm's reason: " + why,
             {{"event", "pending"}, {"job", r.job}, {"reason", r.reason}});
      }
      return;
    case ReplicaState::kStarting:
      // The address is read once: a job's replica keeps it, and requests still in flight on a
      // demoted replica read it meanwhile.
      if ((!r.host.empty() || read_replica(ready_file(o_.state_dir, r.job), r)) && pool_.health_check(r, 1000)) {
        became_ready(r, now);
      } else if (age > o_.start_timeout_s) {
        const std::string what = "not ready " + std::to_string(static_cast<int>(age)) + " s after it started";
        failed_start(r.job, now, what);
        end_replica(r, now, what + " (see " + o_.state_dir + "/replicas/" + r.job + ".log)");
      }
      return;
    case ReplicaState::kReady:
      if (pool_.health_check(r, 1000)) {
        r.failed_checks = 0;
      } else if (++r.failed_checks >= 3) {
        pool_.set_state(r, ReplicaState::kStarting, now);
        log_("warning", "replica job " + r.job + " failed 3 health checks: no longer routed to", {{"event", "unhealthy"}, {"job", r.job}});
      }
      return;
    case ReplicaState::kDraining:
      if (r.park) {
        if (r.outstanding.load() == 0) park(r, now);  // nothing in flight is lost
      } else if (age > 120) {  // SIGTERM did not end it: Slurm does
        jobs_.cancel(r.job);
        r.since = now;
      }
      return;
    case ReplicaState::kParked:
      return;
  }
}

bool Controller::preempted(const std::string& job, const std::string& state) const {
  if (state == "PREEMPTED" || jobs_.log_says(job, "DUE TO PREEMPTION")) return true;
  // Preempted within its GraceTime, a replica drains and exits 0: its job COMPLETED, and only
  // slurmstepd's line says its step was cancelled. In a preemptible partition, that was Slurm.
  return jobs_.spec().preemptible && jobs_.log_says(job, " CANCELLED AT ");
}

void Controller::became_ready(Replica& r, double now) {
  pool_.set_state(r, ReplicaState::kReady, now);
  r.failed_checks = 0;
  failed_starts_ = 0;
  nlohmann::json f = {{"event", "ready"}, {"job", r.job}, {"host", r.host}, {"http_port", r.http_port}, {"grpc_port", r.grpc_port}};
  std::string cold;
  if (r.activated >= 0) {  // submitted or resumed by this controller: how long it took
    const double s = now - r.activated;
    f["cold_start_s"] = s;
    f["from"] = r.resumed ? "parked" : "job";
    cold = " " + rt::PrometheusText::number(std::round(s * 1000) / 1000) + " s after it was " + (r.resumed ? "resumed" : "submitted");
    std::lock_guard<std::mutex> lock(status_mu_);
    (r.resumed ? cold_parked_ : cold_job_).add(s);
  }
  r.activated = -1;
  log_("info", "replica job " + r.job + " ready at " + r.host + ":" + std::to_string(r.http_port) + " (node " + r.node + ")" + cold, f);
  if (Activator* a = pool_.activator()) a->wake();  // held requests go now
}

void Controller::failed_start(const std::string& job, double now, const std::string& what) {
  ++failed_starts_;
  const double backoff = std::min(60.0, std::pow(2.0, failed_starts_ - 1));
  next_submit_ = now + backoff;
  const std::string tail = jobs_.log_tail(job);
  log_("error", "replica job " + job + " failed to start: " + what + (tail.empty() ? "" : "; its log ends: " + tail) +
                    "; the next is submitted in " + rt::PrometheusText::number(backoff) + " s",
       {{"event", "start_failed"}, {"job", job}, {"backoff_s", backoff}, {"log", tail}});
}

void Controller::scale(const ScaleDecision& d, double now) {
  std::vector<std::shared_ptr<Replica>> live;
  for (const auto& r : pool_.all())
    if (r->state != ReplicaState::kDraining && r->state != ReplicaState::kParked) live.push_back(r);
  const int have = static_cast<int>(live.size());
  if (d.desired == have) return;
  // One line a decision: a decision that cannot be carried out (sbatch refuses) is not repeated.
  if (std::make_pair(have, d.desired) != last_logged_) {
    log_("info", "scale " + std::to_string(have) + " -> " + std::to_string(d.desired) + ": " + d.reason,
         {{"event", "scale"}, {"from", have}, {"to", d.desired}, {"ready", count(ReplicaState::kReady)}, {"panic", d.panic},
          {"stable_concurrency", d.stable_concurrency}, {"panic_concurrency", d.panic_concurrency}, {"reason", d.reason}});
    remember_event(have, d.desired, d);
  }
  last_logged_ = {have, d.desired};
  if (d.desired > have) {
    for (int i = have; i < d.desired; ++i) {
      if (resume_parked(now)) {
        up_.fetch_add(1);
        continue;
      }
      if (now < next_submit_) break;  // backing off after failed starts
      try {
        auto r = std::make_shared<Replica>();
        r->job = jobs_.submit();
        r->since = now;
        r->activated = now;
        pool_.put(r);
        up_.fetch_add(1);
        last_submit_error_.clear();
      } catch (const std::exception& e) {
        submit_failures_.fetch_add(1);
        if (e.what() != last_submit_error_)  // retried every tick, said once
          log_("error", std::string("cannot submit a replica (retrying every tick): ") + e.what(), {{"event", "submit_failed"}});
        last_submit_error_ = e.what();
        break;
      }
    }
    return;
  }
  // Fewest losses first: queued jobs, then starting ones, then the least loaded ready ones.
  std::sort(live.begin(), live.end(), [](const auto& a, const auto& b) {
    if (a->state.load() != b->state.load()) return a->state.load() < b->state.load();
    return a->outstanding.load() < b->outstanding.load();
  });
  for (int i = 0; i < have - d.desired; ++i) {
    retire(*live[i], now);
    down_.fetch_add(1);
  }
}

void Controller::end_replica(Replica& r, double now, const std::string& why) {
  const bool was_ready = r.state == ReplicaState::kReady;
  if (r.state == ReplicaState::kParked) jobs_.resume(r.job);  // a stopped process cannot drain: SIGTERM after SIGCONT
  r.park = false;
  pool_.set_state(r, ReplicaState::kDraining, now);  // no new requests from here on
  ended_by_us_[r.job] = why;
  if (was_ready)
    jobs_.terminate(r.job);  // loom-serve finishes what it admitted, then the job ends
  else
    jobs_.cancel(r.job);
}

void Controller::shutdown_replicas(double wait_s) {
  for (const auto& r : pool_.all())
    if (r->state != ReplicaState::kDraining || r->park) end_replica(*r, monotonic_s(), "the controller stopped");
  const double until = monotonic_s() + wait_s;
  for (;;) {
    std::vector<JobInfo> jobs;
    try {
      jobs = jobs_.list();
    } catch (const std::exception&) {
      return;
    }
    std::vector<std::string> left;
    for (const auto& j : jobs)
      if (active_state(j.state)) left.push_back(j.id);
    if (left.empty()) return;
    if (monotonic_s() > until) {
      for (const auto& id : left) jobs_.cancel(id);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

int run_controller(ControllerOptions o, Context& ctx, const std::string& bind, int http_port, int grpc_port,
                   EventLog log, const std::function<void()>& wait_for_stop) {
  char real[PATH_MAX];
  if (::mkdir(o.state_dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw rt::Error("--state-dir " + o.state_dir + ": cannot create it: " + std::strerror(errno));
  if (!::realpath(o.state_dir.c_str(), real)) throw rt::Error("--state-dir " + o.state_dir + ": " + std::strerror(errno));
  o.state_dir = real;
  if (!::realpath(o.spec_file.c_str(), real)) throw rt::Error("--spec " + o.spec_file + ": " + std::strerror(errno));
  o.spec_file = real;
  const InferenceServiceSpec spec = load_spec(o.spec_file);
  if (!ctx.token.empty()) o.authorization = "Bearer " + ctx.token;
  ReplicaPool pool(o.replica_cap, static_cast<int>(ctx.options.request_timeout_ms) + 1000);
  pool.set_model(spec.name);
  pool.set_ready_at_zero(spec.min_replicas == 0);
  Activator activator(pool, {o.max_held_requests, o.max_held_bytes, o.activation_timeout_s});
  pool.set_activator(&activator);
  Controller c(o, spec, pool, log);
  activator.on_hold = [&c] { c.poke(); };
  pool.set_metrics_text([&c] { return c.metrics_text(); });
  ctx.status = [&c] { return c.status_json(); };
  ctx.forward = &pool;
  HttpServer http(ctx, bind, http_port);
  std::unique_ptr<GrpcRouter> grpc;
  if (grpc_port >= 0) grpc = std::make_unique<GrpcRouter>(ctx, pool, bind, grpc_port);
  ctx.ready = true;
  log("info", "controller listening: http " + bind + ":" + std::to_string(http.port()) + " grpc " +
                  (grpc ? bind + ":" + std::to_string(grpc->port()) : std::string("off")) + "; replicas as Slurm jobs " +
                  "loom-" + spec.name + ", state in " + o.state_dir,
      {{"event", "listening"}, {"http_port", http.port()}, {"grpc_port", grpc ? grpc->port() : -1}});
  announce(o, spec.name, bind, http.port(), grpc ? grpc->port() : -1, log);
  std::atomic<bool> stop{false};
  std::thread loop([&] { c.run(stop); });
  wait_for_stop();
  if (!o.services_dir.empty()) withdraw_service(o.services_dir, spec.name);
  stop = true;
  loop.join();
  log("info", "stopping: no new requests; draining the replicas", {{"event", "stopping"}});
  ctx.stopping = true;
  activator.stop();  // held requests are answered 503 now, not after the drain
  http.stop_accepting();
  if (grpc) grpc->shutdown();
  http.wait_idle();
  c.shutdown_replicas(60);
  log("info", "stopped", {{"event", "stopped"}});
  return 0;
}

}  // namespace loom::serve

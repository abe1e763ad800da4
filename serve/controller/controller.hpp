// controller.hpp — `loom-serve --controller --spec SERVICE.yaml` (Contract 9): keeps the
// InferenceService's replicas as Slurm jobs, each tick: reads squeue, health-checks what runs,
// asks the autoscaler how many it wants, submits or ends jobs, and replaces the ones that ended
// on their own. The router (the front ends with a ReplicaPool) sends requests to ready ones.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autoscaler.hpp"
#include "core/histogram.hpp"
#include "router.hpp"
#include "slurm.hpp"
#include "spec/spec.hpp"

namespace loom::serve {

struct ControllerOptions {
  std::string spec_file, state_dir, partition, replica_bind = "127.0.0.1", token_file, loom_serve;
  std::string authorization;  // "Bearer <token>" when the replicas need one (their /metrics)
  std::string services_dir;  // where it announces its service by name (services.hpp); "" for nowhere
  double tick_s = 2, stable_window_s = 60, panic_window_s = 6, scale_down_delay_s = 30;
  double pending_warn_s = 60, start_timeout_s = 300;
  // Requests held while no replica is ready (activator.hpp): for at most this long, this many.
  double activation_timeout_s = 60;
  size_t max_held_requests = 1000, max_held_bytes = 256u << 20;
  int replica_cpus = 1, replica_cap = 256;      // outstanding requests a replica is given at most
  std::vector<std::string> serve_args;          // passed on to each replica's loom-serve
};

using EventLog = std::function<void(const std::string& level, const std::string& msg, const nlohmann::json& fields)>;

class Controller {
 public:
  Controller(ControllerOptions o, const InferenceServiceSpec& spec, ReplicaPool& pool, EventLog log);
  // Runs ticks until `stop` is set; then drains: stops every replica and waits for their jobs.
  void run(const std::atomic<bool>& stop);
  // A request is held and no replica is ready: decide now rather than at the next tick.
  void poke();
  void shutdown_replicas(double wait_s);
  std::string metrics_text() const;
  // What the status page shows: the service, each replica (Slurm job, node, state, requests in
  // flight, since when), the replicas and the demand over the last hour, the last scale events.
  nlohmann::json status_json() const;

 private:
  void tick(double now);
  void observe(const std::vector<JobInfo>& jobs, double now);
  void check(Replica& r, double now);
  void scale(const ScaleDecision& d, double now);
  void end_replica(Replica& r, double now, const std::string& why);
  // Scaling down: parks the replica (drained, then its job suspended) while the warm pool has
  // room, else ends it. Scaling up: resumes a parked one (false when there is none, or Slurm
  // refused).
  void retire(Replica& r, double now);
  void park(Replica& r, double now);
  bool resume_parked(double now);
  // A replica that failed to start: the next submission waits (1, 2, 4 ... 60 s).
  void failed_start(const std::string& job, double now, const std::string& what);
  void became_ready(Replica& r, double now);
  bool preempted(const std::string& job, const std::string& state) const;
  // A replica job that ended without being asked to (state: squeue's, "" once squeue forgot it):
  // counted, logged (preempted, or lost), a failed start if it never became ready.
  void lost(const Replica& r, const std::string& state, double now);
  // STATE_DIR/prometheus-targets.json, Prometheus' file_sd format: each ready replica's address
  // with its service, Slurm job and node as labels; rewritten (atomically) when they change.
  void write_targets();
  int count(ReplicaState s) const;
  ControllerOptions o_;
  ReplicaPool& pool_;
  EventLog log_;
  SlurmJobs jobs_;
  Autoscaler scaler_;
  std::string metric_;  // concurrency or rps: what the spec's target counts per replica
  ScaleDecision last_{};
  std::map<std::string, std::string> ended_by_us_;  // job -> why (not replaced)
  bool pruned_ = false;  // replicas/ holds no file of an ended job beyond the logs kept
  static constexpr size_t kKeptReplicaLogs = 50;  // of ended replicas: why they failed
  std::atomic<uint64_t> up_{0}, down_{0}, replaced_{0}, submit_failures_{0};
  std::atomic<uint64_t> parks_{0}, resumes_{0}, preemptions_{0};
  int warm_pool_ = 0;
  bool park_refused_ = false;      // scontrol suspend was refused once: replicas are ended instead
  int failed_starts_ = 0;          // in a row
  double next_submit_ = 0;         // backoff after failed starts
  std::mutex poke_mu_;
  std::condition_variable poke_cv_;
  bool poked_ = false;
  Histogram cold_job_, cold_parked_;  // seconds from submit or resume to ready
  bool squeue_ok_ = true;
  std::pair<int, int> last_logged_{-1, -1};  // the last scale decision logged (from, to)
  std::string last_submit_error_;
  std::string service_;      // the InferenceService's name
  std::string targets_;      // what prometheus-targets.json holds
  int min_replicas_ = 0, max_replicas_ = 0;
  // The status page's memory: a sample each tick over the last hour, the last scale events.
  struct Sample {
    double t;  // Unix seconds
    int ready, replicas;
    double demand;
  };
  mutable std::mutex status_mu_;
  std::deque<Sample> history_;
  std::deque<nlohmann::json> events_;
  void remember(double demand);
  void remember_event(int from, int to, const ScaleDecision& d);
};

// Validates and runs the controller until wait_for_stop returns; then drains; returns the exit
// status. Throws ServeError (a bad spec) or rt::Error (a bad state folder, ports taken).
int run_controller(ControllerOptions o, Context& ctx, const std::string& bind, int http_port, int grpc_port,
                   EventLog log, const std::function<void()>& wait_for_stop);

}  // namespace loom::serve

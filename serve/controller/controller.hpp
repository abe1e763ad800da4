// controller.hpp — `loom-serve --controller --spec SERVICE.yaml` (Contract 9): keeps the
// InferenceService's replicas as Slurm jobs, each tick: reads squeue, health-checks what runs,
// asks the autoscaler how many it wants, submits or ends jobs, and replaces the ones that ended
// on their own. The router (the front ends with a ReplicaPool) sends requests to ready ones.
#pragma once

#include <atomic>
#include <deque>
#include <mutex>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autoscaler.hpp"
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
  int replica_cpus = 1, replica_cap = 256;      // outstanding requests a replica is given at most
  std::vector<std::string> serve_args;          // passed on to each replica's loom-serve
};

using EventLog = std::function<void(const std::string& level, const std::string& msg, const nlohmann::json& fields)>;

class Controller {
 public:
  Controller(ControllerOptions o, const InferenceServiceSpec& spec, ReplicaPool& pool, EventLog log);
  // Runs ticks until `stop` is set; then drains: stops every replica and waits for their jobs.
  void run(const std::atomic<bool>& stop);
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

// router.hpp — the controller's replicas as the router sees them: each request goes to the
// ready replica with the fewest outstanding requests, below its cap; the pool integrates
// outstanding requests over time (the autoscaler's concurrency) and counts what it refused.
// HTTP is forwarded over kept-alive connections per replica, the body as it came.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "frontend/context.hpp"
#include "replica_http.hpp"

namespace loom::serve {

// kParked: its job suspended by the controller (scontrol suspend), kept for a quick start.
enum class ReplicaState { kPending, kStarting, kReady, kDraining, kParked };
const char* state_name(ReplicaState s);

struct Replica {
  std::string job, node, reason;  // reason: Slurm's, while pending
  std::atomic<ReplicaState> state{ReplicaState::kPending};  // the router reads it without a lock
  std::atomic<double> since{0};  // when it entered its state (controller clock, s)
  std::string host;
  int http_port = 0, grpc_port = -1;
  int failed_checks = 0;
  bool warned = false;            // pending too long, reported
  bool park = false;              // draining to be parked, not ended
  double activated = -1;          // when it was submitted or resumed (for the cold-start figure)
  bool resumed = false;           // activated from parked
  std::atomic<int> outstanding{0};
  std::atomic<uint64_t> routed{0};
  // Idle kept-alive HTTP connections to the replica.
  std::mutex idle_mu;
  std::vector<std::unique_ptr<ReplicaConnection>> idle;
  ~Replica();
};

struct StreamedAnswer;
class Activator;

// What every front end of the router says when no replica can take a request now.
constexpr const char* kNoReplica = "no replica can take the request now (none ready, or every one is full)";

class ReplicaPool : public Forwarder {
 public:
  ReplicaPool(int cap_per_replica, int timeout_ms) : cap_(cap_per_replica), timeout_ms_(timeout_ms) {}
  // The controller's view, updated each tick; the router reads it.
  void put(std::shared_ptr<Replica> r);
  void remove(const std::string& job);
  std::vector<std::shared_ptr<Replica>> all() const;
  std::shared_ptr<Replica> find(const std::string& job) const;
  void set_state(Replica& r, ReplicaState s, double now);
  // The router found it unreachable: out of routing (if it was ready) until a health check passes.
  void demote(Replica& r, double now);

  // Routing: the least loaded ready replica below its cap, its count raised (release lowers it);
  // null when none is ready or all are full (counted as refused).
  std::shared_ptr<Replica> acquire();
  std::shared_ptr<Replica> try_acquire();  // the same, not counted as refused when there is none
  void release(Replica& r);
  // Requests held by the activator, counted in the concurrency (they are demand) but not begun.
  void waiting(int delta);
  // With an activator, a request that finds no replica ready waits for one (activator.hpp).
  void set_activator(Activator* a) { activator_ = a; }
  Activator* activator() const { return activator_; }
  // Since the last call: the mean of outstanding requests (concurrency) and requests begun per
  // second (rps); requests refused.
  struct Load {
    double concurrency = 0, rate = 0;
  };
  Load take_load();
  // A language model's replica: its running + waiting sequences from its /metrics
  // (loom_llm_running_sequences, loom_llm_waiting_sequences); -1 when it reports none (not a
  // generative model) or cannot be asked. `authorization`: the replicas' bearer header, or "".
  double sequences(Replica& r, int timeout_ms, const std::string& authorization);
  uint64_t take_refused();
  uint64_t rejected() const { return rejected_.load(); }
  // generate_stream answers whose replica went away before the stream's end (the client got an
  // error event, not a clean end).
  uint64_t broken_streams() const { return broken_streams_.load(); }

  // Forwarder
  Response forward_http(const std::string& method, const std::string& target,
                        const std::vector<std::pair<std::string, std::string>>& headers, const std::string& body,
                        const std::function<bool()>& client_here = {}) override;
  // Ready for health checks: a replica is, or the service scales from zero (a request is held
  // while its replica starts: a load balancer must keep sending the one that starts it).
  bool any_ready() const override;
  bool has_ready() const;  // a replica is ready now
  void set_ready_at_zero(bool v) { ready_at_zero_ = v; }
  bool serves(const std::string& model) const override { return model == model_; }
  void set_model(std::string name) { model_ = std::move(name); }
  std::string metrics_text() const override;
  void set_metrics_text(std::function<std::string()> f) { metrics_ = std::move(f); }

  // GET /v2/health/ready on the replica: whether it answers 200.
  bool health_check(Replica& r, int timeout_ms);

 private:
  void change_outstanding(int delta, bool begun);
  // A replica for one request: now, or after waiting in the activator's hold; null with the
  // refusal filled in (503, 429, or client_left).
  std::shared_ptr<Replica> route_one(size_t bytes, const std::function<bool()>& client_here, Response* refusal);
  Response forward_stream(const std::string& method, const std::string& target,
                          const std::vector<std::pair<std::string, std::string>>& headers, const std::string& body,
                          const std::function<bool()>& client_here);
  HttpExchange exchange(Replica& r, const std::string& method, const std::string& target, const Headers& headers,
                        const std::string& body);
  HttpExchange get(Replica& r, const std::string& target, const Headers& headers, int timeout_ms);
  void relay(StreamedAnswer& a, const std::string& job, const std::function<bool(const std::string&)>& send);
  int cap_, timeout_ms_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Replica>> replicas_;
  // The time integral of outstanding requests, and the requests begun, since the last take_load().
  std::mutex conc_mu_;
  int total_outstanding_ = 0;
  uint64_t begun_ = 0;
  double integral_ = 0, last_change_ = -1, window_start_ = -1;
  std::atomic<uint64_t> refused_in_window_{0}, rejected_{0}, broken_streams_{0};
  std::function<std::string()> metrics_;
  std::string model_;  // what the replicas serve (the spec's name): its own metrics label
  Activator* activator_ = nullptr;
  bool ready_at_zero_ = false;
};

// A lease on a replica: released when it goes out of scope.
class Lease {
 public:
  Lease(ReplicaPool& p, std::shared_ptr<Replica> r) : p_(p), r_(std::move(r)) {}
  ~Lease() { if (r_) p_.release(*r_); }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  Replica* operator->() const { return r_.get(); }
  explicit operator bool() const { return r_ != nullptr; }
  const std::shared_ptr<Replica>& get() const { return r_; }

 private:
  ReplicaPool& p_;
  std::shared_ptr<Replica> r_;
};

double monotonic_s();

}  // namespace loom::serve

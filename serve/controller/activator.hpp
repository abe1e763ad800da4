// activator.hpp — while no replica is ready (a service scaled to zero, its replicas replaced or
// parked), the router holds requests instead of refusing them, as Knative's activator does: in
// order, within a bound on requests and bytes, each until the activation timeout or its own
// deadline; held requests count as demand (the autoscaler starts a replica for the first one),
// and they are handed a ready replica, oldest first, the moment there is one.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/histogram.hpp"
#include "router.hpp"

namespace loom::serve {

struct HoldLimits {
  size_t max_requests = 1000;
  size_t max_bytes = 256u << 20;
  double timeout_s = 60;  // --activation-timeout-s
};

class Activator {
 public:
  // What becomes of a held request: a replica (its lease taken: release it), or none, with the
  // HTTP status to answer (503: timed out or stopping) and why.
  using Grant = std::function<void(std::shared_ptr<Replica> r, int status, const std::string& why)>;
  Activator(ReplicaPool& pool, HoldLimits limits);
  ~Activator();

  // Whether a request should wait here rather than be routed now: requests are held (they go
  // first), or no replica is ready.
  bool should_hold() const;
  // Holds a request of `bytes` until a replica takes it or `deadline` (monotonic seconds; the
  // activation timeout bounds it). Returns 0 when the hold is full (answer 429; nothing held is
  // dropped), else a ticket. `g` runs on the activator's thread.
  uint64_t hold(size_t bytes, double deadline, Grant g);
  // The client left while held: dropped. False when it was already granted or answered.
  bool cancel(uint64_t ticket);
  void wake();  // a replica became ready
  // Answers every held request 503 and holds no more (the controller is stopping).
  void stop();
  // Synchronous callers (HTTP): holds, waiting here; `client_here` is asked every 100 ms. Null
  // with *status (429, 503, or 499 when the client left) and *why when no replica came.
  std::shared_ptr<Replica> wait(size_t bytes, const std::function<bool()>& client_here, int* status, std::string* why);

  size_t held() const;
  std::string full_message() const;  // the 429's words
  const HoldLimits& limits() const { return limits_; }
  std::function<void()> on_hold;  // called when a request is held (the controller acts at once)
  // Prometheus text: held now, held in all, handed on, timed out, refused (full), left.
  std::string metrics_text() const;

 private:
  struct Held {
    uint64_t ticket;
    size_t bytes;
    double since, deadline;
    Grant grant;
  };
  void loop();
  // Under mu_: takes what can be granted or has expired off the queue, for running unlocked.
  void collect(double now, std::vector<std::pair<Held, std::shared_ptr<Replica>>>* out);
  ReplicaPool& pool_;
  HoldLimits limits_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Held> q_;
  size_t bytes_ = 0;
  uint64_t next_ = 1;
  bool stopping_ = false, kicked_ = false, quit_ = false;
  uint64_t granted_ = 0, timed_out_ = 0, full_ = 0, left_ = 0;
  Histogram waits_;  // seconds held, of the forwarded ones
  std::thread thread_;
};

}  // namespace loom::serve

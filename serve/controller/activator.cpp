// activator.cpp — activator.hpp: the held requests, a thread that hands them on in order.
#include "activator.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>

#include "loom/rt/io/prometheus.hpp"

namespace loom::serve {

namespace {
const std::vector<double> kHoldBounds{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
}  // namespace

Activator::Activator(ReplicaPool& pool, HoldLimits limits) : pool_(pool), limits_(limits) {
  waits_.bounds = kHoldBounds;
  thread_ = std::thread([this] { loop(); });
}

Activator::~Activator() {
  stop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool Activator::should_hold() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    if (!q_.empty()) return true;
  }
  return !pool_.has_ready();
}

uint64_t Activator::hold(size_t bytes, double deadline, Grant g) {
  uint64_t ticket;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_) {
      lock.unlock();
      g(nullptr, 503, "the service is stopping");
      return 0;
    }
    if (q_.size() >= limits_.max_requests || bytes_ + bytes > limits_.max_bytes) {
      ++full_;
      return 0;
    }
    const double now = monotonic_s();
    ticket = next_++;
    q_.push_back({ticket, bytes, now, std::min(deadline, now + limits_.timeout_s), std::move(g)});
    bytes_ += bytes;
    pool_.waiting(+1);  // held requests are demand (counted before the loop can hand it on)
  }
  if (on_hold) on_hold();
  cv_.notify_all();
  return ticket;
}

bool Activator::cancel(uint64_t ticket) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = std::find_if(q_.begin(), q_.end(), [&](const Held& h) { return h.ticket == ticket; });
    if (it == q_.end()) return false;
    bytes_ -= it->bytes;
    q_.erase(it);
    ++left_;
  }
  pool_.waiting(-1);
  return true;
}

void Activator::wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    kicked_ = true;
  }
  cv_.notify_all();
}

void Activator::stop() {
  std::deque<Held> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    gone.swap(q_);
    bytes_ = 0;
  }
  for (auto& h : gone) {
    pool_.waiting(-1);
    h.grant(nullptr, 503, "the service is stopping");
  }
}

std::string Activator::full_message() const {
  return "too many requests are waiting for a replica to start (" + std::to_string(limits_.max_requests) + " or " +
         std::to_string(limits_.max_bytes >> 20) + " MiB held)";
}

size_t Activator::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return q_.size();
}

void Activator::collect(double now, std::vector<std::pair<Held, std::shared_ptr<Replica>>>* out) {
  // Oldest first: the front waits for a replica; no later one passes it.
  while (!q_.empty()) {
    auto r = pool_.try_acquire();
    if (!r) break;
    granted_ += 1;
    waits_.add(now - q_.front().since);
    bytes_ -= q_.front().bytes;
    out->emplace_back(std::move(q_.front()), std::move(r));
    q_.pop_front();
  }
  for (auto it = q_.begin(); it != q_.end();) {
    if (it->deadline > now) {
      ++it;
      continue;
    }
    ++timed_out_;
    bytes_ -= it->bytes;
    out->emplace_back(std::move(*it), nullptr);
    it = q_.erase(it);
  }
}

void Activator::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!quit_) {
    // Woken by a new hold or a ready replica; meanwhile every 50 ms (a replica whose requests
    // finished has room again; deadlines pass).
    if (q_.empty()) cv_.wait(lock, [&] { return quit_ || !q_.empty(); });
    else cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return quit_ || kicked_; });
    kicked_ = false;
    std::vector<std::pair<Held, std::shared_ptr<Replica>>> done;
    collect(monotonic_s(), &done);
    if (done.empty()) continue;
    lock.unlock();
    for (auto& [h, r] : done) {
      pool_.waiting(-1);
      const double waited = std::round((h.deadline - h.since) * 1000) / 1000;
      if (r) h.grant(std::move(r), 200, "");
      else h.grant(nullptr, 503, "no replica became ready within " + rt::PrometheusText::number(waited) + " s");
    }
    lock.lock();
  }
}

std::shared_ptr<Replica> Activator::wait(size_t bytes, const std::function<bool()>& client_here, int* status, std::string* why) {
  struct Answer {
    std::shared_ptr<Replica> r;
    int status = 0;
    std::string why;
  };
  auto p = std::make_shared<std::promise<Answer>>();
  std::future<Answer> f = p->get_future();
  const uint64_t ticket = hold(bytes, monotonic_s() + limits_.timeout_s, [p](std::shared_ptr<Replica> r, int s, const std::string& w) {
    p->set_value({std::move(r), s, w});
  });
  if (ticket == 0 && f.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    *status = 429;
    *why = full_message();
    return nullptr;
  }
  while (f.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (!client_here || client_here()) continue;
    if (cancel(ticket)) {
      *status = 499;
      *why = "the client left while its request was held";
      return nullptr;
    }
  }
  Answer a = f.get();
  *status = a.status;
  *why = a.why;
  return a.r;
}

std::string Activator::metrics_text() const {
  std::lock_guard<std::mutex> lock(mu_);
  rt::PrometheusText m;
  m.single("loom_controller_held_requests", "gauge", "Requests held while no replica is ready.", static_cast<double>(q_.size()));
  m.family("loom_controller_held_total", "counter", "Requests held, by how their hold ended.");
  m.sample("loom_controller_held_total", {{"outcome", "forwarded"}}, static_cast<double>(granted_));
  m.sample("loom_controller_held_total", {{"outcome", "timed_out"}}, static_cast<double>(timed_out_));
  m.sample("loom_controller_held_total", {{"outcome", "client_left"}}, static_cast<double>(left_));
  m.single("loom_controller_hold_refused_total", "counter", "Requests refused (429) with the hold full.", static_cast<double>(full_));
  m.family("loom_controller_hold_seconds", "histogram", "How long forwarded requests were held.");
  m.histogram("loom_controller_hold_seconds", {}, waits_.bounds, waits_.counts, waits_.sum, waits_.n);
  return m.str();
}

}  // namespace loom::serve

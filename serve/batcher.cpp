// batcher.cpp — queueing, batch formation, the forward pass and the answers.
#include "batcher.hpp"

#include <cstring>
#include <future>

#include "loom/rt/tensor/kernels.hpp"
#include "metrics.hpp"

namespace loom::serve {

Batcher::Batcher(std::shared_ptr<ServedModel> model, const Options& o, Metrics* metrics)
    : model_(std::move(model)), o_(o), metrics_(metrics) {
  if (metrics_) metrics_->set_info(model_->name(), model_->version(), model_->precision());
  answer_thread_ = std::thread([this] { answer_loop(); });
  thread_ = std::thread([this] { loop(); });
}

Batcher::~Batcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();  // every admitted request computed (or timed out) ...
  {
    std::lock_guard<std::mutex> lock(answer_mu_);
    answers_done_ = true;
  }
  answer_cv_.notify_all();
  answer_thread_.join();  // ... and answered
}

void Batcher::answer_loop() {
  for (;;) {
    std::deque<std::pair<Done, Outcome>> batch;
    {
      std::unique_lock<std::mutex> lock(answer_mu_);
      answer_cv_.wait(lock, [this] { return answers_done_ || !answers_.empty(); });
      if (answers_.empty()) return;
      batch.swap(answers_);
    }
    for (auto& a : batch) a.first(std::move(a.second));
  }
}

size_t Batcher::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void Batcher::submit(std::vector<float> x, int rows, Clock::time_point deadline, Done done) {
  if (rows > o_.max_batch_size)
    throw ServeError(Status::kBadRequest, "the request has " + std::to_string(rows) + " rows; --max-batch-size is " +
                                              std::to_string(o_.max_batch_size));
  size_t n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) throw ServeError(Status::kUnavailable, "model " + model_->name() + " is being unloaded");
    if (queue_.size() >= static_cast<size_t>(o_.max_queue_size))
      throw ServeError(Status::kUnavailable, "model " + model_->name() + ": queue full (" +
                                                 std::to_string(o_.max_queue_size) + " requests waiting); retry later");
    queue_.push_back({std::move(x), rows, Clock::now(), deadline, std::move(done)});
    n = queue_.size();
  }
  if (metrics_) metrics_->set_queue(model_->name(), n);
  cv_.notify_one();
}

Batcher::Outcome Batcher::run(std::vector<float> x, int rows, Clock::time_point deadline) {
  auto p = std::make_shared<std::promise<Outcome>>();
  auto f = p->get_future();
  submit(std::move(x), rows, deadline, [p](Outcome o) { p->set_value(std::move(o)); });
  return f.get();  // the batcher answers every admitted request, timeouts included
}

void Batcher::loop() {
  rt::cpu::set_threads(o_.threads);
  std::vector<float> in, out;
  for (;;) {
    std::vector<Job> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      // Wait for more rows until the first request has waited max_queue_delay_us.
      const auto until = queue_.front().arrived + std::chrono::microseconds(o_.max_queue_delay_us);
      auto rows_queued = [this] {
        int r = 0;
        for (const auto& j : queue_) r += j.rows;
        return r;
      };
      while (!stop_ && rows_queued() < o_.max_batch_size && Clock::now() < until)
        if (cv_.wait_until(lock, until) == std::cv_status::timeout) break;
      int rows = 0;
      while (!queue_.empty() && rows + queue_.front().rows <= o_.max_batch_size) {
        rows += queue_.front().rows;
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      if (metrics_) metrics_->set_queue(model_->name(), queue_.size());
    }
    const auto start = Clock::now();
    // Requests whose deadline passed while queued are answered, not computed.
    std::vector<Job> live;
    for (auto& j : batch) {
      if (start > j.deadline) {
        Outcome o;
        o.status = Status::kTimeout;
        o.error = "request timed out after " +
                  std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(start - j.arrived).count()) +
                  " ms in the queue";
        j.done(std::move(o));
      } else {
        live.push_back(std::move(j));
      }
    }
    if (live.empty()) continue;
    int rows = 0;
    for (const auto& j : live) rows += j.rows;
    const int in_f = model_->in_features(), out_f = model_->out_features();
    in.resize(static_cast<size_t>(rows) * in_f);
    out.resize(static_cast<size_t>(rows) * out_f);
    size_t at = 0;
    for (const auto& j : live) {
      std::memcpy(in.data() + at, j.x.data(), j.x.size() * sizeof(float));
      at += j.x.size();
    }
    std::string error;
    try {
      model_->forward(in.data(), rows, out.data());
    } catch (const std::exception& e) {
      error = e.what();
    }
    const auto end = Clock::now();
    const double compute = std::chrono::duration<double>(end - start).count();
    at = 0;
    bool first = true;
    for (auto& j : live) {
      Outcome o;
      o.queue_s = std::chrono::duration<double>(start - j.arrived).count();
      o.compute_s = compute;
      o.batch_rows = rows;
      if (!error.empty()) {
        o.status = Status::kInternal;
        o.error = "inference failed: " + error;
      } else {
        o.out.assign(out.begin() + static_cast<std::ptrdiff_t>(at), out.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(j.rows) * out_f));
      }
      at += static_cast<size_t>(j.rows) * out_f;
      if (metrics_) metrics_->observe(model_->name(), o.queue_s, compute, rows, first);
      first = false;
      std::lock_guard<std::mutex> lock(answer_mu_);
      answers_.emplace_back(std::move(j.done), std::move(o));
    }
    answer_cv_.notify_one();
  }
}

}  // namespace loom::serve

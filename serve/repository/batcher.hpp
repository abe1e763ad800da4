// batcher.hpp — the dynamic batcher of one model version: requests queue, batches form and
// run on one thread per instance of the model, and answers go back on a thread of their own.
// A request that finds the queue empty and an instance idle, for a model whose passes are too
// short for batching to pay, runs at once on the caller's thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/options.hpp"
#include "core/stats.hpp"
#include "core/status.hpp"
#include "model_config.pb.h"
#include "repository/model.hpp"

namespace loom::serve {

class Metrics;

// How long a batch may wait for more rows when no delay is set: a tenth of the last batch's forward
// pass when that batch held more than one row (its clients come back together), else none.
Clock::duration adaptive_wait(int last_rows, Clock::duration last_compute);

// Forms batches of up to max_batch_size rows, waiting at most max_queue_delay_us after the
// first request of a batch (less once a preferred batch size has queued; with no delay, only
// for the clients the last batch answered, see take_batch), runs them through the
// model, one thread per instance (Triton's instance_group count: batches run side by side), and
// hands each request its rows. The queue is bounded: submit() refuses at once when it is full.
class Batcher {
 public:
  struct Outcome {
    Status status = Status::kOk;
    std::string error;
    std::vector<rt::Tensor> outputs;  // the model's outputs, this request's rows
    double queue_s = 0, compute_s = 0;
    int batch_rows = 0;
  };
  using Done = std::function<void(Outcome)>;
  // `instances`: copies of one model version (at least one); `config`: what it runs with, as
  // the model_configuration extension reports it.
  Batcher(std::vector<std::shared_ptr<ServedModel>> instances, const Options& o, Metrics* metrics,
          inference::ModelConfig config = {});
  ~Batcher();  // drains: every admitted request gets its answer
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;
  // Throws ServeError kUnavailable (queue full, or stopping) or kInput (too many rows).
  // `x`: the model's inputs as ServedModel::decode gives them, `rows` the request's rows.
  void submit(std::vector<rt::Tensor> x, int rows, Clock::time_point deadline, Done done);
  // Blocking convenience for the synchronous front ends.
  Outcome run(std::vector<rt::Tensor> x, int rows, Clock::time_point deadline);
  size_t queued() const;
  const ServedModel& model() const { return *instances_[0]; }
  const inference::ModelConfig& config() const { return config_; }
  int max_rows() const { return o_.max_batch_size; }  // the rows a request or a batch may hold
  ModelStats& stats() { return stats_; }

 private:
  struct Job {
    std::vector<rt::Tensor> x;
    int rows;
    Clock::time_point arrived, deadline;
    Done done;
  };
  void loop(size_t instance);
  bool run_now(Job& job, std::unique_lock<std::mutex>& lock);
  bool expired(Job& j, Clock::time_point start);
  size_t idle_instance() const;
  std::vector<Job> take_batch(std::unique_lock<std::mutex>& lock);
  bool enough(int rows) const;
  // One forward pass over `live`; each request is answered on the answer thread, or, with
  // `answers`, its outcome is left there for the caller to answer.
  void compute(ServedModel& model, std::vector<Job>& live, Clock::time_point start, std::vector<Outcome>* answers = nullptr);
  void answer_loop();
  std::vector<std::shared_ptr<ServedModel>> instances_;
  Options o_;
  Metrics* metrics_;
  inference::ModelConfig config_;
  ModelStats stats_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  int last_rows_ = 0;                // the last batch's rows and forward pass (the adaptive wait)
  Clock::duration last_compute_{};
  std::vector<char> busy_;           // instance i computing (its thread's batch, or a caller's request)
  std::vector<std::thread> threads_;
  // Answers go out on a thread of their own: sending responses (gRPC may write inline) does
  // not hold up the next batch's forward pass.
  std::mutex answer_mu_;
  std::condition_variable answer_cv_;
  std::deque<std::pair<Done, Outcome>> answers_;
  bool answers_done_ = false;
  std::thread answer_thread_;
};

}  // namespace loom::serve

// batcher.cpp — queueing, batch formation, the forward pass and the answers.
#include "repository/batcher.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <future>
#include <stdexcept>

#include "core/compute_pool.hpp"
#include "core/metrics.hpp"

namespace loom::serve {

Batcher::Batcher(std::vector<std::shared_ptr<ServedModel>> instances, const Options& o, Metrics* metrics,
                 inference::ModelConfig config)
    : instances_(std::move(instances)), o_(o), metrics_(metrics), config_(std::move(config)) {
  if (instances_.empty()) throw std::logic_error("a batcher needs a model");
  if (metrics_) metrics_->set_info(model().name(), model().version(), model().precision());
  answer_thread_ = std::thread([this] { answer_loop(); });
  ComputePool::shared().reserve(static_cast<int>(instances_.size()));
  busy_.assign(instances_.size(), 0);
  for (size_t i = 0; i < instances_.size(); ++i) threads_.emplace_back([this, i] { loop(i); });
}

Batcher::~Batcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();  // every admitted request computed (or timed out) ...
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

void Batcher::submit(std::vector<rt::Tensor> x, int rows, Clock::time_point deadline, Done done) {
  if (rows > o_.max_batch_size)
    throw ServeError(Status::kInput, too_many_rows(rows, o_.max_batch_size));
  size_t n;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stop_) throw ServeError(Status::kUnavailable, "model " + model().name() + " is being unloaded");
    if (queue_.size() >= static_cast<size_t>(o_.max_queue_size))
      throw ServeError(Status::kUnavailable, "model " + model().name() + ": queue full (" +
                                                 std::to_string(o_.max_queue_size) + " requests waiting); retry later");
    Job job{std::move(x), rows, Clock::now(), deadline, std::move(done)};
    if (run_now(job, lock)) return;
    queue_.push_back(std::move(job));
    n = queue_.size();
  }
  if (metrics_) metrics_->set_queue(model().name(), n);
  cv_.notify_one();
}

// A pass shorter than this runs on the caller's thread when nothing waits: handing a request to
// the batch thread and its answer back costs about as much (tens of microseconds on a loaded
// 2-core machine), and a tiny model's batches held one or two requests anyway.
constexpr auto kDirectPass = std::chrono::microseconds(50);

// With mu_ held: the first idle instance, or instances_.size().
size_t Batcher::idle_instance() const {
  return static_cast<size_t>(std::find(busy_.begin(), busy_.end(), 0) - busy_.begin());
}

// With `lock` held: runs `job` now and answers it here when nothing is queued, an instance is idle
// and the model's last pass was short enough, and returns true with `lock` released; false
// (nothing done, `lock` held) otherwise. A set delay (the operator asked for batches) never does.
bool Batcher::run_now(Job& job, std::unique_lock<std::mutex>& lock) {
  const size_t i = idle_instance();
  if (o_.max_queue_delay_us != 0 || !queue_.empty() || i == busy_.size() || last_compute_ >= kDirectPass) return false;
  busy_[i] = 1;
  lock.unlock();
  const auto start = Clock::now();
  std::vector<Job> live;
  std::vector<Outcome> outcomes;
  if (!expired(job, start)) {
    live.push_back(std::move(job));
    compute(*instances_[i], live, start, &outcomes);
  }
  lock.lock();
  busy_[i] = 0;
  if (!queue_.empty()) cv_.notify_all();  // what queued meanwhile waits for this instance
  lock.unlock();  // the answer (gRPC may write it inline) holds neither the lock nor the instance
  for (size_t k = 0; k < live.size(); ++k) live[k].done(std::move(outcomes[k]));
  return true;
}

Batcher::Outcome Batcher::run(std::vector<rt::Tensor> x, int rows, Clock::time_point deadline) {
  auto p = std::make_shared<std::promise<Outcome>>();
  auto f = p->get_future();
  submit(std::move(x), rows, deadline, [p](Outcome o) { p->set_value(std::move(o)); });
  return f.get();  // the batcher answers every admitted request, timeouts included
}

namespace {

uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return static_cast<uint64_t>(std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count()));
}

// Requests join one batch when every input agrees beyond dimension 0 (a BERT's sequence length).
bool joinable(const std::vector<rt::Tensor>& a, const std::vector<rt::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    const auto &sa = a[k].shape(), &sb = b[k].shape();
    if (sa.size() != sb.size() || sa.empty() || !std::equal(sa.begin() + 1, sa.end(), sb.begin() + 1)) return false;
  }
  return true;
}

// The requests' input k stacked along dimension 0.
rt::Tensor stack(const std::vector<std::vector<rt::Tensor>*>& xs, size_t k, int rows) {
  std::vector<int64_t> shape = (*xs[0])[k].shape();
  shape[0] = rows;
  rt::Tensor t = rt::Tensor::empty(shape, (*xs[0])[k].dtype());
  size_t at = 0;
  for (auto* x : xs) {
    const rt::Tensor& part = (*x)[k];
    std::memcpy(t.data<char>() + at, part.data<char>(), part.bytes());
    at += part.bytes();
  }
  return t;
}

}  // namespace

Clock::duration adaptive_wait(int last_rows, Clock::duration last_compute) {
  return last_rows > 1 ? last_compute / 10 : Clock::duration::zero();
}

// The wait for more rows can end: the batch is full, or holds a preferred batch size.
bool Batcher::enough(int rows) const {
  return rows >= o_.max_batch_size ||
         std::find(o_.preferred_batch_sizes.begin(), o_.preferred_batch_sizes.end(), rows) != o_.preferred_batch_sizes.end();
}

// With the lock held: waits up to max_queue_delay_us for rows, then takes the requests that
// fit one batch (those that can join the first, in order; the rest stay queued). Empty when
// another instance took the queue meanwhile.
//
// With no delay set (the default, Triton's 0) it waits only where waiting pays: clients answered
// together by the last batch come back together, so while fewer rows are queued than that batch
// held, it waits for them, at most a tenth of that batch's compute time. One client (a batch of
// one) never waits; at concurrency 8 on a BERT, batches of 1 and 7 in turn became batches of 8.
std::vector<Batcher::Job> Batcher::take_batch(std::unique_lock<std::mutex>& lock) {
  auto until = queue_.front().arrived + std::chrono::microseconds(o_.max_queue_delay_us);
  if (o_.max_queue_delay_us == 0) until = Clock::now() + adaptive_wait(last_rows_, last_compute_);
  auto rows_queued = [this] {
    int r = 0;
    for (const auto& j : queue_) r += j.rows;
    return r;
  };
  const bool batched = model().batched();
  const int want = o_.max_queue_delay_us == 0 ? std::min(last_rows_, o_.max_batch_size) : o_.max_batch_size;
  while (batched && !stop_ && !queue_.empty() && rows_queued() < want && !enough(rows_queued()) && Clock::now() < until)
    if (cv_.wait_until(lock, until) == std::cv_status::timeout) break;
  std::vector<Job> batch;
  if (queue_.empty()) return batch;
  batch.push_back(std::move(queue_.front()));
  queue_.pop_front();
  int rows = batch[0].rows;
  for (auto it = queue_.begin(); batched && it != queue_.end() && rows < o_.max_batch_size;) {
    if (rows + it->rows <= o_.max_batch_size && joinable(batch[0].x, it->x)) {
      rows += it->rows;
      batch.push_back(std::move(*it));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  return batch;
}

void Batcher::loop(size_t instance) {
  ServedModel& model = *instances_[instance];
  for (;;) {
    std::vector<Job> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return (stop_ || !queue_.empty()) && !busy_[instance]; });
      if (queue_.empty()) return;  // stopping, nothing left
      batch = take_batch(lock);
      if (batch.empty()) continue;
      busy_[instance] = 1;
      if (metrics_) metrics_->set_queue(model.name(), queue_.size());
    }
    const auto start = Clock::now();
    std::vector<Job> live;
    for (auto& j : batch)
      if (!expired(j, start)) live.push_back(std::move(j));
    if (!live.empty()) compute(model, live, start);
    std::lock_guard<std::mutex> lock(mu_);
    busy_[instance] = 0;
  }
}

// A request whose deadline passed while queued is answered, not computed: true when `j` was.
bool Batcher::expired(Job& j, Clock::time_point start) {
  if (start <= j.deadline) return false;
  Outcome o;
  o.status = Status::kTimeout;
  o.error = "request timed out after " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(start - j.arrived).count()) + " ms in the queue";
  stats_.answered(false, 0, ns_between(j.arrived, start));
  j.done(std::move(o));
  return true;
}

// One forward pass over the live requests; each gets its rows of every output (views of the
// batch's outputs, no copies).
void Batcher::compute(ServedModel& model, std::vector<Job>& live, Clock::time_point start, std::vector<Outcome>* answers) {
  int rows = 0;
  for (auto& j : live) rows += j.rows;
  std::string error;
  Status failed = Status::kInternal;
  std::vector<rt::Tensor> outs;
  Clock::time_point stacked = start, inferred = start;
  try {
    std::vector<rt::Tensor> joined;  // a lone request's inputs are the batch's as they are
    if (live.size() > 1) {
      std::vector<std::vector<rt::Tensor>*> xs;
      for (auto& j : live) xs.push_back(&j.x);
      for (size_t k = 0; k < live[0].x.size(); ++k) joined.push_back(stack(xs, k, rows));
      stacked = Clock::now();
    }
    const std::vector<rt::Tensor>& in = live.size() > 1 ? joined : live[0].x;
    auto pass = [&] { outs = model.forward(in); };
    ComputePool::shared().run(std::ref(pass), o_.threads);  // by reference: no std::function on the heap
    inferred = Clock::now();
    if (model.batched() && live.size() > 1)
      for (const auto& o : outs)
        if (o.ndim() == 0 || o.dim(0) != rows)
          throw rt::Error("an output has " + o.shape_str() + " for a batch of " + std::to_string(rows) + " rows");
  } catch (const loom::Error& e) {  // by its kind: what the request's data made an operator refuse is a 400
    error = e.what();
    failed = e.kind();
  } catch (const std::exception& e) {
    error = e.what();
  }
  const double compute = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<Outcome> outcomes;
  int64_t at = 0;
  for (auto& j : live) {
    Outcome o;
    o.queue_s = std::chrono::duration<double>(start - j.arrived).count();
    o.compute_s = compute;
    o.batch_rows = rows;
    if (!error.empty()) {
      o.status = failed;
      o.error = "inference failed: " + error;
    } else if (live.size() == 1) {
      o.outputs = std::move(outs);
    } else {
      for (const auto& t : outs) o.outputs.push_back(t.rows(at, at + j.rows));
    }
    at += j.rows;
    outcomes.push_back(std::move(o));
  }
  const auto end = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_rows_ = rows;
    last_compute_ = inferred - stacked;
  }
  if (error.empty())
    stats_.executed(rows, static_cast<int>(live.size()), ns_between(start, stacked), ns_between(stacked, inferred), ns_between(inferred, end));
  for (size_t i = 0; i < live.size(); ++i) {
    Job& j = live[i];
    stats_.answered(error.empty(), ns_between(j.arrived, start), ns_between(j.arrived, end));
    if (metrics_) metrics_->observe(model.name(), outcomes[i].queue_s, compute, rows, i == 0);
  }
  if (answers) {
    *answers = std::move(outcomes);
    return;
  }
  std::lock_guard<std::mutex> lock(answer_mu_);
  for (size_t i = 0; i < live.size(); ++i) answers_.emplace_back(std::move(live[i].done), std::move(outcomes[i]));
  answer_cv_.notify_one();
}

}  // namespace loom::serve

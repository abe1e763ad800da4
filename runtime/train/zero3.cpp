// zero3.cpp — fully sharded data parallelism: gathers before each layer, reduce-scatters after
// its backward, the sharded step (zero3.hpp).
#include "loom/rt/train/zero3.hpp"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "loom/rt/error.hpp"
#include "loom/rt/tensor/ops.hpp"

namespace loom::rt {

// One thread that runs the posted collectives in order: the transport is driven by one thread at
// a time (Transport::thread_serialized), and every rank posts the same collectives in the same
// order, so they match.
class Zero3::Queue {
 public:
  Queue() : thread_([this] { loop(); }) {}
  ~Queue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  std::shared_future<void> post(std::function<void()> job) {
    std::packaged_task<void()> task(std::move(job));
    std::shared_future<void> done = task.get_future().share();
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(task));
    }
    cv_.notify_all();
    return done;
  }

 private:
  void loop() {
    for (;;) {
      std::packaged_task<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();  // an exception stays in the job's future
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

Zero3::Zero3(Communicator& comm, Device device, bool half_grads) : comm_(comm), device_(device), half_(half_grads) {}

std::vector<size_t> Zero3::shard_counts(size_t n, const std::vector<double>& weights) {
  double total = 0;
  for (double w : weights) total += w;
  std::vector<size_t> counts(weights.size());
  std::vector<double> rest(weights.size());
  size_t given = 0;
  for (size_t r = 0; r < weights.size(); ++r) {
    const double exact = static_cast<double>(n) * weights[r] / total;
    counts[r] = static_cast<size_t>(std::floor(exact));
    rest[r] = exact - static_cast<double>(counts[r]);
    given += counts[r];
  }
  std::vector<size_t> order(weights.size());
  for (size_t r = 0; r < order.size(); ++r) order[r] = r;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rest[a] > rest[b]; });
  for (size_t k = 0; given < n && k < order.size(); ++k, ++given) ++counts[order[k]];
  return counts;
}

void Zero3::gather_flat(float* data, const Group& g) {
  if (g.counts.empty()) comm_.allgather_chunks(data, g.n);
  else comm_.allgather_v(data, g.counts);
}

void Zero3::reduce_flat(float* data, const Group& g) {
  size_t begin = g.begin, count = g.count;
  if (!g.counts.empty()) comm_.reduce_scatter_sum_v(data, g.counts);
  else if (half_) comm_.reduce_scatter_sum_half(data, g.n, &begin, &count);
  else comm_.reduce_scatter_sum(data, g.n, &begin, &count);
  if (begin != g.begin || count != g.count) throw Error("--zero 3: the reduce-scatter's chunk is not this rank's shard");
}

Zero3::~Zero3() {
  queue_.reset();  // the thread finishes what was posted before the buffers go
}

// One group's chunk of the whole values (and of the restored moments, when `restored`).
Zero3::Group Zero3::take_chunk(const ParamGroup& pg, const std::vector<Param>& ps, const Optimizer& opt, bool restored) const {
  const bool adam = opt.keeps_second_moment();
  Group g;
  g.first = pg.first;
  g.end = pg.end;
  for (size_t i = g.first; i < g.end; ++i) g.n += static_cast<size_t>(ps[i].value.numel());
  if (weights_.empty()) {
    comm_.own_chunk(g.n, &g.begin, &g.count);
  } else {
    g.counts = shard_counts(g.n, weights_);
    const size_t me = static_cast<size_t>(comm_.rank());
    for (size_t r = 0; r < me; ++r) g.begin += g.counts[r];
    g.count = g.counts[me];
  }
  const std::vector<int64_t> chunk{static_cast<int64_t>(g.count)};  // tensors: the caching allocator
  g.w = Tensor::empty(chunk);                                     // reuses what the values free
  g.g = Tensor::zeros(chunk);
  g.m = Tensor::zeros(chunk);
  if (adam) g.v = Tensor::zeros(chunk);
  size_t at = 0;  // the piece of each parameter that falls in [begin, begin + count)
  for (size_t i = g.first; i < g.end; ++i) {
    const size_t numel = static_cast<size_t>(ps[i].value.numel());
    const size_t lo = std::max(at, g.begin), hi = std::min(at + numel, g.begin + g.count);
    auto take = [&](const Tensor& t, Tensor* out) {
      const Tensor h = t.device() == Device::kCpu ? t : t.to(Device::kCpu);
      std::copy_n(h.f32() + (lo - at), hi - lo, out->f32() + (lo - g.begin));
    };
    if (lo < hi) {
      take(ps[i].value, &g.w);
      if (restored) take(opt.first_moments()[i], &g.m);
      if (restored && adam) take(opt.second_moments()[i], &g.v);
    }
    at += numel;
  }
  return g;
}

void Zero3::shard(Task& task, Optimizer& opt) {
  if (!comm_.thread_serialized())
    throw Error("--zero 3 gathers the next layer on a second thread: this MPI has no MPI_THREAD_SERIALIZED");
  std::vector<Param>& ps = task.params();
  const bool restored = opt.first_moments().size() == ps.size() &&
                        (!opt.keeps_second_moment() || opt.second_moments().size() == ps.size());
  size_t next = 0;
  for (const ParamGroup& pg : task.param_groups()) {
    if (pg.first != next || pg.end <= pg.first || pg.end > ps.size())
      throw Error("--zero 3: the model's parameter groups do not cover its parameters in order");
    next = pg.end;
    groups_.push_back(take_chunk(pg, ps, opt, restored));
    for (size_t i = pg.first; i < pg.end; ++i) {  // the shapes stay here; the storage goes, group by group
      shapes_.push_back(ps[i].value.shape());
      ps[i].value = Tensor();
      ps[i].grad = Tensor();
    }
  }
  if (next != ps.size()) throw Error("--zero 3: the model's parameter groups do not cover its parameters");
  opt.restore({}, {}, opt.steps());  // the whole moments are not kept twice
  params_ = &ps;
  queue_ = std::make_unique<Queue>();
  task.set_param_gate(this);
}

void Zero3::set_precision(std::function<void(float*, int64_t)> round, std::function<void(size_t)> pass) {
  round_ = std::move(round);
  pass_ = std::move(pass);
}

void Zero3::check_group(size_t group) const {
  if (group >= groups_.size())
    throw Error("--zero 3: the model used parameter group " + std::to_string(group) + " of " + std::to_string(groups_.size()));
}

// This rank's chunk into a fresh whole buffer, then the allgather on the communication thread.
void Zero3::post_gather(Group& g) {
  if (g.gathered.valid()) return;
  g.whole = buffer(g.n);
  std::copy_n(g.w.f32(), g.count, g.whole.f32() + g.begin);
  float* data = g.whole.f32();
  const Group* gp = &g;
  g.gathered = queue_->post([this, data, gp] { gather_flat(data, *gp); });
  sent_ += g.n * sizeof(float);
}

// The parameters take the gathered values: views of the buffer on the CPU, copies on a GPU.
void Zero3::bind(Group& g, bool round) {
  if (g.bound) return;
  g.gathered.get();  // rethrows the gather's error
  std::vector<Param>& ps = *params_;
  int64_t at = 0;
  if (round && round_) round_(g.whole.f32(), static_cast<int64_t>(g.n));
  for (size_t i = g.first; i < g.end; ++i) {
    const std::vector<int64_t>& shape = shapes_[i];
    const int64_t numel = checked_numel(shape);
    if (device_ == Device::kCpu) {
      ps[i].value = g.whole.rows(at, at + numel).reshape(shape);
    } else {
      ps[i].value = Tensor::empty(shape, DType::kF32, device_);
      ops::upload(device_, ps[i].value.f32(), g.whole.f32() + at, static_cast<size_t>(numel) * sizeof(float));
    }
    at += numel;
  }
  if (device_ != Device::kCpu) recycle(std::move(g.whole));  // the device holds them now
  g.bound = true;
}

void Zero3::alloc_grads(Group& g) {
  std::vector<Param>& ps = *params_;
  if (device_ == Device::kCpu) g.grads = buffer(g.n);  // backward overwrites them
  int64_t at = 0;
  for (size_t i = g.first; i < g.end; ++i) {
    const int64_t numel = checked_numel(shapes_[i]);
    ps[i].grad = device_ == Device::kCpu ? g.grads.rows(at, at + numel).reshape(shapes_[i])
                                         : Tensor::zeros(shapes_[i], DType::kF32, device_);
    at += numel;
  }
}

// The group's gradients (through the precision pass) reduce-scattered on the communication
// thread; this rank's chunk lands in its reduced gradient. The whole gradients go with the job.
void Zero3::reduce_grads(Group& g) {
  std::vector<Param>& ps = *params_;
  if (pass_)
    for (size_t i = g.first; i < g.end; ++i) pass_(i);
  Tensor flat = g.grads;
  if (device_ != Device::kCpu) {
    flat = buffer(g.n);
    int64_t at = 0;
    for (size_t i = g.first; i < g.end; ++i) {
      const int64_t numel = ps[i].grad.numel();
      ops::download(device_, flat.f32() + at, ps[i].grad.f32(), static_cast<size_t>(numel) * sizeof(float));
      at += numel;
    }
  }
  for (size_t i = g.first; i < g.end; ++i) ps[i].grad = Tensor();
  g.grads = Tensor();
  Group* gp = &g;
  // The job lets the whole gradients go once its chunk is out: its future (kept until
  // finish_backward) holds the job itself.
  reducing_.push_back(queue_->post([this, flat, gp]() mutable {
    reduce_flat(flat.f32(), *gp);
    std::copy_n(flat.f32() + gp->begin, gp->count, gp->g.f32());
    recycle(std::move(flat));
  }));
  sent_ += g.n * (half_ && g.counts.empty() ? 2 : sizeof(float));
}

Tensor Zero3::buffer(size_t n) {
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    for (auto it = spare_.begin(); it != spare_.end(); ++it)
      if (static_cast<size_t>(it->numel()) == n) {
        Tensor t = std::move(*it);
        spare_.erase(it);
        return t;
      }
  }
  return Tensor::empty({static_cast<int64_t>(n)});
}

void Zero3::recycle(Tensor t) {
  if (!t.sole()) return;
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (spare_.size() < kSpares) spare_.push_back(std::move(t));
}

void Zero3::release(Group& g) {
  for (size_t i = g.first; i < g.end; ++i) (*params_)[i].value = Tensor();
  recycle(std::move(g.whole));
  g.whole = Tensor();
  g.gathered = {};
  g.bound = false;
}

void Zero3::enter(size_t group, bool backward) {
  check_group(group);
  Group& g = groups_[group];
  if (!all_) {
    post_gather(g);
    const size_t next = backward ? group - 1 : group + 1;  // the layer after this one: prefetched
    if (backward ? group > 0 : group + 1 < groups_.size()) post_gather(groups_[next]);
    bind(g, true);
  }
  if (backward) alloc_grads(g);
}

void Zero3::leave(size_t group, bool backward) {
  check_group(group);
  Group& g = groups_[group];
  if (backward) reduce_grads(g);
  if (all_ || (!backward && group + 1 == groups_.size())) return;  // the head's: backward starts there
  release(g);
}

void Zero3::finish_backward() {
  std::vector<std::shared_future<void>> pending;
  pending.swap(reducing_);
  for (auto& f : pending) f.get();
}

void Zero3::step(Optimizer& opt, float lr, float clip) {
  finish_backward();
  if (clip > 0) {  // torch's clip_grad_norm_ over every rank's chunks
    double sq = 0;
    for (const Group& g : groups_)
      for (size_t k = 0; k < g.count; ++k) sq += static_cast<double>(g.g.f32()[k]) * g.g.f32()[k];
    float total = static_cast<float>(sq);
    comm_.allreduce_sum(&total, 1);
    const float norm = std::sqrt(total);
    if (norm > clip)
      for (Group& g : groups_) ops::scale_copy(Device::kCpu, g.g.f32(), g.g.f32(), clip / (norm + 1e-6f), static_cast<int64_t>(g.count));
  }
  std::vector<Optimizer::Span> spans;
  for (Group& g : groups_)
    spans.push_back({g.w.f32(), g.g.f32(), g.m.f32(), g.v.defined() ? g.v.f32() : nullptr, static_cast<int64_t>(g.count)});
  opt.step_spans(spans, lr);
}

void Zero3::gather_all(bool keep) {
  finish_backward();
  for (Group& g : groups_) {  // one group at a time: a rank that keeps nothing holds one
    post_gather(g);
    bind(g, false);  // the fp32 masters, as a checkpoint or an evaluation wants them
    if (!keep) release(g);
  }
  all_ = true;
}

void Zero3::release_all() {
  all_ = false;
  for (Group& g : groups_) release(g);
}

void Zero3::gather_moments(const Optimizer& opt, std::vector<Tensor>* m, std::vector<Tensor>* v) {
  finish_backward();
  m->clear();
  v->clear();
  const bool adam = opt.keeps_second_moment();
  for (int which = 0; which < (adam ? 2 : 1); ++which) {
    std::vector<Tensor>& out = which == 0 ? *m : *v;
    for (Group& g : groups_) {
      Tensor flat = Tensor::zeros({static_cast<int64_t>(g.n)});
      std::copy_n((which == 0 ? g.m : g.v).f32(), g.count, flat.f32() + g.begin);
      queue_->post([this, &flat, &g] { gather_flat(flat.f32(), g); }).get();
      int64_t at = 0;
      for (size_t i = g.first; i < g.end; ++i) {
        const int64_t numel = checked_numel(shapes_[i]);
        out.push_back(flat.rows(at, at + numel).reshape(shapes_[i]).clone());
        at += numel;
      }
    }
  }
}

size_t Zero3::param_bytes() const {
  size_t n = 0;
  for (const Group& g : groups_) n += g.count * sizeof(float);
  return n;
}

size_t Zero3::grad_bytes() const {
  size_t n = 0;
  for (const Group& g : groups_) n += g.count * sizeof(float);
  return n;
}

size_t Zero3::optimizer_bytes() const {
  size_t n = 0;
  for (const Group& g : groups_) n += (g.v.defined() ? 2 : 1) * g.count * sizeof(float);
  return n;
}

}  // namespace loom::rt

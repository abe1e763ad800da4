// grad_exchange.cpp — the gradient exchange: buckets summed as backward fills them, on the
// communication thread (PowerSGD's compression is powersgd.cpp's).
#include "loom/rt/comm/grad_exchange.hpp"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/ops.hpp"
#if defined(LOOM_HAVE_NCCL) && defined(LOOM_HAVE_MPI)
#include <cstring>

#include "loom/rt/comm/comm_nccl.hpp"
#endif

namespace loom::rt {

CompressConfig parse_grad_compress(const std::string& text) {
  CompressConfig c;
  auto colon = text.find(':');
  c.kind = text.substr(0, colon);
  if (c.kind != "none" && c.kind != "fp16" && c.kind != "powersgd")
    throw Error("--grad-compress must be none, fp16 or powersgd[:rank=R,start=S], not '" + text + "'");
  if (colon == std::string::npos) return c;
  if (c.kind != "powersgd") throw Error("--grad-compress " + c.kind + " takes no parameters");
  std::stringstream ss(text.substr(colon + 1));
  std::string kv;
  while (std::getline(ss, kv, ',')) {
    auto eq = kv.find('=');
    std::string k = kv.substr(0, eq), v = eq == std::string::npos ? "" : kv.substr(eq + 1);
    if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 9)
      throw Error("--grad-compress: '" + kv + "' needs a non-negative integer value");
    if (k == "rank") c.rank = std::stoi(v);
    else if (k == "start") c.start = std::stoll(v);
    else throw Error("--grad-compress: unknown parameter '" + k + "' (rank, start)");
  }
  if (c.rank <= 0) throw Error("--grad-compress: rank must be positive");
  return c;
}

std::unique_ptr<DeviceCollectives> gpu_collectives(Communicator& comm, double timeout_s, bool powersgd, std::string* why) {
#if defined(LOOM_HAVE_NCCL) && defined(LOOM_HAVE_MPI)
  if (std::strcmp(comm.backend(), "mpi") != 0) {
    *why = std::string("the ranks are not MPI processes (") + comm.backend() + "): NCCL's id travels through MPI";
    return nullptr;
  }
  if (powersgd) {
    *why = "PowerSGD sums its small P and Q factors over the host transport in this build";
    return nullptr;
  }
  *why = NcclCommunicator::shared_gpu();
  if (!why->empty()) {
    *why += ", and NCCL refuses two ranks on one GPU";
    return nullptr;
  }
  return NcclCommunicator::create(timeout_s);
#else
  (void)comm;
  (void)timeout_s;
  (void)powersgd;
  *why = "this build of Loom has no NCCL (configure found no nccl.h, or no MPI to pass its id)";
  return nullptr;
#endif
}

GradExchange::GradExchange(CompressConfig c, double bucket_mb) : c_(std::move(c)) {
  if (!(bucket_mb >= 0) || bucket_mb > 4096) throw Error("--bucket-mb must be between 0 and 4096");
  bucket_bytes_ = static_cast<size_t>(bucket_mb * 1048576.0);
}

GradExchange::~GradExchange() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  try {
    drop_marks();
    for (auto& b : buckets_)
      if (b.pinned) ops::unpin(dev_, b.buf.data());
  } catch (const std::exception&) {  // the device is already gone: nothing left to give back
  }
}

void GradExchange::set_device_comm(DeviceCollectives* dc) {
  if (planned_) throw Error("GradExchange::set_device_comm after the first step");
  if (dc && c_.kind == "powersgd") throw Error("gradients summed on the device: plain or fp16 only, not PowerSGD");
  dev_comm_ = dc;
}

void GradExchange::drop_marks() {
  for (auto& b : buckets_) {
    ops::release_mark(dev_, b.ready_mark);
    ops::release_mark(dev_, b.landed_mark);
    b.ready_mark = b.landed_mark = nullptr;
  }
}

void GradExchange::plan(const std::vector<Param>& params) {
  // Buckets in reverse parameter order: backward finishes the last layer's gradients first.
  const size_t limit = overlaps() ? bucket_bytes_ : SIZE_MAX;
  bucket_of_.assign(params.size(), 0);
  for (size_t k = params.size(); k-- > 0;) {
    const size_t n = static_cast<size_t>(params[k].grad.numel());
    if (buckets_.empty() || (buckets_.back().floats > 0 && (buckets_.back().floats + n) * sizeof(float) > limit))
      buckets_.emplace_back();
    buckets_.back().params.push_back(k);
    buckets_.back().floats += n;
    bucket_of_[k] = buckets_.size() - 1;
    grad_bytes_ += n * sizeof(float);
  }
  int64_t scratch_floats = 0;  // PowerSGD: P and Q of the largest matrix, beside the gradients
  for (size_t i = 0; i < params.size() && c_.kind == "powersgd"; ++i) {
    const Tensor& g = params[i].grad;
    const int64_t r = c_.rank;
    // Sent as P [rows, r] and Q [cols, r]: only worth it when that halves the size at least.
    if (g.ndim() == 2 && g.numel() >= 2 * (g.dim(0) + g.dim(1)) * r) {
      Matrix m{i, static_cast<int>(g.dim(0)), static_cast<int>(g.dim(1)), {}, {}};
      std::mt19937 rng(1234 + static_cast<unsigned>(i));  // the same Q on every rank
      std::normal_distribution<float> nd;
      m.q.resize(static_cast<size_t>(m.cols) * static_cast<size_t>(r));
      for (auto& v : m.q) v = nd(rng);
      m.error = Tensor::zeros({g.numel()}, DType::kF32, g.device());
      scratch_floats = std::max(scratch_floats, (g.dim(0) + g.dim(1)) * r);
      matrices_.push_back(std::move(m));
    } else {
      plain_.push_back(i);
    }
  }
  if (scratch_floats > 0) psgd_scratch_ = Tensor::empty({scratch_floats}, DType::kF32, dev_);
  for (const auto& t : restore_) {
    bool used = false;
    for (auto& m : matrices_) {
      const std::string stem = "powersgd." + std::to_string(m.param) + ".";
      const bool is_error = t.first == stem + "error";
      if (!is_error && t.first != stem + "q") continue;
      const size_t want = is_error ? static_cast<size_t>(m.error.numel()) : m.q.size();
      if (static_cast<size_t>(t.second.numel()) != want)
        throw Error("PowerSGD state " + t.first + " has " + std::to_string(t.second.numel()) + " values, the model needs " +
                    std::to_string(want));
      if (is_error) ops::upload(dev_, m.error.f32(), t.second.f32(), want * sizeof(float));
      else std::copy(t.second.f32(), t.second.f32() + t.second.numel(), m.q.begin());
      used = true;
    }
    if (!used) throw Error("PowerSGD state " + t.first + " does not belong to this model or rank");
  }
  restore_.clear();
  planned_ = true;
}

std::vector<std::pair<std::string, Tensor>> GradExchange::state() const {
  std::vector<std::pair<std::string, Tensor>> out;
  auto put = [&](const std::string& name, const std::vector<float>& v) {
    Tensor t = Tensor::empty({static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.f32());
    out.emplace_back(name, t);
  };
  for (const auto& m : matrices_) {
    out.emplace_back("powersgd." + std::to_string(m.param) + ".error", m.error.to(Device::kCpu));
    put("powersgd." + std::to_string(m.param) + ".q", m.q);
  }
  return out;
}

void GradExchange::restore(std::vector<std::pair<std::string, Tensor>> state) {
  if (planned_) throw Error("GradExchange::restore after the first step");
  restore_ = std::move(state);
}

void GradExchange::begin(Communicator& comm, std::vector<Param>& params) {
  comm_ = &comm;
  params_ = &params;
  if (!planned_) {
    dev_ = params.empty() ? Device::kCpu : params[0].grad.device();
    plan(params);
  }
  if (dev_ == Device::kCpu && c_.kind != "powersgd") bind_views(params);
  drop_marks();  // a step that failed midway leaves some
  is_ready_.assign(params.size(), 0);
  for (auto& b : buckets_) b.pending = static_cast<int>(b.params.size());
  done_ = 0;
  error_ = nullptr;
  last_bytes_ = 0;
  if (overlaps() && !thread_.joinable()) {
    gpu_ = !params.empty() && params[0].grad.device() == Device::kCuda ? ops::current_gpu() : -1;
    thread_ = std::thread(&GradExchange::comm_loop, this);
  }
}

void GradExchange::set_sharded() {
  if (c_.kind != "none") throw Error("--zero 1 reduce-scatters fp32 gradients: it does not combine with --grad-compress " + c_.kind);
  if (planned_) throw Error("GradExchange::set_sharded after the first step");
  sharded_ = true;
}

void GradExchange::ready(size_t param) {
  if (param >= is_ready_.size() || is_ready_[param]) return;
  is_ready_[param] = 1;
  const size_t b = bucket_of_[param];
  if (--buckets_[b].pending > 0 || !overlaps()) return;
  mark_ready(buckets_[b]);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(b);
  }
  cv_.notify_all();
}

namespace {

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace

void GradExchange::comm_loop() {
  ops::use_gpu(gpu_);  // the rank's GPU, for the copies of its gradients (none: -1)
  for (;;) {
    size_t b;
    bool failed;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      b = queue_.front();
      queue_.pop_front();
      failed = error_ != nullptr;
    }
    std::exception_ptr err;
    const double cpu0 = thread_cpu_seconds();
    if (!failed) {  // after a failure the ranks are out of step: no further collectives
      try {
        reduce_bucket(buckets_[b]);
      } catch (...) {
        err = std::current_exception();
      }
    }
    const double busy = thread_cpu_seconds() - cpu0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (err) error_ = err;
      ++done_;
      thread_busy_ += busy;
    }
    cv_.notify_all();
  }
}

void GradExchange::mark_ready(Bucket& b) {
  if (dev_comm_) {
    const bool half = c_.kind == "fp16";
    if (!b.dev.defined())  // sharded: every rank's chunk, the padding after the last one zero
      b.dev = sharded_ ? Tensor::zeros({static_cast<int64_t>(padded(b))}, DType::kF32, dev_)
                       : Tensor::empty({static_cast<int64_t>(b.floats)}, half ? DType::kF16 : DType::kF32, dev_);
    size_t at = 0;
    for (size_t i : b.params) {
      const Tensor& grad = (*params_)[i].grad;
      if (half) ops::to_half(dev_, b.dev.data<uint16_t>() + at, grad.f32(), grad.numel());
      else ops::scale_copy(dev_, b.dev.f32() + at, grad.f32(), 1.0f, grad.numel());
      at += static_cast<size_t>(grad.numel());
    }
  }
  b.ready_mark = ops::mark_queued(dev_);  // null on the CPU
}

// CPU gradients live in their bucket's flat buffer, each parameter's gradient a view of it: the
// bucket is summed where backward wrote it, with no copy into a buffer and none back (copies the
// communication thread made on the rank's own core). Bound at the first step, and again for a
// gradient that is not a view of its place (the caller replaced it).
void GradExchange::bind_views(std::vector<Param>& params) {
  for (auto& b : buckets_) bind_flat(&b.flat, b.floats, b.params, params, &Param::grad);
}

void bind_flat(Tensor* flat, size_t floats, const std::vector<size_t>& order, std::vector<Param>& params,
               Tensor Param::*member) {
  if (!flat->defined()) *flat = Tensor::empty({static_cast<int64_t>(floats)});
  int64_t at = 0;
  for (size_t i : order) {
    Tensor& t = params[i].*member;
    const int64_t n = t.numel();
    float* place = flat->f32() + at;
    if (t.f32() != place) {
      Tensor view = flat->rows(at, at + n).reshape(t.shape());
      std::copy(t.f32(), t.f32() + n, place);
      t = view;
    }
    at += n;
  }
}

// Staged gradients on a GPU are copied down on the side stream once the work that wrote them is
// done (not waiting for the kernels backward queued since), summed by the host transport, and
// copied back on that stream; the default stream waits for those copies only before the
// optimizer (land_buckets). The fallback where there is no device communicator.
void GradExchange::reduce_bucket(Bucket& b) {
  if (dev_comm_ && sharded_) {  // ZeRO-1: this rank's chunk summed in place, for the sharded step
    const size_t chunk = per_rank(b);
    dev_comm_->reduce_scatter_chunks(b.dev.f32(), chunk, b.ready_mark);
    b.begin = std::min(b.floats, static_cast<size_t>(dev_comm_->rank()) * chunk);
    b.count = std::min(chunk, b.floats - b.begin);
    last_bytes_ += b.floats * sizeof(float);
    return;
  }
  if (dev_comm_) {
    const bool half = c_.kind == "fp16";
    if (half) dev_comm_->allreduce_sum_half(b.dev.data<uint16_t>(), b.floats, b.ready_mark);
    else dev_comm_->allreduce_sum(b.dev.f32(), b.floats, b.ready_mark);
    last_bytes_ += b.floats * (half ? sizeof(uint16_t) : sizeof(float));
    return;  // land_buckets unpacks it
  }
  if (b.flat.defined()) {  // bind_views: summed where backward wrote it
    if (sharded_) {  // ZeRO-1: this rank's chunk summed, for the sharded optimizer step
      comm_->reduce_scatter_sum(b.flat.f32(), b.floats, &b.begin, &b.count);
      last_bytes_ += b.floats * sizeof(float);
    } else {
      sum(b.flat.f32(), b.floats);
    }
    return;
  }
  b.buf.resize(b.floats);
  if (dev_ != Device::kCpu && !b.pinned) b.pinned = ops::pin(dev_, b.buf.data(), b.buf.size() * sizeof(float));
  float* at = b.buf.data();
  for (size_t i : b.params) {
    const Tensor& grad = (*params_)[i].grad;
    const int64_t n = grad.numel();
    ops::download_after(dev_, b.ready_mark, at, grad.f32(), static_cast<size_t>(n) * sizeof(float));
    at += n;
  }
  if (sharded_) {  // ZeRO-1: the summed chunk stays in buf for the sharded optimizer step
    comm_->reduce_scatter_sum(b.buf.data(), b.buf.size(), &b.begin, &b.count);
    last_bytes_ += b.buf.size() * sizeof(float);
    return;
  }
  sum(b.buf.data(), b.buf.size());
  at = b.buf.data();
  for (size_t i : b.params) {
    const Tensor& grad = (*params_)[i].grad;
    const int64_t n = grad.numel();
    ops::upload_beside(dev_, grad.f32(), at, static_cast<size_t>(n) * sizeof(float));
    at += n;
  }
  b.landed_mark = ops::mark_beside(dev_);
}

void GradExchange::sum(float* data, size_t n) {
  if (c_.kind == "fp16") {
    comm_->allreduce_sum_half(data, n);
    last_bytes_ += n * sizeof(uint16_t);
  } else {
    comm_->allreduce_sum(data, n);
    last_bytes_ += n * sizeof(float);
  }
}

void GradExchange::land_buckets() {
  for (auto& b : buckets_) {
    if (dev_comm_ && !sharded_) {  // sharded: the optimizer takes its chunk from the packed bucket
      size_t at = 0;
      for (size_t i : b.params) {
        const Tensor& grad = (*params_)[i].grad;
        if (c_.kind == "fp16") ops::from_half(dev_, grad.f32(), b.dev.data<uint16_t>() + at, grad.numel());
        else ops::scale_copy(dev_, grad.f32(), b.dev.f32() + at, 1.0f, grad.numel());
        at += static_cast<size_t>(grad.numel());
      }
    }
    ops::queue_after(dev_, b.landed_mark);
  }
  drop_marks();
}

void GradExchange::finish(std::vector<float>& extras, int64_t step) {
  for (size_t i = 0; i < is_ready_.size(); ++i) ready(i);  // what backward did not report
  plain_bytes_ = grad_bytes_ + extras.size() * sizeof(float);
  if (overlaps()) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_ == buckets_.size(); });
    if (error_) std::rethrow_exception(error_);
  } else if (c_.kind == "powersgd") {
    powersgd(*params_, extras, step);
    return;
  } else {
    for (auto& b : buckets_) {
      mark_ready(b);
      reduce_bucket(b);
    }
  }
  land_buckets();
  comm_->allreduce_sum(extras.data(), extras.size());
  last_bytes_ += extras.size() * sizeof(float);
}

}  // namespace loom::rt

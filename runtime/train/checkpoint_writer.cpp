// checkpoint_writer.cpp — CheckpointWriter: the cadence, staging the state, the background writer
// and pruning (the choice of the checkpoint to resume from: checkpoint_resume.cpp).
#include "loom/rt/train/checkpoint_writer.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "loom/rt/comm/comm.hpp"
#include "loom/rt/tensor/ops.hpp"
#include "loom/rt/train/train_config.hpp"

namespace loom::rt {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

CheckpointWriter::CheckpointWriter(const TrainConfig& c, Communicator* comm, Log log)
    : dir_(c.ckpt_dir), resume_(c.resume), async_(c.ckpt_async), every_(c.ckpt_every), every_min_(c.ckpt_every_min),
      keep_(c.ckpt_keep), rank_(comm ? comm->rank() : 0), world_(comm ? comm->size() : 1), comm_(comm),
      log_(std::move(log)), last_(std::chrono::steady_clock::now()) {
  if (resume_ == "auto" && dir_.empty()) resume_ = "never";
  if (dir_.empty()) return;
  struct stat st;
  if (stat(dir_.c_str(), &st) != 0) {
    if (rank_ == 0 && mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST)
      throw Error("--ckpt-dir " + dir_ + ": cannot create: " + std::strerror(errno));
  } else if (!S_ISDIR(st.st_mode)) {
    throw Error("--ckpt-dir " + dir_ + ": not a folder");
  }
  if (rank_ != 0) return;
  // Temporary files of a writer that was killed, and shards whose index was never written (a
  // checkpoint not every rank finished): never loaded, removed.
  if (DIR* d = opendir(dir_.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.compare(0, 5, "ckpt-") != 0) continue;
      const size_t shard = n.find(".shard-");
      struct stat ist;
      if (n.find(".h5.tmp.") != std::string::npos ||
          (shard != std::string::npos && stat((dir_ + "/" + n.substr(0, shard) + ".h5").c_str(), &ist) != 0))
        std::remove((dir_ + "/" + n).c_str());
    }
    closedir(d);
  }
}

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();
  try {
    for (void* p : pinned_) ops::unpin(Device::kCuda, p);
  } catch (const std::exception&) {  // the device is already gone: nothing left to give back
  }
}

std::string CheckpointWriter::path_for(int64_t step) const {
  char name[40];
  std::snprintf(name, sizeof name, "ckpt-%010lld.h5", static_cast<long long>(step));
  return dir_ + "/" + name;
}

bool CheckpointWriter::time_due() const { return enabled() && every_min_ > 0 && seconds_since(last_) >= every_min_ * 60; }

bool CheckpointWriter::due(int64_t done, bool time_due) {
  flush_messages();
  if (!enabled()) return false;
  return (every_ > 0 && done % every_ == 0) || time_due;
}

namespace {

// Copies of n floats from element `at` of a tensor into host memory.
struct CopyJob {
  float* dst;
  const Tensor* src;  // lives in the CheckpointState being copied
  int64_t at, n;
};

// Runs the copies on up to 4 threads, cut into equal pieces: one thread does not saturate the
// memory bus (1 GiB: 0.13-0.24 s on one thread, 0.08 s on two on the 2-core test machine).
// Copies from CUDA tensors go one after the other (device-to-host over one link); with a mark
// (ops::mark_queued), on the device's side stream, beside the work queued after the mark.
void run_copies(const std::vector<CopyJob>& jobs, void* mark) {
  int64_t total = 0;
  for (const auto& j : jobs) total += j.n;
  const unsigned hw = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  const unsigned workers = total < (int64_t{1} << 20) ? 1 : hw;
  auto piece = [&](int64_t lo, int64_t hi) {  // elements [lo, hi) of the concatenated jobs
    int64_t at = 0;
    for (const auto& j : jobs) {
      const int64_t a = std::max(lo, at), b = std::min(hi, at + j.n);
      if (a < b) {
        const size_t bytes = static_cast<size_t>(b - a) * sizeof(float);
        float* dst = j.dst + (a - at);
        const float* src = j.src->f32() + j.at + (a - at);
        if (j.src->device() == Device::kCpu) std::memcpy(dst, src, bytes);
        else if (mark) ops::download_after(j.src->device(), mark, dst, src, bytes);
        else ops::download(j.src->device(), dst, src, bytes);
      }
      at += j.n;
    }
  };
  bool cuda = false;
  for (const auto& j : jobs) cuda = cuda || j.src->device() == Device::kCuda;
  if (workers == 1 || cuda) return piece(0, total);
  std::vector<std::thread> threads;
  for (unsigned w = 1; w < workers; ++w)
    threads.emplace_back(piece, total * w / workers, total * (w + 1) / workers);
  piece(0, total / workers);
  for (auto& t : threads) t.join();
}

double file_mib(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<double>(st.st_size) / 1048576.0 : 0;
}

}  // namespace

void CheckpointWriter::reuse(Tensor& t, const std::vector<int64_t>& shape, Device from) {
  if (t.defined() && t.shape() == shape) return;
  let_go(t);
  t = Tensor::empty(shape);
  if (from != Device::kCpu && t.bytes() > 0 && ops::pin(from, t.data<char>(), t.bytes())) pinned_.push_back(t.data<char>());
}

void CheckpointWriter::let_go(Tensor& t) {
  if (!t.defined()) return;
  auto it = std::find(pinned_.begin(), pinned_.end(), static_cast<void*>(t.data<char>()));
  if (it != pinned_.end()) {
    ops::unpin(Device::kCuda, *it);
    pinned_.erase(it);
  }
  t = Tensor();
}

double CheckpointWriter::stage(const CheckpointState& s, void* mark) {
  auto t0 = std::chrono::steady_clock::now();
  if (world_ == 1) {
    stage_.model_config = s.model_config;
    stage_.train_config = s.train_config;
    stage_.state_json = s.state_json;
    stage_.rng = s.rng;
    std::vector<std::pair<std::string, Tensor>>* groups[] = {&stage_.params, &stage_.opt_m, &stage_.opt_v};
    const char* names[] = {"params", "optimizer/m", "optimizer/v"};
    std::vector<CopyJob> jobs;
    for (int g = 0; g < 3; ++g) {
      auto& dst = *groups[g];
      size_t i = 0;
      for (const auto& e : s.tensors) {
        if (e.group != names[g]) continue;
        if (i == dst.size()) dst.emplace_back();
        dst[i].first = e.name;
        reuse(dst[i].second, e.tensor.shape(), e.tensor.device());
        jobs.push_back({dst[i].second.f32(), &e.tensor, 0, e.tensor.numel()});
        ++i;
      }
      for (size_t k = i; k < dst.size(); ++k) let_go(dst[k].second);
      dst.resize(i);
    }
    run_copies(jobs, mark);
    return seconds_since(t0);
  }
  // This rank's slice of the flat state, and the layout rank 0's index describes.
  int64_t total = 0;
  Device from = Device::kCpu;
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& e : s.tensors) {
    total += e.tensor.numel();
    if (e.tensor.device() != Device::kCpu) from = e.tensor.device();
    tensors.push_back({e.group, e.name, e.tensor.shape()});
  }
  const auto mine = shard_slice(total, rank_, world_);
  if (mine.second > 0) reuse(shard_.data, {mine.second}, from);
  else let_go(shard_.data);
  int64_t at = 0;
  std::vector<CopyJob> jobs;
  for (const auto& e : s.tensors) {
    const int64_t n = e.tensor.numel();
    const int64_t lo = std::max(at, mine.first), hi = std::min(at + n, mine.first + mine.second);
    if (lo < hi) jobs.push_back({shard_.data.f32() + (lo - mine.first), &e.tensor, lo - at, hi - lo});
    at += n;
  }
  run_copies(jobs, mark);
  shard_.offset = mine.first;
  shard_.total = total;
  shard_.rank = rank_;
  shard_.world = world_;
  shard_.rank_state = s.rank_state;
  if (rank_ == 0) {
    index_.model_config = s.model_config;
    index_.train_config = s.train_config;
    index_.state_json = s.state_json;
    index_.rng = s.rng;
    nlohmann::json layout = {{"world", world_}, {"total", total}, {"tensors", tensors}, {"shards", nlohmann::json::array()}};
    for (int r = 0; r < world_; ++r) {
      const auto sl = shard_slice(total, r, world_);
      layout["shards"].push_back({{"rank", r}, {"offset", sl.first}, {"count", sl.second}});
    }
    layout_ = layout.dump();
  }
  return seconds_since(t0);
}

void CheckpointWriter::prune() {
  auto files = list(dir_);
  for (size_t i = 0; i + static_cast<size_t>(keep_) < files.size(); ++i) {
    // The index first: without it the shards are never loaded, and a later start removes them.
    std::remove(files[i].second.c_str());
    const std::string prefix = files[i].second.substr(dir_.size() + 1, files[i].second.size() - dir_.size() - 4) + ".shard-";
    if (DIR* d = opendir(dir_.c_str())) {
      while (dirent* e = readdir(d))
        if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) std::remove((dir_ + "/" + e->d_name).c_str());
      closedir(d);
    }
  }
}

void CheckpointWriter::write_single(int64_t step) {
  const std::string path = path_for(step);
  auto t0 = std::chrono::steady_clock::now();
  std::string error;
  try {
    save_checkpoint(path, stage_);
    prune();
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::lock_guard<std::mutex> lock(mu_);
  result_ = {step, true, error, seconds_since(t0)};
}

void CheckpointWriter::write_shard(int64_t step) {
  auto t0 = std::chrono::steady_clock::now();
  try {
    shard_.step = step;
    save_checkpoint_shard(shard_path(path_for(step), rank_, world_), shard_);
    shard_seconds_ = seconds_since(t0);
    shard_status_.store(1);
  } catch (const std::exception& e) {
    fail_shard(step, std::string("could not write its shard: ") + e.what());
  }
}

void CheckpointWriter::fail_shard(int64_t step, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  messages_.push_back({"checkpoint step " + std::to_string(step) + ": rank " + std::to_string(rank_) + " " + why,
                       LogFields(LogLevel::kError, {{"event", "checkpoint_shard_failed"}, {"step", step}})});
  shard_status_.store(2);
}

std::pair<float, float> CheckpointWriter::shard_flags() const {
  if (pending_step_ < 0) return {0.0f, 0.0f};
  const int s = shard_status_.load();
  return {s == 1 ? 1.0f : 0.0f, s == 2 ? 1.0f : 0.0f};
}

void CheckpointWriter::agree(float written, float failed) {
  if (pending_step_ < 0) return;
  const int64_t step = pending_step_;
  if (failed > 0) {
    if (thread_.joinable()) thread_.join();
    std::remove(shard_path(path_for(step), rank_, world_).c_str());
    pending_step_ = -1;
    if (rank_ == 0)
      log_("checkpoint step " + std::to_string(step) + " failed on " + std::to_string(static_cast<int>(failed)) +
               " rank(s); the previous checkpoint is kept",
           LogFields(LogLevel::kError, {{"event", "checkpoint_failed"}, {"step", step}}));
    return;
  }
  if (static_cast<int>(written) < world_) return;  // shards still being written
  if (thread_.joinable()) thread_.join();
  pending_step_ = -1;
  if (rank_ == 0) commit_index(step);
}

void CheckpointWriter::commit_index(int64_t step) {
  const std::string path = path_for(step);
  auto t0 = std::chrono::steady_clock::now();
  try {
    save_checkpoint_index(path, index_, layout_);
    double mib = file_mib(path);
    for (int r = 0; r < world_; ++r) mib += file_mib(shard_path(path, r, world_));
    prune();
    const double took = shard_seconds_ + seconds_since(t0);
    log_("checkpoint step " + std::to_string(step) + ": " + path + " and " + std::to_string(world_) +
             " shards written in parallel (" + fmt("%.1f", mib) + " MiB; rank 0 took " + fmt("%.3f", took) + " s" +
             (pending_async_ ? async_text() : "") + ")",
         LogFields(LogLevel::kInfo, {{"event", "checkpoint"}, {"step", step}, {"shards", world_}, {"write_s", took}, {"copy_s", copy_s_}, {"paused_s", pending_async_ ? waited_s_ : took}}));
  } catch (const std::exception& e) {
    log_("checkpoint step " + std::to_string(step) + " failed: " + e.what() + "; the previous checkpoint is kept",
         LogFields(LogLevel::kError, {{"event", "checkpoint_failed"}, {"step", step}}));
  }
}

std::string CheckpointWriter::async_text() const {
  return ", async: the copy of the state took " + fmt("%.1f", copy_s_ * 1e3) + " ms beside the next step, which waited " +
         fmt("%.1f", waited_s_ * 1e3) + " ms for it";
}

void CheckpointWriter::flush_messages() {
  std::vector<std::pair<std::string, LogFields>> out;
  Result r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.swap(messages_);
    std::swap(r, result_);
  }
  for (const auto& m : out) log_(m.first, m.second);
  if (!r.done) return;
  const std::string step = std::to_string(r.step);
  if (!r.error.empty()) {
    log_("checkpoint step " + step + " failed: " + r.error + "; the previous checkpoint is kept",
         LogFields(LogLevel::kError, {{"event", "checkpoint_failed"}, {"step", r.step}}));
    return;
  }
  const std::string path = path_for(r.step);
  log_("checkpoint step " + step + ": " + path + " (" + fmt("%.1f", file_mib(path)) + " MiB in " + fmt("%.3f", r.write_s) +
           " s" + (pending_async_ ? async_text() : "") + ")",
       LogFields(LogLevel::kInfo, {{"event", "checkpoint"}, {"step", r.step}, {"write_s", r.write_s}, {"copy_s", copy_s_}, {"paused_s", pending_async_ ? waited_s_ : r.write_s}}));
}

double CheckpointWriter::save(CheckpointState s, int64_t step, bool sync) {
  finish();  // at most one write in flight; its buffers are free again
  last_ = std::chrono::steady_clock::now();
  pending_async_ = !sync && async_;
  waited_s_ = 0;
  if (world_ > 1) {
    pending_step_ = step;
    shard_status_.store(0);
  }
  if (!pending_async_) {
    copy_s_ = stage(s);
    if (world_ == 1) write_single(step);
    finish();  // one rank: reports; several: writes this rank's shard, then agrees with the others
    return copy_s_;
  }
  // The copy runs beside the next step's forward and backward passes, which only read the
  // state; wait_copied() holds the first change (the optimizer's step, or rounding for AMP).
  copied_ = false;
  const auto t0 = std::chrono::steady_clock::now();
  // State on a GPU: the copy starts once the work queued so far (the optimizer's step) is done,
  // on a side stream of the same device, while the next step's kernels run.
  bool on_gpu = false;
  for (const auto& e : s.tensors) on_gpu = on_gpu || e.tensor.device() == Device::kCuda;
  const int gpu = on_gpu ? ops::current_gpu() : -1;
  void* mark = on_gpu ? ops::mark_queued(Device::kCuda) : nullptr;
  thread_ = std::thread([this, s = std::move(s), step, gpu, mark]() mutable {
    double c = 0;
    std::string failed;  // a copy that fails (a CUDA error, no memory) fails this checkpoint, not the run
    try {
      ops::use_gpu(gpu);  // the current device is per thread
      c = stage(s, mark);
      ops::release_mark(Device::kCuda, mark);
    } catch (const std::exception& e) {
      failed = e.what();
    }
    s = CheckpointState();  // drops the references to the live tensors
    {
      std::lock_guard<std::mutex> lock(mu_);
      copy_s_ = c;
      copied_ = true;
      if (!failed.empty() && world_ == 1) result_ = {step, true, "copying the state: " + failed, 0};
    }
    copied_cv_.notify_all();
    if (!failed.empty()) {
      if (world_ > 1) fail_shard(step, "could not copy its state: " + failed);
      return;
    }
    if (world_ == 1) write_single(step);
    else write_shard(step);
  });
  return seconds_since(t0);
}

double CheckpointWriter::wait_copied() {
  if (!thread_.joinable()) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  copied_cv_.wait(lock, [this] { return copied_; });
  const double w = seconds_since(t0);
  waited_s_ += w;
  return w;
}

void CheckpointWriter::finish() {
  if (pending_step_ >= 0 && !thread_.joinable() && shard_status_.load() == 0) write_shard(pending_step_);
  if (thread_.joinable()) thread_.join();
  flush_messages();
  if (pending_step_ >= 0) {
    auto f = shard_flags();
    float sums[2] = {f.first, f.second};
    comm_->allreduce_sum(sums, 2);
    agree(sums[0], sums[1]);
  }
}

}  // namespace loom::rt

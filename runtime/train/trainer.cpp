// trainer.cpp — the training loop of `loom-train`: a small loop over the run's parts (the task,
// the batch plan, the gradient sync, the precision policy, the checkpoint writer, the stop
// signal and the reporter), each in a file of its own beside this one.
#include "loom/rt/train/trainer.hpp"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <thread>

#include "loom/rt/error.hpp"
#include "loom/rt/io/model_io.hpp"
#include "loom/rt/io/onnx_export.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/ops.hpp"
#include "loom/rt/train/batch_plan.hpp"
#include "loom/rt/train/checkpoint_writer.hpp"
#include "loom/rt/train/gradient_sync.hpp"
#include "loom/rt/train/mllog.hpp"
#include "loom/rt/train/precision_policy.hpp"
#include "loom/rt/train/reporter.hpp"
#include "loom/rt/train/run_state.hpp"
#include "loom/rt/train/stop_signal.hpp"
#include "loom/rt/train/task.hpp"

namespace loom::rt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Why this run cannot go on CUDA in this build (empty: it can).
std::string cuda_blocker(const TrainConfig& c) {
  if (c.qat) return "--qat runs on the CPU in this build";
  if (!c.teacher_path.empty()) return "distillation runs on the CPU in this build";
  return {};
}

// --device cuda: CUDA or a clear error. auto: CUDA when a GPU this build has code for is here and
// the run can go there, else the CPU (with a note saying why, when a GPU is here): a job script
// with the default works on every node, GPU or not, multi-rank or not.
Device choose_device(const TrainConfig& c, std::string* note) {
  if (c.device == DeviceChoice::kCpu) return Device::kCpu;
  // Each rank's own GPU, before the first CUDA call makes a context on device 0.
  if (c.comm && c.comm->size() > 1) ops::select_gpu(c.comm->local_rank());
  std::string why;
  const std::string blocker = cuda_blocker(c);
  if (c.device == DeviceChoice::kCuda) {
    if (!blocker.empty()) throw Error("--device cuda: " + blocker);
    if (!ops::cuda_usable(&why)) throw Error("--device cuda: " + why);
    return Device::kCuda;
  }
  bool no_code = false;
  if (!ops::cuda_usable(&why, &no_code)) {
    if (no_code) *note = "--device auto: " + why + "; training on the CPU";
    return Device::kCpu;
  }
  if (!blocker.empty()) {
    *note = "--device auto: a GPU is here, but " + blocker + "; training on the CPU";
    return Device::kCpu;
  }
  // auto takes the CUDA paths that tests/gpu/run.sh has run on a GPU (doc/gpu.md: the MLP and
  // the gpt, fp32 and mixed precision, one rank); several ranks with GPUs have run only as one
  // NCCL rank and as two ranks in one process on one GPU, not yet as MPI ranks on GPUs of their own.
  if (c.comm && c.comm->size() > 1) {
    *note = "--device auto: multi-rank CUDA training has not yet run on GPUs of their own (doc/gpu.md); "
            "training on the CPU (--device cuda runs it on the GPUs)";
    return Device::kCpu;
  }
  return Device::kCuda;
}

const TrainConfig& prepared(const TrainConfig& c) {
  validate(c);
  // Each step allocates and frees the same activations: keep them in the heap rather than
  // mmap'ing (and page-faulting in) fresh zeroed pages every step (~3% of a gpt step). --zero 3
  // allocates each layer's whole parameters and gradients and frees them again: mapped, so
  // that what it frees leaves the process (the caching allocator keeps what the next step reuses).
  cpu::keep_buffers_on_heap(c.zero == 3 ? 1 << 20 : 32 << 20);
  cpu::set_threads(c.threads);
  cpu::set_gemm_backend(word_of(c.gemm));
  return c;
}

class Trainer {
 public:
  Trainer(const TrainConfig& c, const Reporter::Log& log);
  TrainResult run();

 private:
  bool step(int64_t epoch, int64_t b);  // one step; true when the run stops on a signal
  void progress(int64_t epoch, double loss, double seconds);
  void checkpoint(int64_t epoch, int64_t b, const StepVotes& votes);
  std::string save_before_failing(int64_t epoch, int64_t b);
  void evaluate(int64_t epoch);
  void finish(TrainResult* r);
  void export_to(const std::string& path);
  void report_time(int64_t steps);
  RunParts parts() { return {*task_, opt_, precision_, plan_, sync_}; }
  bool preflight() const;  // what must be said or refused before the ranks start agreeing
  void shard_params();     // --zero 3: the whole parameters (initial or resumed) go to their shards
  void mllog_submission(const TrainConfig& c);  // the MLPerf log's submission and system keys

  const TrainConfig& c_;
  MlLog ml_;  // first after the config: init_start is logged before the data and model load
  std::string device_note_;  // why --device auto chose the CPU on a GPU node
  const Device device_;
  std::unique_ptr<Task> task_;
  Ranks ranks_;
  Reporter rep_;
  const bool preflight_;
  BatchPlan plan_;
  PrecisionPolicy precision_;
  GradientSync sync_;
  Optimizer opt_;
  const int64_t per_epoch_, total_;
  RunState state_;
  CheckpointWriter ckpt_;
  StopSignal stop_;
  Position pos_;
  int64_t pos_first_ = 0;  // the step this run started at (> 0 after a resume)
  int64_t saved_step_ = 0;  // the step of the newest checkpoint (this run's or the one it resumed)
  Eval ev_;
  bool evaluated_ = false;
  double train_seconds_ = 0, window_seconds_ = 0, eval_seconds_ = 0, last_loss_ = 0;
  int64_t window_samples_ = 0;
  struct {  // where this rank's step time went, summed over the run (reported at the end)
    double compute = 0, exchange = 0, update = 0;
  } time_;
};

Trainer::Trainer(const TrainConfig& c, const Reporter::Log& log)
    : c_(prepared(c)),
      ml_(c.mllog_path, c.comm ? c.comm->rank() : 0, __FILE__, __LINE__),
      device_(choose_device(c, &device_note_)),
      task_(c.model == ModelKind::kGpt ? make_gpt_task(c, device_) : make_mlp_task(c, device_)),
      ranks_(c.comm),
      rep_(c, ranks_.me, ranks_.size, log),
      preflight_(preflight()),
      plan_(c, ranks_, rep_),
      precision_(c, ranks_, rep_, device_),
      sync_(c, ranks_, rep_, device_),
      opt_(c.optim),
      per_epoch_(task_->steps_per_epoch(c.global_batch)),
      total_(c.steps > 0 ? c.steps : per_epoch_ * c.epochs),
      state_(c, ranks_, rep_, *task_, total_, precision_.precision()),
      ckpt_(c, ranks_.many() ? c.comm : nullptr,
            [this](const std::string& h, const LogFields& f) { rep_.say_mine(h, f); }),
      stop_(c.stop_signal) {
  if (device_ == Device::kCuda) ops::set_cuda_gemm_precision(precision_.precision());  // tensor cores for fp16/bf16
  precision_.announce(device_);
  rep_.say("training " + task_->describe() + ", " + std::to_string(total_) + " steps of " + std::to_string(c.global_batch) +
               ", " + std::to_string(c.threads) + " threads, GEMM " + cpu::gemm_backend(),
           LogFields(LogLevel::kInfo, {{"event", "start"}, {"steps", total_}}));
  pos_ = state_.resume(ckpt_, parts());
  shard_params();
  saved_step_ = pos_.step;
  mllog_submission(c);
  LOOM_MLLOG(ml_, kPoint, "global_batch_size", c.global_batch);
  LOOM_MLLOG(ml_, kPoint, "opt_name", word_of(c.optim.kind));
  LOOM_MLLOG(ml_, kPoint, "opt_base_learning_rate", std::stod(num(c.lr)));  // 0.05, not 0.0500000007
  LOOM_MLLOG(ml_, kPoint, "train_samples", task_->train_size());
  LOOM_MLLOG(ml_, kPoint, "eval_samples", task_->eval_size());
  LOOM_MLLOG(ml_, kEnd, "init_stop", nullptr);
  LOOM_MLLOG(ml_, kStart, "run_start", nullptr, {{"resumed_at_step", pos_.step}});
}

// The keys MLCommons' compliance checker requires of every training log (its common.yaml): who
// and what ran, in the open division (Loom's models are not MLPerf's reference benchmarks), the
// lowest precision of the linear layers, attention and the gradient exchange, one-way data
// parallelism, each rank's batch, and that the page cache was not dropped before the run.
void Trainer::mllog_submission(const TrainConfig& c) {
  LOOM_MLLOG(ml_, kPoint, "submission_benchmark", c.model == ModelKind::kGpt ? "loom_gpt_text" : "loom_mlp_fashion_mnist");
  LOOM_MLLOG(ml_, kPoint, "submission_org", "Loom");
  LOOM_MLLOG(ml_, kPoint, "submission_division", "open");
  LOOM_MLLOG(ml_, kPoint, "submission_platform",
             std::to_string(ranks_.size) + "x" + (device_ == Device::kCuda ? (c.gpu_class.empty() ? "gpu" : c.gpu_class) : "cpu"));
  LOOM_MLLOG(ml_, kPoint, "cache_clear", false);
  const std::string compute = c.precision == Precision::kBf16 ? "bfloat16" : word_of(c.precision);
  LOOM_MLLOG(ml_, kPoint, "lowest_numerical_precision_in_linear", compute);
  LOOM_MLLOG(ml_, kPoint, "lowest_numerical_precision_in_attn", compute);
  LOOM_MLLOG(ml_, kPoint, "lowest_numerical_precision_in_comm", c.grad_compress == "fp16" ? "fp16" : "fp32");
  for (const char* k : {"tensor_parallelism", "pipeline_parallelism", "context_parallelism", "expert_parallelism"})
    LOOM_MLLOG(ml_, kPoint, k, 1);
  LOOM_MLLOG(ml_, kPoint, "micro_batch_size", (c.global_batch + ranks_.size - 1) / ranks_.size);
  LOOM_MLLOG(ml_, kPoint, "config_filename", c.config_path.empty() ? "command line" : c.config_path);
}

bool Trainer::preflight() const {
  if (c_.emulate_speed < 1)
    rep_.say_mine("emulating a slow device: compute takes 1/" + num(c_.emulate_speed) + " as long (LOOM_EMULATE_SPEED)",
                  LogFields(LogLevel::kWarning, {{"event", "emulation"}}));
  if (!device_note_.empty()) rep_.say_mine(device_note_, LogFields(LogLevel::kInfo, {{"event", "device"}, {"device", "cpu"}}));
  return true;
}

void Trainer::shard_params() {
  sync_.shard_params(*task_, opt_);
  Zero3* z = sync_.zero3();
  if (!z || !precision_.passes_gradients()) return;
  const bool bf16 = precision_.precision() == "bf16", low = precision_.enabled();
  std::vector<Param>& params = task_->params();
  z->set_precision(low ? std::function<void(float*, int64_t)>([bf16](float* x, int64_t n) { ops::round_low(Device::kCpu, x, n, bf16); })
                       : std::function<void(float*, int64_t)>(),
                   [this, &params](size_t i) { precision_.grad_ready(params, i, pos_.step); });
}

TrainResult Trainer::run() {
  const int64_t first_step = pos_.step;  // > 0 after a resume
  pos_first_ = first_step;
  const auto loop_start = Clock::now();
  if (pos_.step >= total_)
    rep_.say("the checkpoint is already at step " + std::to_string(pos_.step) + " of " + std::to_string(total_) +
                 ": nothing to train",
             LogFields(LogLevel::kInfo, {{"event", "done_before"}}));
  bool stopped = false;
  int64_t last_eval_step = first_step;
  // A pass over a small text file takes a few steps: gpt evaluates every --log-every steps.
  const int64_t eval_every = c_.eval_every > 0 ? c_.eval_every : c_.model == ModelKind::kGpt ? c_.log_every : 0;
  for (int64_t epoch = pos_.epoch; pos_.step < total_ && !stopped; ++epoch) {
    LOOM_MLLOG(ml_, kStart, "epoch_start", nullptr, {{"epoch_num", epoch}});
    for (int64_t b = epoch == pos_.epoch ? pos_.batch : 0; b < per_epoch_ && pos_.step < total_ && !stopped; ++b)
      stopped = step(epoch, b);
    LOOM_MLLOG(ml_, kEnd, "epoch_stop", nullptr, {{"epoch_num", epoch}});
    if (!stopped && (pos_.step >= total_ || pos_.step - last_eval_step >= eval_every)) {
      evaluate(epoch);
      last_eval_step = pos_.step;
    }
  }
  ckpt_.finish();  // the last asynchronous write, if any, is down (or reported) before we go on
  TrainResult r;
  r.loop_seconds = seconds_since(loop_start) - eval_seconds_;
  r.preempted = stopped;
  r.steps = pos_.step;
  if (!evaluated_ && !stopped && c_.evaluate) {  // resumed with nothing left to train
    const auto whole = sync_.whole(ranks_.me == 0);
    if (ranks_.me == 0) ev_ = task_->evaluate();
    evaluated_ = true;
  }
  const double trained = static_cast<double>(pos_.step - first_step);  // steps this run computed
  r.samples_per_s = train_seconds_ > 0 ? trained * c_.global_batch / train_seconds_ : 0;
  r.evaluated = evaluated_ && !stopped;
  r.test_accuracy = r.evaluated ? ev_.accuracy : 0;
  r.last_loss = last_loss_;
  const StateBytes bytes = sync_.state_bytes(opt_, task_->params());
  r.param_bytes = bytes.params;
  r.grad_bytes = bytes.grads;
  r.optimizer_bytes = bytes.optimizer;
  r.device = device_ == Device::kCuda ? "cuda" : "cpu";
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) == 0) r.peak_memory_bytes = static_cast<size_t>(ru.ru_maxrss) * 1024;
  r.gflops = train_seconds_ > 0 ? task_->train_flops(c_.global_batch) * trained / train_seconds_ / 1e9 : 0;
  finish(&r);
  return r;
}

bool Trainer::step(int64_t epoch, int64_t b) {
  const auto t0 = Clock::now();
  std::vector<Param>& params = task_->params();
  Zero3* sharded = sync_.zero3();  // --zero 3: the gate passes each layer's gradients (shard_params)
  if (precision_.enabled() && !sharded) ckpt_.wait_copied();  // rounding to fp16/bf16 changes the parameters
  if (sharded) precision_.enter_sharded(params.size(), device_);
  else precision_.enter(params);
  // Each rank's gradients are those of its share's summed loss over the global batch (Task::
  // train_step): summed over the ranks, the gradient of the global batch's mean; its mean loss
  // counts for its share (w) in the sum of the losses.
  const float w = plan_.weight();
  sync_.begin(params);
  StepVotes mine;
  // As backward finishes each gradient: its precision pass, then (buckets) off to the other ranks.
  const std::function<void(size_t)>& send = sync_.ready();
  std::function<void(size_t)> ready = send;
  if (precision_.passes_gradients() && !sharded)
    ready = [&](size_t i) {
      precision_.grad_ready(params, i, pos_.step);
      if (send) send(i);
    };
  try {
    mine.loss = task_->train_step(epoch, b * c_.global_batch + plan_.offset(), plan_.share(), c_.global_batch, ready);
  } catch (const DataChanged& e) {
    throw DataChanged(e.what() + save_before_failing(epoch, b));
  }
  // Kernels run asynchronously: the balancer needs the GPU's own time. Its compute only: a device-
  // wide sync would also wait for the buckets NCCL is summing, which finish when the slowest rank
  // sends its own, and a fast rank would measure the slow one's time.
  ops::wait_compute(device_);
  mine.finite = sharded ? precision_.leave_sharded() : precision_.leave(params, pos_.step);
  double compute = seconds_since(t0);
  if (c_.emulate_speed < 1) {
    std::this_thread::sleep_for(std::chrono::duration<double>(compute * (1 / c_.emulate_speed - 1)));
    compute = seconds_since(t0);
  }
  mine.stop = stop_.requested();
  const auto t_sync = Clock::now();
  const StepVotes all = sync_.finish(mine, w, ckpt_, pos_.step);
  const auto t_synced = Clock::now();
  if (ranks_.many()) plan_.observe(compute);
  if (!std::isfinite(all.loss))
    throw Error("loss is " + num(all.loss) + " at step " + std::to_string(pos_.step) + " (lower --lr)");
  if (!precision_.skip(all.finite, pos_.step)) {
    ckpt_.wait_copied();  // an asynchronous checkpoint's copy of the state is done before it changes
    sync_.apply(opt_, params, lr_at(pos_.step, total_, c_.lr, c_.warmup, c_.schedule), c_.clip);
  }
  time_.compute += compute;
  time_.exchange += std::chrono::duration<double>(t_synced - t_sync).count();
  time_.update += seconds_since(t_synced);
  progress(epoch, all.loss, seconds_since(t0));
  checkpoint(epoch, b, all);
  ++pos_.step;
  if (all.stop)
    rep_.say("stopping at step " + std::to_string(pos_.step) + " on a signal" +
                 (ckpt_.enabled() ? ", checkpoint written: resume with --resume auto" : " (no --ckpt-dir: nothing saved)"),
             LogFields(LogLevel::kWarning, {{"event", "preempted"}, {"step", pos_.step}}));
  return all.stop;
}

void Trainer::progress(int64_t epoch, double loss, double seconds) {
  const int64_t done = pos_.step + 1;
  train_seconds_ += seconds;
  window_seconds_ += seconds;
  window_samples_ += c_.global_batch;
  last_loss_ = loss;
  const double rate = window_samples_ / std::max(window_seconds_, 1e-9);
  Reporter::StepLine line{done, epoch, loss, rate, plan_.shares_text(), sync_.comm_bytes(), precision_.amp().scale()};
  const double ms = 1e3 / static_cast<double>(std::max<int64_t>(1, done - pos_first_));
  line.lr = lr_at(pos_.step, total_, c_.lr, c_.warmup, c_.schedule);
  line.compute_ms = time_.compute * ms, line.exchange_ms = time_.exchange * ms, line.update_ms = time_.update * ms;
  rep_.live(line, total_);
  if (done % c_.log_every != 0 && done != total_) return;
  const double eta = (total_ - done) * c_.global_batch / std::max(rate, 1e-9);
  rep_.say("step " + std::to_string(done) + "/" + std::to_string(total_) + " epoch " + std::to_string(epoch) + " loss " +
               fixed(loss, 4) + " " + fixed(rate, 0) + " samples/s ETA " + fixed(eta, 1) + " s",
           LogFields(LogLevel::kInfo, {{"step", done}, {"loss", loss}, {"samples_per_s", rate}}));
  rep_.step(line);
  window_seconds_ = 0;
  window_samples_ = 0;
}

void Trainer::checkpoint(int64_t epoch, int64_t b, const StepVotes& votes) {
  const int64_t done = pos_.step + 1;
  if (!ckpt_.enabled() || !(votes.stop || ckpt_.due(done, votes.time_due) || done == total_)) return;
  // Every rank writes its slice (one rank: the whole state) and rank 0 the index.
  const auto whole = sync_.whole();
  ckpt_.save(state_.snapshot(parts(), {done, epoch, b + 1}), done, /*sync=*/votes.stop || done == total_);
  saved_step_ = done;
  if (votes.stop && c_.comm) c_.comm->barrier();  // no rank exits (and ends the job) before the index is down
}

// A data file broke in the middle of step (epoch, b): the steps finished since the last
// checkpoint are written (the state as after the previous step; batch b again on resume) and the
// sentence saying so returned. One rank only: with several, the others wait in the step's
// collectives and a checkpoint needs every rank.
std::string Trainer::save_before_failing(int64_t epoch, int64_t b) {
  if (!ckpt_.enabled()) return " (no --ckpt-dir: the steps done are lost)";
  if (pos_.step <= saved_step_) return " (the last checkpoint, step " + std::to_string(saved_step_) + ", holds every step done)";
  if (ranks_.many()) return " (several ranks: the steps since the last checkpoint are lost)";
  try {
    precision_.leave(task_->params(), pos_.step);  // the master weights back, not their fp16 copies
    ckpt_.finish();
    ckpt_.save(state_.snapshot(parts(), {pos_.step, epoch, b}), pos_.step, /*sync=*/true);
    ckpt_.finish();
  } catch (const std::exception& w) {
    return std::string(" (the checkpoint of the steps done failed too: ") + w.what() + ")";
  }
  return "; checkpoint " + ckpt_.path_for(pos_.step) + " holds the " + std::to_string(pos_.step) +
         " steps done: repair the file and resume with --resume auto";
}

void Trainer::evaluate(int64_t epoch) {
  if (!c_.evaluate) return;
  const auto t_eval = Clock::now();
  LOOM_MLLOG(ml_, kStart, "eval_start", nullptr, {{"epoch_num", epoch}});
  {
    const auto whole = sync_.whole(ranks_.me == 0);
    if (ranks_.me == 0) ev_ = task_->evaluate();
  }
  LOOM_MLLOG(ml_, kPoint, "eval_accuracy", ev_.accuracy, {{"epoch_num", epoch}});
  LOOM_MLLOG(ml_, kEnd, "eval_stop", nullptr, {{"epoch_num", epoch}});
  eval_seconds_ += seconds_since(t_eval);
  evaluated_ = true;
  rep_.eval(epoch, pos_.step, ev_.accuracy, ev_.loss);
}

// The export (a finished run only: a stopped run's weights are not the model it was asked
// for) and the summary.
void Trainer::finish(TrainResult* r) {
  const GradientSync::Whole whole(c_.export_path.empty() ? nullptr : sync_.zero3(), ranks_.me == 0);
  if (!c_.export_path.empty() && ranks_.me == 0) {
    if (r->preempted) {
      rep_.say("not exporting " + c_.export_path + ": the run stopped at step " + std::to_string(r->steps) + " of " +
                   std::to_string(total_) + " (the export is written when a resumed run finishes)",
               LogFields(LogLevel::kWarning, {{"event", "export_skipped"}}));
    } else {
      export_to(c_.export_path);
      rep_.say("exported " + c_.export_path, LogFields(LogLevel::kInfo, {{"event", "export"}}));
    }
  }
  report_time(r->steps);
  rep_.summary(*r, total_, sync_.comm_bytes());
  ml_.run_stop(r->preempted ? "aborted" : "success", __FILE__, __LINE__);
}

// Per step on this rank: forward and backward (emulated slowness included), the wait in the
// gradient exchange after backward (the part that did not overlap, and a faster rank's wait
// for a slower one), the optimizer's update (clipping, ZeRO-1's allgather), and the rest
// (logging, checkpoints); beside them, the CPU time of the communication thread, which a rank
// with one core takes from its backward. Every rank says its own: the breakdown of a heterogeneous run.
void Trainer::report_time(int64_t steps) {
  const int64_t done = steps - pos_first_;
  if (done <= 0 || train_seconds_ <= 0) return;
  const double ms = 1e3 / static_cast<double>(done);
  const double other = train_seconds_ - time_.compute - time_.exchange - time_.update;
  const double busy = sync_.comm_thread_seconds();  // 0 without buckets overlapped
  rep_.say_mine("time per step: " + fixed(train_seconds_ * ms, 2) + " ms = compute " + fixed(time_.compute * ms, 2) +
                    " + gradient exchange wait " + fixed(time_.exchange * ms, 2) + " + update " +
                    fixed(time_.update * ms, 2) + " + other " + fixed(other * ms, 2) + " (share " +
                    std::to_string(plan_.share()) + " of " + std::to_string(c_.global_batch) + ")" +
                    (busy > 0 ? "; communication thread busy " + fixed(busy * ms, 2) + " ms" : std::string()),
                LogFields(LogLevel::kInfo, {{"event", "step_time"}, {"compute_ms", time_.compute * ms}, {"exchange_ms", time_.exchange * ms}, {"update_ms", time_.update * ms}, {"other_ms", other * ms}, {"comm_thread_ms", busy * ms}}));
}

}  // namespace

// FILE.onnx: the HDF5 model beside it first, then converted (the one writer of each format).
void Trainer::export_to(const std::string& path) {
  const bool onnx = path.size() > 5 && path.compare(path.size() - 5, 5, ".onnx") == 0;
  if (!onnx) return task_->export_model(path);
  const std::string h5 = path + ".h5.tmp";
  task_->export_model(h5);
  try {
    export_onnx(h5, path, "loom-train");
  } catch (...) {
    std::remove(h5.c_str());
    throw;
  }
  std::remove(h5.c_str());
}

void Task::export_model(const std::string& path) {
  std::vector<Param> host;
  for (const auto& p : params()) host.push_back({p.name, p.value.to(Device::kCpu), Tensor()});
  save_model(path, config_json(), host);
}

TrainResult train(const TrainConfig& c, const std::function<void(const std::string&)>& log) {
  Trainer t(c, log);
  return t.run();
}

}  // namespace loom::rt

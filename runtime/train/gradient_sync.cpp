// gradient_sync.cpp — the gradient allreduce of each step and the votes that ride with it.
#include "loom/rt/train/gradient_sync.hpp"

#include <algorithm>
#include <cmath>

#include "loom/rt/train/train_config.hpp"

namespace loom::rt {

std::unique_ptr<DeviceCollectives> GradientSync::device_collectives(const TrainConfig& c, Device device, std::string* why) {
  if (device != Device::kCuda) {
    *why = std::string("the gradients are not on a GPU (--device ") + word_of(c.device) + " chose the CPU; --device cuda puts them there)";
    return nullptr;
  }
  return gpu_collectives(*c.comm, c.comm_timeout, powersgd_, why);
}

GradientSync::GradientSync(const TrainConfig& c, const Ranks& ranks, const Reporter& rep, Device device)
    : ranks_(ranks), rep_(rep), compress_(c.grad_compress), powersgd_(parse_grad_compress(c.grad_compress).kind == "powersgd"),
      exchange_(parse_grad_compress(c.grad_compress), c.bucket_mb) {
  if (c.zero != 0 && !ranks_.many())
    rep_.say("--zero " + std::to_string(c.zero) + " on one rank: there is nothing to shard, the model and the optimizer keep their whole state",
             LogFields(LogLevel::kInfo, {{"event", "zero"}, {"sharded", false}}));
  if (!ranks_.many()) return;
  const std::vector<double> levels = ranks_.gather(c.zero);
  for (size_t r = 0; r < levels.size(); ++r)
    if (levels[r] != c.zero)
      throw Error("the ranks disagree on --zero: rank " + std::to_string(r) + " has " + num(levels[r]) + ", rank " +
                  std::to_string(ranks_.me) + " has " + std::to_string(c.zero) + " (every rank must run the same command)");
  if (c.offload == Offload::kOptimizer && device != Device::kCuda)
    rep_.say("--offload optimizer: the ranks train on the CPU, where the optimizer state is in host memory already",
             LogFields(LogLevel::kInfo, {{"event", "offload"}, {"moved", false}}));
  if (c.zero == 3) {
    zero3_ = std::make_unique<Zero3>(*c.comm, device, c.grad_compress == "fp16");
    std::string parts;
    if (c.shard_by == "memory") {
      const std::vector<double> memory = ranks_.gather(c.device_memory);
      for (size_t r = 0; r < memory.size(); ++r)
        if (!(memory[r] > 0 && std::isfinite(memory[r])))
          throw Error("--shard-by memory: rank " + std::to_string(r) + " has no positive LOOM_DEVICE_MEMORY (" + num(memory[r]) +
                      "): srun --loom-bind sets it from the task's GPU; elsewhere export each rank's device memory in bytes");
      zero3_->set_shard_weights(memory);
      double least = memory[0];
      for (double m : memory) least = std::min(least, m);
      parts = " in parts by device memory (";
      for (size_t r = 0; r < memory.size(); ++r) parts += (r ? ":" : "") + num(std::round(100 * memory[r] / least) / 100);
      parts += ", LOOM_DEVICE_MEMORY)";
    }
    // In this build ZeRO-3's shards live in host memory on every device: on CUDA the optimizer is
    // offloaded with or without --offload optimizer, and the layers are staged through the host.
    rep_.say("ZeRO-3: parameters, gradients and optimizer state sharded over " + std::to_string(ranks_.size) +
                 " ranks" + parts + (device == Device::kCuda ? " in host memory (the optimizer offloaded, each layer staged to the GPU)" : "") +
                 "; each layer's parameters allgathered before its forward and backward (the next layer's while it computes), "
                 "its gradients reduce-scattered" + (c.grad_compress == "fp16" ? std::string(" in fp16") : std::string()) +
                 " as backward finishes it; " + c.comm->describe() + " (" + c.comm->backend() + ")",
             LogFields(LogLevel::kInfo, {{"event", "comm"}, {"zero", 3}}));
    return;
  }
  if (c.zero == 1) {
    exchange_.set_sharded();
    zero_ = std::make_unique<ZeroOptimizer>(exchange_, *c.comm);
  }
  std::string staged;  // why CUDA gradients go through host memory
  if (c.offload == Offload::kOptimizer && device == Device::kCuda) {  // ZeRO-1's host path: shards and step in host memory
    staged = "--offload optimizer";
  } else if (c.gpu_backend != GpuBackend::kHost && (device == Device::kCuda || c.gpu_backend == GpuBackend::kNccl)) {
    device_comm_ = device_collectives(c, device, &staged);
    if (!device_comm_ && c.gpu_backend == GpuBackend::kNccl) throw Error("--gpu-backend nccl: " + staged);
    exchange_.set_device_comm(device_comm_.get());
  } else if (device == Device::kCuda) {
    staged = "--gpu-backend host";
  }
  // Gradients go out while backward runs (each after its precision pass, PrecisionPolicy::
  // grad_ready), unless the transport cannot be driven from a second thread.
  const bool overlap = exchange_.overlaps() && c.comm->thread_serialized();
  if (overlap) ready_ = [this](size_t i) { exchange_.ready(i); };
  const std::string over = device_comm_ ? device_comm_->describe() + " on the GPUs (gradients), " + c.comm->describe() +
                                               " (" + c.comm->backend() + ") for the rest"
                                         : c.comm->describe() + " (" + c.comm->backend() + ")" +
                                               (staged.empty() ? "" : ", GPU gradients staged through host memory: " + staged);
  rep_.say(std::string(zero_ ? "ZeRO-1: optimizer state sharded over " + std::to_string(ranks_.size) + " ranks" +
                                   (device_comm_ ? " in GPU memory" : device == Device::kCuda ? " in host memory" : "") +
                                   ", gradients reduce-scattered, parameters allgathered; "
                             : "") +
               "allreduce " + over + ", " +
               (overlap ? "buckets of " + num(c.bucket_mb) + " MiB overlapped with backward" : std::string("after backward")) +
               (c.grad_compress != "none" ? ", gradients " + c.grad_compress : std::string()),
           LogFields(LogLevel::kInfo, {{"event", "comm"}, {"hierarchical", c.comm->hierarchical()}, {"overlap", overlap},
                                     {"gpu_backend", device_comm_ ? "nccl" : device == Device::kCuda ? "host" : "none"}}));
}

void GradientSync::shard_params(Task& task, Optimizer& opt) {
  if (zero3_) zero3_->shard(task, opt);
}

void GradientSync::apply(Optimizer& opt, std::vector<Param>& params, float lr, float clip) {
  if (Zero3* z = zero3()) {
    z->step(opt, lr, clip);
    return;
  }
  if (zero_) {
    comm_bytes_ += zero_->step(opt, params, lr, clip);
    return;
  }
  if (clip > 0) clip_grad_norm(params, clip);
  opt.step(params, lr);
}

void GradientSync::moments(const Optimizer& opt, const std::vector<Param>& params, std::vector<Tensor>* m,
                           std::vector<Tensor>* v) {
  if (Zero3* z = zero3()) return z->gather_moments(opt, m, v);
  if (zero_) return zero_->gather_moments(opt, params, m, v);
  *m = opt.first_moments();
  *v = opt.second_moments();
}

StateBytes GradientSync::state_bytes(const Optimizer& opt, const std::vector<Param>& params) const {
  if (zero3_ && zero3_->sharded()) return {zero3_->param_bytes(), zero3_->grad_bytes(), zero3_->optimizer_bytes()};
  StateBytes b;
  for (const Param& p : params) {
    b.params += static_cast<size_t>(p.value.numel()) * sizeof(float);
    b.grads += static_cast<size_t>(p.grad.numel()) * sizeof(float);
  }
  b.optimizer = optimizer_bytes(opt);
  return b;
}

size_t GradientSync::optimizer_bytes(const Optimizer& opt) const {
  if (zero_) return zero_->state_bytes();
  size_t n = 0;
  for (const auto* ts : {&opt.first_moments(), &opt.second_moments()})
    for (const Tensor& t : *ts) n += static_cast<size_t>(t.numel()) * sizeof(float);
  return n;
}

void GradientSync::begin(std::vector<Param>& params) {
  if (ranks_.many() && !zero3_) exchange_.begin(*ranks_.comm, params);
}

StepVotes GradientSync::finish(StepVotes mine, float weight, CheckpointWriter& ckpt, int64_t step) {
  if (!ranks_.many()) {
    mine.time_due = ckpt.time_due();
    return mine;
  }
  const auto shard = ckpt.shard_flags();
  std::vector<float> extras{static_cast<float>(mine.loss) * weight, mine.finite ? 0.0f : 1.0f, mine.stop ? 1.0f : 0.0f,
                            shard.first, shard.second, ranks_.me == 0 && ckpt.time_due() ? 1.0f : 0.0f};
  if (zero3_) {  // the gradients went out as backward finished each layer
    zero3_->finish_backward();
    ranks_.comm->allreduce_sum(extras.data(), extras.size());
    comm_bytes_ += extras.size() * sizeof(float) + (zero3_->bytes_sent() - sent3_);
    sent3_ = zero3_->bytes_sent();
  } else {
    exchange_.finish(extras, step);
    comm_bytes_ += exchange_.last_bytes();
  }
  ckpt.agree(extras[3], extras[4]);
  report_compression(step);
  StepVotes all;
  all.loss = extras[0];
  all.finite = extras[1] == 0.0f;  // every rank now makes the same decision
  all.stop = extras[2] > 0.0f;
  all.time_due = extras[5] > 0.0f;
  return all;
}

void GradientSync::report_compression(int64_t step) {
  if (reported_compression_ || exchange_.last_bytes() >= exchange_.plain_bytes()) return;
  reported_compression_ = true;
  const double ratio = static_cast<double>(exchange_.plain_bytes()) / exchange_.last_bytes();
  rep_.say("gradient compression " + compress_ + " from step " + std::to_string(step + 1) + ": " +
               std::to_string(exchange_.last_bytes()) + " bytes per step instead of " +
               std::to_string(exchange_.plain_bytes()) + " (" + num(ratio) + "x fewer)",
           LogFields(LogLevel::kInfo, {{"event", "compression"}, {"ratio", ratio}}));
}

}  // namespace loom::rt

// train_config.hpp — everything a training run is told (Contract 3's options, the launcher's
// environment), with one strict check of every value before anything is built.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/choice.hpp"
#include "loom/rt/comm/comm.hpp"
#include "loom/rt/comm/balancer.hpp"
#include "loom/rt/io/data.hpp"
#include "loom/rt/nn/gpt.hpp"
#include "loom/rt/nn/optim.hpp"

namespace loom::rt {

// loom-train's choices: each enum's words are its ChoiceWords (below), read and printed as words.
// (Attention is gpt.hpp's, Schedule and OptimKind optim.hpp's, Balance balancer.hpp's.)
enum class ModelKind { kMlp, kGpt };
enum class DeviceChoice { kAuto, kCpu, kCuda };
enum class GemmChoice { kAuto, kOpenblas, kOnednn };
enum class LogFormat { kText, kJson };
enum class Offload { kNone, kOptimizer };
enum class GpuBackend { kAuto, kNccl, kHost };
enum class Precision { kFp32, kFp16, kBf16 };

struct TrainConfig {
  ModelKind model = ModelKind::kMlp;
  std::string text_path;             // gpt: the training text
  std::string token_files;           // gpt: llm.c token files (a path or a glob) instead of a text
  int vocab = 50257;                 // gpt on token files: the vocabulary (GPT-2's by default)
  int context = 64, gpt_layers = 2, heads = 4, embd = 64;
  float dropout = 0.0f;
  bool recompute = false;            // gpt: recompute each block's activations in backward
  Attention attention = Attention::kAuto;
  std::vector<int> layers{784, 512, 512, 10};
  std::string data_dir = kFashionMnistDir;
  // mlp: image augmentation (shift:N,flip,noise:S), a seeded subset of the training images
  // (0: all) and within-class mixup samples added to each epoch (io/augment.hpp).
  std::string augment;
  int64_t train_subset = 0;
  int64_t synthetic = 0;
  int epochs = 1;
  int64_t steps = 0;  // > 0: stop after this many steps (0: --epochs decides)
  int global_batch = 128;
  float lr = 0.05f;
  OptimConfig optim;
  Schedule schedule = Schedule::kConstant;
  int64_t warmup = 0;
  // Resuming with another --steps/--epochs: re-plan the cosine schedule over the new total
  // (a constant schedule needs no re-plan).
  bool lr_replan = false;
  float clip = 0.0f;
  uint64_t seed = 1;
  int threads = 1;
  DeviceChoice device = DeviceChoice::kAuto;  // the MLP runs on either; gpt on the CPU
  GemmChoice gemm = GemmChoice::kAuto;
  bool evaluate = true;  // false: no test-set evaluation after each epoch (benchmarks)
  int log_every = 100;
  // Steps between test-set evaluations, each at the end of a pass over the data (0: after every
  // pass for the MLP, every --log-every steps for gpt, whose pass over a small file is short).
  int eval_every = 0;
  LogFormat log_format = LogFormat::kText;
  std::string metrics_file;
  std::string tensorboard_dir;            // --tensorboard: event files of the run's scalars (rank 0)
  int metrics_port = -1;                  // --metrics-port: Prometheus endpoint on rank 0 (-1: none, 0: any port)
  std::string metrics_bind = "127.0.0.1";
  std::string mllog_path;  // --mllog: MLPerf-style :::MLLOG lines (rank 0)
  std::string config_path;  // --config FILE, when given (the MLPerf log's config_filename)
  std::string export_path;
  // mlp: start from a model file's weights (its widths must equal --layers) instead of random ones.
  std::string init_path;
  // mlp: quantization-aware training (fake int8 in the forward pass, CPU); --export then writes
  // the INT8 model (Contract 7).
  bool qat = false;
  bool qat_per_tensor = false;  // --qat-weight-scales per-tensor: one weight scale per layer
  // mlp: distillation from a teacher model file (loom-compress distill): the loss is
  // alpha T^2 KL(softmax(t/T) || softmax(s/T)) + (1 - alpha) CE(s, y).
  std::string teacher_path;
  float temperature = 4.0f, alpha = 0.9f;
  // Data parallelism: the communicator (null: one process), how the global batch is split,
  // this rank's device weight (LOOM_DEVICE_WEIGHT) and emulated speed (LOOM_EMULATE_SPEED).
  Communicator* comm = nullptr;
  Balance balance = Balance::kOff;
  int replan_every = 10;
  double device_weight = 1.0;
  std::string gpu_class;  // LOOM_GPU_CLASS from the plugin ("a100", "v100"; empty without it)
  double emulate_speed = 1.0;
  std::string grad_compress = "none";  // none | fp16 | powersgd[:rank=R,start=S]
  int zero = 0;  // 1: ZeRO-1, the optimizer state sharded (train/zero.hpp); 3: ZeRO-3 (train/zero3.hpp)
  // --zero 3's parts: even, or memory (in proportion to each rank's device_memory).
  std::string shard_by = "even";
  double device_memory = 0;  // LOOM_DEVICE_MEMORY: this rank's device memory in bytes (0: not given)
  // optimizer: the sharded optimizer state and its step in host memory (ZeRO-Offload) on CUDA
  // ranks; none: beside the gradients.
  Offload offload = Offload::kNone;
  // Several CUDA ranks: gradients summed by NCCL in device memory (nccl), or staged through host
  // memory over the ranks' transport (host); auto: NCCL where every rank drives a GPU of its own.
  GpuBackend gpu_backend = GpuBackend::kAuto;
  double bucket_mb = 1.0;  // gradient buckets overlapped with backward (0: one exchange after it)
  double comm_timeout = 120.0;  // seconds a collective waits for a peer
  Precision precision = Precision::kFp32;  // fp16/bf16 emulated by rounding on the CPU
  int64_t inject_overflow_step = -1;  // tests: this rank's gradients overflow at that step
  // Checkpoints (Contract 4): DIR/ckpt-<step>.h5 every N steps and/or M minutes, the newest K
  // kept, written in the background with ckpt_async; resume auto | never | FILE.
  std::string ckpt_dir;
  int64_t ckpt_every = 0;
  double ckpt_every_min = 0;
  int ckpt_keep = 3;
  bool ckpt_async = false;
  std::string resume = "auto";
  // Set (non-zero) by SIGUSR1/SIGTERM: finish the step, checkpoint, stop (TrainResult::preempted).
  const std::atomic<int>* stop_signal = nullptr;
};

}  // namespace loom::rt

LOOM_CHOICE(loom::rt::ModelKind, "--model", "mlp", "gpt");
LOOM_CHOICE(loom::rt::DeviceChoice, "--device", "auto", "cpu", "cuda");
LOOM_CHOICE(loom::rt::GemmChoice, "--gemm", "auto", "openblas", "onednn");
LOOM_CHOICE(loom::rt::LogFormat, "--log-format", "text", "json");
LOOM_CHOICE(loom::rt::Offload, "--offload", "none", "optimizer");
LOOM_CHOICE(loom::rt::GpuBackend, "--gpu-backend", "auto", "nccl", "host");
LOOM_CHOICE(loom::rt::Precision, "--precision", "fp32", "fp16", "bf16");

namespace loom::rt {

// Throws Error naming the first option whose value is out of range (counts must be positive,
// choices one of the listed words), the value and what is allowed.
void validate(const TrainConfig& c);

// A number as the logs and metrics print it (%.10g).
std::string num(double v);
// A number as a person reads it in the text log: `decimals` places after the point (rates
// 24967, ETA 1.9); JSON logs and metrics keep num()'s precision.
std::string fixed(double v, int decimals);

}  // namespace loom::rt

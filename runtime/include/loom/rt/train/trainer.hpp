// trainer.hpp — single-process training: `mlp` on Fashion-MNIST or `gpt` on a text file.
// Batches in the seeded epoch order, forward, cross-entropy, backward, optimizer step,
// evaluation each epoch, progress and metrics (JSON lines), and the HDF5 export.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loom/rt/comm.hpp"
#include "loom/rt/data.hpp"
#include "loom/rt/optim.hpp"

namespace loom::rt {

struct TrainConfig {
  std::string model = "mlp";         // mlp | gpt
  std::string text_path;             // gpt: the training text
  int context = 64, gpt_layers = 2, heads = 4, embd = 64;
  float dropout = 0.0f;
  std::vector<int> layers{784, 512, 512, 10};
  std::string data_dir = kFashionMnistDir;
  int epochs = 1;
  int64_t steps = 0;  // > 0: stop after this many steps
  int global_batch = 128;
  float lr = 0.05f;
  OptimConfig optim;
  std::string schedule = "constant";  // constant | cosine
  int64_t warmup = 0;
  float clip = 0.0f;
  uint64_t seed = 1;
  int threads = 1;
  std::string device = "auto";  // auto | cpu | cuda (the MLP runs on either; gpt on the CPU)
  std::string gemm = "auto";  // auto | openblas | onednn
  bool evaluate = true;  // false: no test-set evaluation after each epoch (benchmarks)
  int log_every = 100;
  std::string log_format = "text";  // text | json
  std::string metrics_file;
  std::string export_path;
  // Data parallelism: the communicator (null: one process), how the global batch is split,
  // this rank's device weight (LOOM_DEVICE_WEIGHT) and emulated speed (LOOM_EMULATE_SPEED).
  Communicator* comm = nullptr;
  std::string balance = "off";  // off | static | dynamic
  int replan_every = 10;
  double device_weight = 1.0;
  std::string gpu_class;  // LOOM_GPU_CLASS from the plugin ("a100", "v100"; empty without it)
  double emulate_speed = 1.0;
  std::string grad_compress = "none";  // none | fp16 | powersgd[:rank=R,start=S]
  double bucket_mb = 1.0;
  double comm_timeout = 120.0;  // seconds a collective waits for a peer  // gradient buckets overlapped with backward (0: one exchange after it)
  std::string precision = "fp32";  // fp32 | fp16 | bf16 (emulated by rounding on the CPU)
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

struct TrainResult {
  int64_t steps = 0;
  double samples_per_s = 0;   // training samples per second, evaluation excluded
  double test_accuracy = 0;
  double last_loss = 0;
  double gflops = 0;          // achieved training GFLOP/s
  bool preempted = false;     // stopped early on a signal (a checkpoint was written)
  double loop_seconds = 0;    // wall time of the training loop, checkpoints included, evaluation not
};

// Throws Error for bad configuration or data; `log` receives one human or JSON line at a time.
TrainResult train(const TrainConfig& c, const std::function<void(const std::string&)>& log);

}  // namespace loom::rt

// trainer.hpp — `loom-train`'s training loop: `mlp` on Fashion-MNIST or `gpt` on a text file, on
// one process or data parallel. The loop calls named parts (doc/runtime.md):
// the model task, the batch plan, the gradient sync, the precision policy, the checkpoint
// writer and resume state, the stop signal and the reporter.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "loom/rt/train/train_config.hpp"

namespace loom::rt {

struct TrainResult {
  int64_t steps = 0;
  double samples_per_s = 0;   // training samples per second, evaluation excluded
  double test_accuracy = 0;
  bool evaluated = false;     // test_accuracy comes from an evaluation (not: stopped, or --no-eval)
  double last_loss = 0;
  double gflops = 0;          // achieved training GFLOP/s
  bool preempted = false;     // stopped early on a signal (a checkpoint was written)
  double loop_seconds = 0;    // wall time of the training loop, checkpoints included, evaluation not
  std::string device = "cpu";  // where it trained (cpu | cuda): what --device auto chose
  // This rank's persistent state at the end (sharded: its shards): parameters, gradients, the
  // optimizer's moments.
  size_t param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0;
  size_t peak_memory_bytes = 0;  // this process's peak resident memory (getrusage ru_maxrss)
};

// Throws Error for bad configuration or data; `log` receives one human or JSON line at a time.
TrainResult train(const TrainConfig& c, const std::function<void(const std::string&)>& log);

}  // namespace loom::rt

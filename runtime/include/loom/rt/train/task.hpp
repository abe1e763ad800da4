// task.hpp — what the training loop trains: a model with its data and its loss. The loop is
// the same for every model; mlp_task.cpp and gpt_task.cpp are the two tasks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loom/rt/nn/param_gate.hpp"
#include "loom/rt/tensor/param.hpp"
#include "loom/rt/tensor/tensor.hpp"
#include "loom/rt/train/train_config.hpp"

namespace loom::rt {

struct Eval {
  double accuracy = 0, loss = 0;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string describe() const = 0;
  virtual int64_t steps_per_epoch(int batch) const = 0;
  // Forward and backward on samples [first, first + count) of the epoch's order: the mean loss
  // over them, and the gradients (overwritten) of their summed loss over `of` samples: a rank's
  // share of a global batch of `of` gives its part of the gradient of the global mean, which the
  // ranks only have to add (count == of: the gradient of the mean).
  // `ready(i)`, when set, is told as soon as params()[i].grad is final.
  virtual double train_step(int64_t epoch, int64_t first, int count, int of, const std::function<void(size_t)>& ready) = 0;
  virtual Eval evaluate() = 0;
  virtual std::vector<Param>& params() = 0;
  // --zero 3 (param_gate.hpp): the model's parameter groups, and the gate it tells before and
  // after using each (null: every parameter whole).
  virtual std::vector<ParamGroup> param_groups() const = 0;
  virtual void set_param_gate(ParamGate* gate) = 0;
  virtual std::string config_json() const = 0;
  virtual double train_flops(int batch) const = 0;
  // Samples in the training and evaluation sets (MLPerf's train_samples and eval_samples).
  virtual int64_t train_size() const { return 0; }
  virtual int64_t eval_size() const { return 0; }
  // Writes the trained model (--export): a float model file of params(), unless the task
  // trains something else (QAT: the INT8 model).
  virtual void export_model(const std::string& path);
  // Random-number state beyond the seed (dropout), for checkpoints.
  virtual std::string rng_state() const { return ""; }
  virtual void set_rng_state(const std::string&) {}
};


// The two tasks (mlp_task.cpp: on `device`; gpt_task.cpp: on the CPU). Throw Error for bad
// data or options that do not fit the data.
std::unique_ptr<Task> make_mlp_task(const TrainConfig& c, Device device);
std::unique_ptr<Task> make_gpt_task(const TrainConfig& c, Device device);

}  // namespace loom::rt

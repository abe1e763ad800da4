// mlp.hpp — the `mlp` model: Linear layers with ReLU between them, explicit forward and
// backward, parameters named and laid out as PyTorch's state_dict (fcN.weight [out,in], fcN.bias).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loom/rt/nn/param_gate.hpp"
#include "loom/rt/tensor/int8.hpp"
#include "loom/rt/tensor/param.hpp"
#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt {

class Mlp {
 public:
  // widths: {784, 512, 512, 10}; weights drawn like torch.nn.Linear (U(-1/sqrt(in), 1/sqrt(in))).
  Mlp(std::vector<int> widths, uint64_t seed);

  const std::vector<int>& widths() const { return widths_; }
  // x [B, widths[0]] -> logits [B, widths.back()]; keeps what backward needs.
  const Tensor& forward(const Tensor& x);
  // dlogits [B, out] -> every parameter's grad: overwritten, or added to when `accumulate`
  // (so a training step needs no separate zeroing pass). `ready(i)`, when given, is called as
  // soon as params()[i].grad is final, last layer first, so its exchange can start early.
  void backward(const Tensor& dlogits, bool accumulate = false, const std::function<void(size_t)>& ready = {});
  void zero_grad();
  // Moves parameters and gradients to `device`; forward then expects inputs there.
  void to(Device device);
  Device device() const { return device_; }
  // Every layer's input after the last forward pass: [0] the model's input, [l] layer l's (a ReLU output).
  const std::vector<Tensor>& activations() const { return acts_; }
  std::vector<Param>& params() { return params_; }
  const std::vector<Param>& params() const { return params_; }
  int64_t num_params() const;
  // FLOPs of one training step (forward + backward) on a batch of `batch` rows.
  double train_flops(int batch) const;
  std::string config_json() const;
  // Fully sharded training (param_gate.hpp): one group per layer (its weight and bias).
  std::vector<ParamGroup> param_groups() const;
  void set_gate(ParamGate* gate) { gate_ = gate; }

  // Quantization-aware training (CPU): forward fake-quantizes each Linear's weights (per output
  // channel, symmetric int8, as loom-compress quantize does) and its input (per tensor, uint8
  // affine over a moving-average min/max, updated while training); backward passes gradients
  // straight through, zeroed where an input fell outside its quantization range.
  void set_fake_quant(bool on, bool per_tensor_weights = false);
  bool fake_quant() const { return fake_quant_; }
  bool fake_quant_per_tensor() const { return fq_per_tensor_; }
  void set_training(bool on) { training_ = on; }
  // Each layer's observed input quantization (valid after a forward pass with fake_quant on).
  std::vector<int8::QParams> observed_inputs() const;

 private:
  ParamGate* gate_ = nullptr;
  void fake_quant_layer(int l);
  bool fake_quant_ = false, fq_per_tensor_ = false, training_ = true;
  std::vector<std::pair<float, float>> ranges_;  // per layer input: moving-average min and max
  std::vector<Tensor> xq_, wq_;                   // fake-quantized inputs and weights
  std::vector<int> widths_;
  Device device_ = Device::kCpu;
  std::vector<Param> params_;  // fc1.weight, fc1.bias, fc2.weight, ...
  std::vector<Tensor> acts_;   // acts_[0] = input, acts_[i] = output of layer i (after ReLU)
  std::vector<Tensor> dacts_;  // gradients with respect to acts_[i]
};

// Checks widths: at least input and output, all positive; throws Error naming the problem.
std::vector<int> parse_widths(const std::string& text);

}  // namespace loom::rt

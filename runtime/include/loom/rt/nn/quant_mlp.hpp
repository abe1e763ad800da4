// quant_mlp.hpp — the INT8 MLP that loom-serve and loom-compress eval run: int8 weights per
// output channel (symmetric), uint8 activations per tensor (affine), float logits. Every Linear
// runs int8::Linear, its requantization fused into the GEMM's epilogue, so activations stay
// uint8 from the input's quantization to the last layer's float output.
#pragma once

#include <string>
#include <vector>

#include "loom/rt/nn/mlp.hpp"
#include "loom/rt/tensor/int8.hpp"
#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt {

struct QuantLinear {
  Tensor w;                    // int8 [out, in]
  std::vector<float> w_scale;  // one per output channel; zero point 0
  Tensor bias;                 // float32 [out]
  int8::QParams input;         // this layer's input activation
};

class QuantMlp {
 public:
  // Throws Error when the layers do not chain (widths), or a scale is not positive.
  QuantMlp(std::vector<int> widths, std::vector<QuantLinear> layers);
  // Quantizes a float MLP: weights per channel as torch.quantize_per_channel, `inputs[l]` the
  // calibrated parameters of layer l's input.
  // `per_tensor`: one weight scale per layer (stored per channel, all equal).
  static QuantMlp quantize(const Mlp& m, const std::vector<int8::QParams>& inputs, bool per_tensor = false);
  const std::vector<int>& widths() const { return widths_; }
  const std::vector<QuantLinear>& layers() const { return layers_; }
  int64_t num_params() const;
  // x float [B, widths[0]] (preprocessed, on the host) -> logits float [B, widths.back()] on the
  // host. Thread-safe. On CUDA the input is quantized on the host and every layer runs
  // cuBLASLt's int8 GEMM with the same epilogue (ops::int8_linear_cuda).
  Tensor forward(const Tensor& x) const;
  // Moves the layers' integers, row sums, scales and biases to `device` (Error without CUDA).
  void to(Device device);
  Device device() const { return device_; }

 private:
  struct CudaLayer {
    Tensor w, rowsum, scale, bias;  // on the device: int8 [out, in], int32 [out], float [out] x2
  };
  std::vector<int> widths_;
  std::vector<QuantLinear> layers_;
  std::vector<int8::Linear> kernels_;
  Device device_ = Device::kCpu;
  std::vector<CudaLayer> cuda_;
  Tensor forward_cuda(const Tensor& a) const;
};

}  // namespace loom::rt

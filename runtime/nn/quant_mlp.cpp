// quant_mlp.cpp — building the INT8 MLP's fused layers and running them.
#include "loom/rt/nn/quant_mlp.hpp"

#include <cmath>

#include "loom/rt/tensor/ops.hpp"

namespace loom::rt {

QuantMlp::QuantMlp(std::vector<int> widths, std::vector<QuantLinear> layers)
    : widths_(std::move(widths)), layers_(std::move(layers)) {
  if (widths_.size() < 2 || layers_.size() + 1 != widths_.size())
    throw Error("int8 mlp: " + std::to_string(layers_.size()) + " layers for " + std::to_string(widths_.size()) + " widths");
  for (size_t l = 0; l < layers_.size(); ++l) {
    const QuantLinear& q = layers_[l];
    const int in = widths_[l], out = widths_[l + 1];
    if (q.w.dtype() != DType::kI8 || q.w.shape() != std::vector<int64_t>{out, in} || q.bias.numel() != out ||
        q.w_scale.size() != static_cast<size_t>(out))
      throw Error("int8 mlp: layer " + std::to_string(l + 1) + " does not match widths " + std::to_string(in) + "->" +
                  std::to_string(out));
    if (!(q.input.scale > 0) || !std::isfinite(q.input.scale) || q.input.zero_point < 0 ||
        q.input.zero_point > int8::kActMax)
      throw Error("int8 mlp: layer " + std::to_string(l + 1) + " has a bad input scale or zero point");
    const bool last = l + 1 == layers_.size();
    int8::Epilogue e;
    e.out = last ? int8::Out::kF32 : int8::Out::kU8;
    e.relu = !last;
    const float next = last ? 1.0f : layers_[l + 1].input.scale;
    if (!last) e.out_zero_point = layers_[l + 1].input.zero_point;
    for (int n = 0; n < out; ++n) {
      e.scale.push_back(q.input.scale * q.w_scale[static_cast<size_t>(n)] / next);
      e.bias.push_back(q.bias.f32()[n] / next);
    }
    kernels_.emplace_back(out, in, q.w.data<int8_t>(), q.input.zero_point, std::move(e));
  }
}

QuantMlp QuantMlp::quantize(const Mlp& m, const std::vector<int8::QParams>& inputs, bool per_tensor) {
  const auto& w = m.widths();
  if (inputs.size() + 1 != w.size()) throw Error("int8 mlp: need one input quantization per layer");
  std::vector<QuantLinear> layers;
  for (size_t l = 0; l + 1 < w.size(); ++l) {
    const Tensor& wf = m.params()[2 * l].value;
    QuantLinear q;
    q.w_scale = int8::symmetric_scales(wf.f32(), w[l + 1], w[l], per_tensor);
    q.w = Tensor::empty({w[l + 1], w[l]}, DType::kI8);
    int8::quantize_per_channel(wf.f32(), w[l + 1], w[l], q.w_scale.data(), q.w.data<int8_t>());
    q.bias = m.params()[2 * l + 1].value.clone();
    q.input = inputs[l];
    layers.push_back(std::move(q));
  }
  return QuantMlp(w, std::move(layers));
}

int64_t QuantMlp::num_params() const {
  int64_t n = 0;
  for (const auto& q : layers_) n += q.w.numel() + q.bias.numel();
  return n;
}

void QuantMlp::to(Device device) {
  if (device == device_) return;
  cuda_.clear();
  if (device == Device::kCuda) {
    for (size_t l = 0; l < layers_.size(); ++l) {
      const QuantLinear& q = layers_[l];
      const int out = widths_[l + 1], in = widths_[l];
      Tensor rowsum = Tensor::empty({out}, DType::kI32), scale = Tensor::empty({out}), bias = Tensor::empty({out});
      const int8::Epilogue& e = kernels_[l].epilogue();
      for (int n = 0; n < out; ++n) {
        int32_t s = 0;
        for (int t = 0; t < in; ++t) s += q.w.data<int8_t>()[static_cast<int64_t>(n) * in + t];
        rowsum.data<int32_t>()[n] = s;
        scale.f32()[n] = e.scale[static_cast<size_t>(n)];
        bias.f32()[n] = e.bias[static_cast<size_t>(n)];
      }
      cuda_.push_back({q.w.to(device), rowsum.to(device), scale.to(device), bias.to(device)});
    }
  }
  device_ = device;
}

Tensor QuantMlp::forward_cuda(const Tensor& a) const {
  const int rows = static_cast<int>(a.dim(0));
  Tensor x = a.to(Device::kCuda);
  for (size_t l = 0; l < cuda_.size(); ++l) {
    const bool last = l + 1 == cuda_.size();
    const int8::Epilogue& e = kernels_[l].epilogue();
    Tensor y = Tensor::empty({rows, widths_[l + 1]}, last ? DType::kF32 : DType::kI8, Device::kCuda);
    ops::int8_linear_cuda(rows, widths_[l + 1], widths_[l], x.data<int8_t>(), layers_[l].input.zero_point,
                          cuda_[l].w.data<int8_t>(), cuda_[l].rowsum.data<int32_t>(), cuda_[l].scale.f32(),
                          cuda_[l].bias.f32(), e.relu, last ? 1 : 2, e.out_zero_point, int8::kActMax, y.data<void>());
    x = y;
  }
  return x.to(Device::kCpu);
}

Tensor QuantMlp::forward(const Tensor& x) const {
  if (x.ndim() != 2 || x.dim(1) != widths_[0])
    throw Error("input of shape " + x.shape_str() + " does not match the model's input width " +
                std::to_string(widths_[0]));
  const int rows = static_cast<int>(x.dim(0));
  Tensor a = Tensor::empty({rows, widths_[0]}, DType::kI8);  // holds uint8 codes
  int8::quantize_u8(x.f32(), x.numel(), layers_[0].input, a.data<uint8_t>());
  if (device_ == Device::kCuda) return forward_cuda(a);
  for (size_t l = 0; l + 1 < kernels_.size(); ++l) {
    Tensor next = Tensor::empty({rows, widths_[l + 1]}, DType::kI8);
    kernels_[l].run(a.data<uint8_t>(), rows, next.data<uint8_t>());
    a = next;
  }
  Tensor y = Tensor::empty({rows, widths_.back()});
  kernels_.back().run(a.data<uint8_t>(), rows, y.f32());
  return y;
}

}  // namespace loom::rt

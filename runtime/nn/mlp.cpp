// mlp.cpp — forward and backward of the MLP. Shapes: X [B,in], W [out,in], Y [B,out].
//   forward:  Y = X W^T + b, then ReLU except after the last layer
//   backward: dW += dY^T X, db += sum_rows dY, dX = dY W (then ReLU mask of the layer below)
#include "loom/rt/nn/mlp.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "loom/json_text.hpp"
#include "loom/rt/tensor/ops.hpp"

namespace loom::rt {

std::vector<int> parse_widths(const std::string& text) {
  std::vector<int> w;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty() || item.size() > 7 || item.find_first_not_of("0123456789") != std::string::npos)
      throw Error("--layers: '" + text + "' is not a comma-separated list of positive widths");
    int v = std::stoi(item);
    if (v <= 0) throw Error("--layers: widths must be positive, got " + item);
    w.push_back(v);
  }
  if (w.size() < 2) throw Error("--layers: need at least an input and an output width, got '" + text + "'");
  return w;
}

Mlp::Mlp(std::vector<int> widths, uint64_t seed) : widths_(std::move(widths)) {
  std::mt19937_64 rng(seed);
  for (size_t l = 0; l + 1 < widths_.size(); ++l) {
    int in = widths_[l], out = widths_[l + 1];
    float bound = 1.0f / std::sqrt(static_cast<float>(in));
    std::uniform_real_distribution<float> u(-bound, bound);
    Param w{"fc" + std::to_string(l + 1) + ".weight", Tensor::empty({out, in}), Tensor::zeros({out, in})};
    Param b{"fc" + std::to_string(l + 1) + ".bias", Tensor::empty({out}), Tensor::zeros({out})};
    for (int64_t i = 0; i < w.value.numel(); ++i) w.value.f32()[i] = u(rng);
    for (int64_t i = 0; i < b.value.numel(); ++i) b.value.f32()[i] = u(rng);
    params_.push_back(std::move(w));
    params_.push_back(std::move(b));
  }
}

int64_t Mlp::num_params() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p.value.numel();
  return n;
}

double Mlp::train_flops(int batch) const {
  double f = 0;
  for (size_t l = 0; l + 1 < widths_.size(); ++l) f += 6.0 * batch * widths_[l] * widths_[l + 1];
  return f;
}

std::vector<ParamGroup> Mlp::param_groups() const {
  std::vector<ParamGroup> g;
  for (size_t l = 0; l + 1 < widths_.size(); ++l) g.push_back({2 * l, 2 * l + 2});
  return g;
}

const Tensor& Mlp::forward(const Tensor& x) {
  const int layers = static_cast<int>(widths_.size()) - 1;
  if (x.ndim() != 2 || x.dim(1) != widths_[0])
    throw Error("input of shape " + x.shape_str() + " does not match the model's input width " +
                std::to_string(widths_[0]));
  LOOM_CHECK(x.device() == device_, "the input is not on the model's device");
  const int batch = static_cast<int>(x.dim(0));
  acts_.resize(static_cast<size_t>(layers) + 1);
  acts_[0] = x;
  for (int l = 0; l < layers; ++l) {
    GateScope use(gate_, static_cast<size_t>(l), false);
    const int in = widths_[l], out = widths_[l + 1];
    Tensor& y = acts_[l + 1];
    if (!y.defined() || y.dim(0) != batch || y.device() != device_) y = Tensor::empty({batch, out}, DType::kF32, device_);
    if (fake_quant_) fake_quant_layer(l);
    const float* xin = fake_quant_ ? xq_[l].f32() : acts_[l].f32();
    const float* w = fake_quant_ ? wq_[l].f32() : params_[2 * l].value.f32();
    ops::gemm(device_, false, true, batch, out, in, 1.0f, xin, in, w, in, 0.0f, y.f32(), out);
    ops::bias_act(device_, y.f32(), params_[2 * l + 1].value.f32(), batch, out,
                  l + 1 < layers ? cpu::Act::kRelu : cpu::Act::kNone);
  }
  return acts_.back();
}

void Mlp::backward(const Tensor& dlogits, bool accumulate, const std::function<void(size_t)>& ready) {
  const int layers = static_cast<int>(widths_.size()) - 1;
  const int batch = static_cast<int>(acts_[0].dim(0));
  LOOM_CHECK(dlogits.ndim() == 2 && dlogits.dim(0) == batch && dlogits.dim(1) == widths_.back(),
             "dlogits " + dlogits.shape_str() + " does not match the last forward pass");
  dacts_.resize(static_cast<size_t>(layers) + 1);
  const Tensor* dy = &dlogits;
  for (int l = layers - 1; l >= 0; --l) {
    GateScope use(gate_, static_cast<size_t>(l), true);
    const int in = widths_[l], out = widths_[l + 1];
    const float* xin = fake_quant_ ? xq_[l].f32() : acts_[l].f32();
    ops::gemm(device_, true, false, out, in, batch, 1.0f, dy->f32(), out, xin, in, accumulate ? 1.0f : 0.0f,
              params_[2 * l].grad.f32(), in);
    if (!accumulate) params_[2 * l + 1].grad.fill(0.0f);
    ops::bias_grad(device_, dy->f32(), params_[2 * l + 1].grad.f32(), batch, out);
    if (ready) {
      ready(static_cast<size_t>(2 * l));
      ready(static_cast<size_t>(2 * l + 1));
    }
    if (l == 0) break;  // no gradient for the input
    Tensor& dx = dacts_[l];
    if (!dx.defined() || dx.dim(0) != batch || dx.device() != device_) dx = Tensor::empty({batch, in}, DType::kF32, device_);
    ops::gemm(device_, false, false, batch, in, out, 1.0f, dy->f32(), out,
              fake_quant_ ? wq_[l].f32() : params_[2 * l].value.f32(), in, 0.0f, dx.f32(), in);
    if (fake_quant_) {  // straight-through, clipped to the range the input was quantized to
      const int8::QParams q = observed_inputs()[static_cast<size_t>(l)];
      const float lo = -q.zero_point * q.scale, hi = (int8::kActMax - q.zero_point) * q.scale;
      const float* a = acts_[l].f32();
      float* d = dx.f32();
      for (int64_t i = 0, n = static_cast<int64_t>(batch) * in; i < n; ++i)
        if (a[i] < lo || a[i] > hi) d[i] = 0;
    }
    ops::relu_backward(device_, dx.f32(), acts_[l].f32(), static_cast<int64_t>(batch) * in);
    dy = &dx;
  }
}

void Mlp::to(Device device) {
  if (device == device_) return;
  for (auto& p : params_) {
    p.value = p.value.to(device);
    p.grad = p.grad.to(device);
  }
  acts_.clear();
  dacts_.clear();
  device_ = device;
}

void Mlp::set_fake_quant(bool on, bool per_tensor_weights) {
  if (on && device_ != Device::kCpu) throw Error("--qat runs on the CPU in this build (use --device cpu)");
  fake_quant_ = on;
  fq_per_tensor_ = per_tensor_weights;
  ranges_.clear();
}

std::vector<int8::QParams> Mlp::observed_inputs() const {
  std::vector<int8::QParams> q;
  for (const auto& r : ranges_) q.push_back(int8::affine_from_range(r.first, r.second));
  return q;
}

// Layer l's input and weights as the INT8 model will see them: the observer (a moving average
// of the batch's min and max, PyTorch's averaging constant 0.01) updated while training.
void Mlp::fake_quant_layer(int l) {
  const size_t L = static_cast<size_t>(l);
  const Tensor& x = acts_[L];
  const int64_t n = x.numel();
  if (ranges_.size() < widths_.size() - 1) ranges_.resize(widths_.size() - 1, {0.0f, -1.0f});
  if (training_ || ranges_[L].second < ranges_[L].first) {
    const float* v = x.f32();
    float lo = v[0], hi = v[0];
    for (int64_t i = 1; i < n; ++i) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
    auto& r = ranges_[L];
    if (r.second < r.first) r = {lo, hi};
    else r = {r.first + 0.01f * (lo - r.first), r.second + 0.01f * (hi - r.second)};
  }
  const int8::QParams q = int8::affine_from_range(ranges_[L].first, ranges_[L].second);
  xq_.resize(ranges_.size());
  wq_.resize(ranges_.size());
  if (!xq_[L].defined() || xq_[L].numel() != n) xq_[L] = Tensor::empty(x.shape());
  const float* v = x.f32();
  float* o = xq_[L].f32();
  for (int64_t i = 0; i < n; ++i)
    o[i] = static_cast<float>(int8::quantize_value(v[i], q.scale, q.zero_point, 0, int8::kActMax) - q.zero_point) * q.scale;
  const Tensor& w = params_[2 * L].value;
  const int out = widths_[L + 1], in = widths_[L];
  if (!wq_[L].defined()) wq_[L] = Tensor::empty(w.shape());
  const std::vector<float> s = int8::symmetric_scales(w.f32(), out, in, fq_per_tensor_);
  for (int r = 0; r < out; ++r)
    for (int c = 0; c < in; ++c) {
      const int64_t i = static_cast<int64_t>(r) * in + c;
      wq_[L].f32()[i] = static_cast<float>(int8::quantize_value(w.f32()[i], s[static_cast<size_t>(r)], 0, -128, 127)) *
                        s[static_cast<size_t>(r)];
    }
}

void Mlp::zero_grad() {
  for (auto& p : params_) p.grad.fill(0.0f);
}

std::string Mlp::config_json() const {
  return json_text(nlohmann::ordered_json{{"type", "mlp"}, {"layers", widths_}, {"activation", "relu"},
                                          {"preprocess", {{"scale", 1.0 / 255.0}, {"mean", 0.0}, {"std", 1.0}}}});
}

}  // namespace loom::rt

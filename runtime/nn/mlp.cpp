// mlp.cpp — forward and backward of the MLP. Shapes: X [B,in], W [out,in], Y [B,out].
//   forward:  Y = X W^T + b, then ReLU except after the last layer
//   backward: dW += dY^T X, db += sum_rows dY, dX = dY W (then ReLU mask of the layer below)
#include "loom/rt/nn/mlp.hpp"

#include <cmath>
#include <random>
#include <sstream>

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
    const int in = widths_[l], out = widths_[l + 1];
    Tensor& y = acts_[l + 1];
    if (!y.defined() || y.dim(0) != batch || y.device() != device_) y = Tensor::empty({batch, out}, DType::kF32, device_);
    ops::gemm(device_, false, true, batch, out, in, 1.0f, acts_[l].f32(), in, params_[2 * l].value.f32(), in, 0.0f,
              y.f32(), out);
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
    const int in = widths_[l], out = widths_[l + 1];
    ops::gemm(device_, true, false, out, in, batch, 1.0f, dy->f32(), out, acts_[l].f32(), in, accumulate ? 1.0f : 0.0f,
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
    ops::gemm(device_, false, false, batch, in, out, 1.0f, dy->f32(), out, params_[2 * l].value.f32(), in, 0.0f,
              dx.f32(), in);
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

void Mlp::zero_grad() {
  for (auto& p : params_) p.grad.fill(0.0f);
}

std::string Mlp::config_json() const {
  std::ostringstream os;
  os << "{\"type\":\"mlp\",\"layers\":[";
  for (size_t i = 0; i < widths_.size(); ++i) os << (i ? "," : "") << widths_[i];
  os << "],\"activation\":\"relu\",\"preprocess\":{\"scale\":0.00392156862745098,\"mean\":0.0,\"std\":1.0}}";
  return os.str();
}

}  // namespace loom::rt

// mlp_task.cpp — the `mlp` task: the MLP on Fashion-MNIST images in the seeded epoch order,
// softmax cross-entropy, test-set accuracy; on the CPU or on CUDA.
#include <algorithm>

#include "loom/rt/io/augment.hpp"
#include "loom/rt/io/data.hpp"
#include "loom/rt/io/model_io.hpp"
#include "loom/rt/io/quant_model.hpp"
#include "loom/rt/nn/mlp.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/ops.hpp"
#include "loom/rt/train/task.hpp"

namespace loom::rt {

namespace {

std::string widths_str(const std::vector<int>& w) {
  std::string s;
  for (size_t i = 0; i < w.size(); ++i) s += (i ? "," : "") + std::to_string(w[i]);
  return s;
}

class MlpTask : public Task {
 public:
  MlpTask(const TrainConfig& c, Device device)
      : train_(training_set(c)), test_(load_fashion_mnist(c.data_dir, "t10k")),
        source_(train_, parse_augment(c.augment), c.synthetic, c.seed), model_(initial_model(c)), seed_(c.seed),
        device_(device), qat_(c.qat), T_(c.temperature), alpha_(c.alpha) {
    const int features = static_cast<int>(train_.images.dim(1));
    if (c.layers.front() != features)
      throw Error("--layers starts at " + std::to_string(c.layers.front()) + " but Fashion-MNIST images have " +
                  std::to_string(features) + " inputs");
    if (c.layers.back() != train_.classes)
      throw Error("--layers ends at " + std::to_string(c.layers.back()) + " but Fashion-MNIST has " +
                  std::to_string(train_.classes) + " classes");
    if (c.global_batch > source_.size()) throw Error("--global-batch is larger than the training set");
    dlogits_ = Tensor::empty({c.global_batch, c.layers.back()}, DType::kF32, device_);
    model_.to(device_);
    if (c.qat) model_.set_fake_quant(true, c.qat_per_tensor);
    if (!c.teacher_path.empty()) load_teacher(c);
  }
  static Dataset training_set(const TrainConfig& c) {
    Dataset d = load_fashion_mnist(c.data_dir, "train");
    return c.train_subset > 0 ? subset(d, c.train_subset, c.seed) : d;
  }
  static Mlp initial_model(const TrainConfig& c) {
    if (c.init_path.empty()) return Mlp(c.layers, c.seed);
    Mlp m = load_mlp(c.init_path);
    if (m.widths() != c.layers)
      throw Error("--init " + c.init_path + " has layers " + widths_str(m.widths()) + " but --layers is " +
                  widths_str(c.layers));
    return m;
  }
  void load_teacher(const TrainConfig& c) {
    if (device_ != Device::kCpu) throw Error("distillation runs on the CPU in this build (use --device cpu)");
    teacher_ = std::make_unique<Mlp>(load_mlp(c.teacher_path));
    const auto& tw = teacher_->widths();
    if (tw.front() != c.layers.front() || tw.back() != c.layers.back())
      throw Error("teacher " + c.teacher_path + " maps " + std::to_string(tw.front()) + " inputs to " +
                  std::to_string(tw.back()) + " outputs but the student maps " + std::to_string(c.layers.front()) +
                  " to " + std::to_string(c.layers.back()));
  }
  void export_model(const std::string& path) override {
    if (!qat_) return Task::export_model(path);
    const bool pt = model_.fake_quant_per_tensor();
    save_quant_mlp(path, QuantMlp::quantize(model_, model_.observed_inputs(), pt), model_.config_json(), "qat", pt);
  }
  std::string describe() const override {
    int64_t n = 0;
    for (const auto& p : model_.params()) n += p.value.numel();
    return "mlp with " + std::to_string(n) + " parameters on " + std::to_string(train_.size()) +
           " Fashion-MNIST images" + (source_.size() > train_.size() ? " + " + std::to_string(source_.size() - train_.size()) +
           " synthetic" : "") + ", on " + (device_ == Device::kCuda ? "cuda" : "cpu");
  }
  int64_t steps_per_epoch(int batch) const override { return source_.size() / batch; }  // partial batch dropped
  double train_step(int64_t epoch, int64_t first, int batch, int of, const std::function<void(size_t)>& ready) override {
    if (epoch != order_epoch_) order_ = epoch_order(source_.size(), seed_, order_epoch_ = epoch);
    source_.gather(order_, first, first + batch, epoch, &x_, &y_);
    if (dlogits_.dim(0) != batch) dlogits_ = Tensor::empty({batch, dlogits_.dim(1)}, DType::kF32, device_);
    if (device_ == Device::kCpu) {
      const Tensor& logits = model_.forward(x_);
      const int cols = static_cast<int>(logits.dim(1));
      double loss = teacher_ ? cpu::distill_xent(logits.f32(), teacher_->forward(x_).f32(), y_.data(), dlogits_.f32(),
                                                 batch, cols, T_, alpha_, of)
                             : cpu::softmax_xent(logits.f32(), y_.data(), dlogits_.f32(), batch, cols, of);
      model_.backward(dlogits_, false, ready);
      return loss;
    }
    Tensor labels = Tensor::empty({batch}, DType::kI32);
    std::copy(y_.begin(), y_.end(), labels.data<int32_t>());
    Tensor xd = x_.to(device_), yd = labels.to(device_);
    const Tensor& logits = model_.forward(xd);
    double loss = ops::softmax_xent(device_, logits.f32(), yd.data<int32_t>(), dlogits_.f32(), batch,
                                    static_cast<int>(logits.dim(1)), of);
    model_.backward(dlogits_, false, ready);  // buckets go out (device events) as backward runs, as on the CPU
    return loss;
  }
  Eval evaluate() override {
    model_.set_training(false);  // QAT: evaluation does not move the observers
    struct Back {
      Mlp& m;
      ~Back() { m.set_training(true); }
    } back{model_};
    const int64_t n = test_.size(), chunk = 1000;
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    Tensor x;
    std::vector<int32_t> y, pred;
    int64_t correct = 0;
    double loss = 0;
    for (int64_t b = 0; b < n; b += chunk) {
      int64_t e = std::min(n, b + chunk);
      gather_batch(test_, order, b, e, &x, &y);
      const Tensor logits = device_ == Device::kCpu ? model_.forward(x) : model_.forward(x.to(device_)).to(Device::kCpu);
      const int rows = static_cast<int>(e - b), cols = static_cast<int>(logits.dim(1));
      pred.resize(static_cast<size_t>(rows));
      cpu::argmax_rows(logits.f32(), rows, cols, pred.data());
      for (int i = 0; i < rows; ++i) correct += pred[static_cast<size_t>(i)] == y[static_cast<size_t>(i)];
      loss += cpu::softmax_xent(logits.f32(), y.data(), nullptr, rows, cols) * rows;
    }
    return {static_cast<double>(correct) / static_cast<double>(n), loss / static_cast<double>(n)};
  }
  std::vector<Param>& params() override { return model_.params(); }
  std::vector<ParamGroup> param_groups() const override { return model_.param_groups(); }
  void set_param_gate(ParamGate* gate) override { model_.set_gate(gate); }
  std::string config_json() const override { return model_.config_json(); }
  double train_flops(int batch) const override { return model_.train_flops(batch); }
  int64_t train_size() const override { return source_.size(); }
  int64_t eval_size() const override { return test_.size(); }

 private:
  Dataset train_, test_;
  BatchSource source_;  // train_, augmented, with the synthetic samples
  Mlp model_;
  uint64_t seed_;
  Device device_;
  bool qat_;
  float T_, alpha_;
  std::unique_ptr<Mlp> teacher_;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;
  Tensor x_, dlogits_;
  std::vector<int32_t> y_;
};

}  // namespace

std::unique_ptr<Task> make_mlp_task(const TrainConfig& c, Device device) { return std::make_unique<MlpTask>(c, device); }

}  // namespace loom::rt

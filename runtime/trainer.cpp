// trainer.cpp — the training loop of `loom-train` on one process.
#include "loom/rt/trainer.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "loom/rt/data.hpp"
#include "loom/rt/kernels.hpp"
#include "loom/rt/model_io.hpp"
#include "loom/topo/emit.hpp"

namespace loom::rt {



namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string num(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

struct Eval {
  double accuracy = 0, loss = 0;
};

Eval evaluate(Mlp& model, const Dataset& test) {
  const int64_t n = test.size(), chunk = 1000;
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  Tensor x;
  std::vector<int32_t> y, pred;
  int64_t correct = 0;
  double loss = 0;
  for (int64_t b = 0; b < n; b += chunk) {
    int64_t e = std::min(n, b + chunk);
    gather_batch(test, order, b, e, &x, &y);
    const Tensor& logits = model.forward(x);
    const int rows = static_cast<int>(e - b), cols = static_cast<int>(logits.dim(1));
    pred.resize(static_cast<size_t>(rows));
    cpu::argmax_rows(logits.f32(), rows, cols, pred.data());
    for (int i = 0; i < rows; ++i) correct += pred[static_cast<size_t>(i)] == y[static_cast<size_t>(i)];
    loss += cpu::softmax_xent(logits.f32(), y.data(), nullptr, rows, cols) * rows;
  }
  return {static_cast<double>(correct) / static_cast<double>(n), loss / static_cast<double>(n)};
}

}  // namespace

TrainResult train_mlp(const TrainConfig& c, const std::function<void(const std::string&)>& log) {
  if (c.global_batch <= 0) throw Error("--global-batch must be positive, not " + std::to_string(c.global_batch));
  if (!(c.lr > 0) || !std::isfinite(c.lr)) throw Error("--lr must be positive, not " + num(c.lr));
  if (c.epochs <= 0 && c.steps <= 0) throw Error("--epochs or --steps must be positive");
  if (c.optim.kind != "sgd" && c.optim.kind != "adamw")
    throw Error("--optimizer must be sgd or adamw, not '" + c.optim.kind + "'");
  if (c.schedule != "constant" && c.schedule != "cosine")
    throw Error("--lr-schedule must be constant or cosine, not '" + c.schedule + "'");
  cpu::set_threads(c.threads);
  cpu::set_gemm_backend(c.gemm);

  Dataset train = load_fashion_mnist(c.data_dir, "train");
  Dataset test = load_fashion_mnist(c.data_dir, "t10k");
  const int features = static_cast<int>(train.images.dim(1));
  if (c.layers.front() != features)
    throw Error("--layers starts at " + std::to_string(c.layers.front()) + " but Fashion-MNIST images have " +
                std::to_string(features) + " inputs");
  if (c.layers.back() != train.classes)
    throw Error("--layers ends at " + std::to_string(c.layers.back()) + " but Fashion-MNIST has " +
                std::to_string(train.classes) + " classes");
  if (c.global_batch > train.size()) throw Error("--global-batch is larger than the training set");

  std::ofstream metrics;
  if (!c.metrics_file.empty()) {
    metrics.open(c.metrics_file, std::ios::trunc);
    if (!metrics) throw Error(c.metrics_file + ": cannot open for writing");
  }
  const bool json = c.log_format == "json";
  auto emit = [&](const std::string& human, const std::string& fields) {
    if (json) {
      double ts = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      log("{\"ts\":" + num(ts) + ",\"component\":\"loom-train\",\"rank\":0," + fields +
          ",\"msg\":" + loom::topo::json_quote(human) + "}");
    }
    else log("loom-train: " + human);
  };

  Mlp model(c.layers, c.seed);
  Optimizer opt(c.optim);
  const int64_t per_epoch = train.size() / c.global_batch;  // the last partial batch is dropped
  const int64_t total = c.steps > 0 ? c.steps : per_epoch * c.epochs;
  emit("training mlp with " + std::to_string(model.num_params()) +
           " parameters on " + std::to_string(train.size()) + " samples, " + std::to_string(total) + " steps of " +
           std::to_string(c.global_batch) + ", " + std::to_string(c.threads) + " threads, GEMM " + cpu::gemm_backend(),
       "\"level\":\"info\",\"event\":\"start\",\"params\":" + std::to_string(model.num_params()) +
           ",\"steps\":" + std::to_string(total));

  TrainResult r;
  Tensor x, dlogits = Tensor::empty({c.global_batch, c.layers.back()});
  std::vector<int32_t> y;
  double train_seconds = 0, window_seconds = 0;
  int64_t window_samples = 0, step = 0;
  Eval ev;
  for (int64_t epoch = 0; step < total; ++epoch) {
    std::vector<int64_t> order = epoch_order(train.size(), c.seed, epoch);
    for (int64_t b = 0; b < per_epoch && step < total; ++b, ++step) {
      auto t0 = Clock::now();
      gather_batch(train, order, b * c.global_batch, (b + 1) * c.global_batch, &x, &y);
      const Tensor& logits = model.forward(x);
      double loss = cpu::softmax_xent(logits.f32(), y.data(), dlogits.f32(), c.global_batch, c.layers.back());
      if (!std::isfinite(loss)) throw Error("loss is " + num(loss) + " at step " + std::to_string(step) + " (lower --lr)");
      model.backward(dlogits);
      if (c.clip > 0) clip_grad_norm(model.params(), c.clip);
      opt.step(model.params(), lr_at(step, total, c.lr, c.warmup, c.schedule));
      double dt = seconds_since(t0);
      train_seconds += dt;
      window_seconds += dt;
      window_samples += c.global_batch;
      r.last_loss = loss;
      if ((step + 1) % c.log_every == 0 || step + 1 == total) {
        double rate = window_samples / std::max(window_seconds, 1e-9);
        double eta = (total - step - 1) * c.global_batch / std::max(rate, 1e-9);
        emit("step " + std::to_string(step + 1) + "/" + std::to_string(total) + " epoch " + std::to_string(epoch) +
                 " loss " + num(loss) + " " + num(rate) + " samples/s ETA " + num(eta) + " s",
             "\"level\":\"info\",\"step\":" + std::to_string(step + 1) + ",\"loss\":" + num(loss) +
                 ",\"samples_per_s\":" + num(rate));
        if (metrics)
          metrics << "{\"step\":" << step + 1 << ",\"epoch\":" << epoch << ",\"loss\":" << num(loss)
                  << ",\"samples_per_s\":" << num(rate) << ",\"rank_batch\":[" << c.global_batch
                  << "],\"comm_bytes\":0,\"loss_scale\":1}\n";
        window_seconds = 0;
        window_samples = 0;
      }
    }
    ev = evaluate(model, test);
    emit("epoch " + std::to_string(epoch) + " test accuracy " + num(ev.accuracy) + " test loss " + num(ev.loss),
         "\"level\":\"info\",\"event\":\"eval\",\"epoch\":" + std::to_string(epoch) +
             ",\"test_accuracy\":" + num(ev.accuracy));
    if (metrics)
      metrics << "{\"event\":\"eval\",\"epoch\":" << epoch << ",\"step\":" << step
              << ",\"test_accuracy\":" << num(ev.accuracy) << ",\"test_loss\":" << num(ev.loss) << "}\n";
  }
  r.steps = step;
  r.samples_per_s = step * c.global_batch / std::max(train_seconds, 1e-9);
  r.test_accuracy = ev.accuracy;
  r.gflops = model.train_flops(c.global_batch) * step / std::max(train_seconds, 1e-9) / 1e9;
  if (!c.export_path.empty()) {
    save_model(c.export_path, model.config_json(), model.params());
    emit("exported " + c.export_path, "\"level\":\"info\",\"event\":\"export\"");
  }
  if (metrics) {
    metrics << "{\"event\":\"summary\",\"steps\":" << r.steps << ",\"samples_per_s\":" << num(r.samples_per_s)
            << ",\"comm_bytes\":0,\"test_accuracy\":" << num(r.test_accuracy) << ",\"gflops\":" << num(r.gflops)
            << "}\n";
    if (!metrics.flush()) throw Error(c.metrics_file + ": write failed");
  }
  emit("done: " + std::to_string(r.steps) + " steps, " + num(r.samples_per_s) + " samples/s, " + num(r.gflops) +
           " GFLOP/s, test accuracy " + num(r.test_accuracy),
       "\"level\":\"info\",\"event\":\"summary\",\"samples_per_s\":" + num(r.samples_per_s) +
           ",\"test_accuracy\":" + num(r.test_accuracy));
  return r;
}

}  // namespace loom::rt

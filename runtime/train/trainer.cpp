// trainer.cpp — the training loop of `loom-train` on one process.
#include "loom/rt/trainer.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "loom/rt/amp.hpp"
#include "loom/rt/checkpoint.hpp"
#include "loom/rt/balancer.hpp"
#include "loom/rt/data.hpp"
#include "loom/rt/grad_exchange.hpp"
#include "loom/rt/gpt.hpp"
#include "loom/rt/kernels.hpp"
#include "loom/rt/model_io.hpp"
#include "loom/rt/ops.hpp"
#include "loom/topo/emit.hpp"
#include "loom/topo/topology.hpp"

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

// What the loop trains: a model with its data. The loop itself is the same for every model.
class Task {
 public:
  virtual ~Task() = default;
  virtual std::string describe() const = 0;
  virtual int64_t steps_per_epoch(int batch) const = 0;
  // Forward and backward on samples [first, first + count) of the epoch's order: the mean loss
  // over them, and the gradients of that mean (overwritten).
  // `ready(i)`, when set, is told as soon as params()[i].grad is final.
  virtual double train_step(int64_t epoch, int64_t first, int count, const std::function<void(size_t)>& ready) = 0;
  virtual Eval evaluate() = 0;
  virtual std::vector<Param>& params() = 0;
  virtual std::string config_json() const = 0;
  virtual double train_flops(int batch) const = 0;
  // Random-number state beyond the seed (dropout), for checkpoints.
  virtual std::string rng_state() const { return ""; }
  virtual void set_rng_state(const std::string&) {}
};

class MlpTask : public Task {
 public:
  MlpTask(const TrainConfig& c, Device device)
      : train_(load_fashion_mnist(c.data_dir, "train")), test_(load_fashion_mnist(c.data_dir, "t10k")),
        model_(c.layers, c.seed), seed_(c.seed), device_(device) {
    const int features = static_cast<int>(train_.images.dim(1));
    if (c.layers.front() != features)
      throw Error("--layers starts at " + std::to_string(c.layers.front()) + " but Fashion-MNIST images have " +
                  std::to_string(features) + " inputs");
    if (c.layers.back() != train_.classes)
      throw Error("--layers ends at " + std::to_string(c.layers.back()) + " but Fashion-MNIST has " +
                  std::to_string(train_.classes) + " classes");
    if (c.global_batch > train_.size()) throw Error("--global-batch is larger than the training set");
    dlogits_ = Tensor::empty({c.global_batch, c.layers.back()}, DType::kF32, device_);
    model_.to(device_);
  }
  std::string describe() const override {
    int64_t n = 0;
    for (const auto& p : model_.params()) n += p.value.numel();
    return "mlp with " + std::to_string(n) + " parameters on " + std::to_string(train_.size()) +
           " Fashion-MNIST images, on " + (device_ == Device::kCuda ? "cuda" : "cpu");
  }
  int64_t steps_per_epoch(int batch) const override { return train_.size() / batch; }  // partial batch dropped
  double train_step(int64_t epoch, int64_t first, int batch, const std::function<void(size_t)>& ready) override {
    if (epoch != order_epoch_) order_ = epoch_order(train_.size(), seed_, order_epoch_ = epoch);
    gather_batch(train_, order_, first, first + batch, &x_, &y_);
    if (dlogits_.dim(0) != batch) dlogits_ = Tensor::empty({batch, dlogits_.dim(1)}, DType::kF32, device_);
    if (device_ == Device::kCpu) {
      const Tensor& logits = model_.forward(x_);
      double loss = cpu::softmax_xent(logits.f32(), y_.data(), dlogits_.f32(), batch, static_cast<int>(logits.dim(1)));
      model_.backward(dlogits_, false, ready);
      return loss;
    }
    Tensor labels = Tensor::empty({batch}, DType::kI32);
    std::copy(y_.begin(), y_.end(), labels.data<int32_t>());
    Tensor xd = x_.to(device_), yd = labels.to(device_);
    const Tensor& logits = model_.forward(xd);
    double loss = ops::softmax_xent(device_, logits.f32(), yd.data<int32_t>(), dlogits_.f32(), batch,
                                    static_cast<int>(logits.dim(1)));
    model_.backward(dlogits_);
    return loss;
  }
  Eval evaluate() override {
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
  std::string config_json() const override { return model_.config_json(); }
  double train_flops(int batch) const override { return model_.train_flops(batch); }

 private:
  Dataset train_, test_;
  Mlp model_;
  uint64_t seed_;
  Device device_;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;
  Tensor x_, dlogits_;
  std::vector<int32_t> y_;
};

class GptTask : public Task {
 public:
  GptTask(const TrainConfig& c) : text_(load_text(c.text_path)), seed_(c.seed) {
    GptConfig g;
    g.vocab = static_cast<int>(text_.chars.size());
    g.context = c.context;
    g.layers = c.gpt_layers;
    g.heads = c.heads;
    g.embd = c.embd;
    g.dropout = c.dropout;
    model_ = std::make_unique<Gpt>(g, c.seed);
    split_ = static_cast<int64_t>(text_.ids.size()) * 9 / 10;
    if (split_ - c.context - 1 < c.global_batch || static_cast<int64_t>(text_.ids.size()) - split_ < c.context + 2)
      throw Error(c.text_path + ": " + std::to_string(text_.ids.size()) + " characters are too few for --context " +
                  std::to_string(c.context) + " and --global-batch " + std::to_string(c.global_batch));
  }
  std::string describe() const override {
    int64_t n = 0;
    for (const auto& p : model_->params()) n += p.value.numel();
    return "gpt with " + std::to_string(n) + " parameters on " + std::to_string(text_.ids.size()) +
           " characters (vocabulary " + std::to_string(text_.chars.size()) + ")";
  }
  int64_t steps_per_epoch(int batch) const override {
    return std::max<int64_t>(1, split_ / (int64_t{model_->config().context} * batch));
  }
  double train_step(int64_t epoch, int64_t first, int batch, const std::function<void(size_t)>&) override {
    const int T = model_->config().context;
    const int64_t starts = split_ - T - 1 + 1;
    if (epoch != order_epoch_) order_ = epoch_order(starts, seed_, order_epoch_ = epoch);
    tok_.resize(static_cast<size_t>(batch) * T);
    tgt_.resize(tok_.size());
    for (int b = 0; b < batch; ++b) {
      int64_t s = order_[static_cast<size_t>((first + b) % starts)];
      for (int t = 0; t < T; ++t) {
        tok_[static_cast<size_t>(b * T + t)] = text_.ids[static_cast<size_t>(s + t)];
        tgt_[static_cast<size_t>(b * T + t)] = text_.ids[static_cast<size_t>(s + t + 1)];
      }
    }
    double loss = model_->forward(tok_, tgt_, batch, true);
    model_->backward();
    return loss;
  }
  Eval evaluate() override {  // next-character accuracy and loss on the last 10% of the text
    const int T = model_->config().context, V = model_->config().vocab;
    const int64_t windows = std::min<int64_t>(64, (static_cast<int64_t>(text_.ids.size()) - split_ - 1) / T);
    std::vector<int32_t> tok(static_cast<size_t>(windows) * T), tgt(tok.size()), pred(tok.size());
    for (int64_t w = 0; w < windows; ++w)
      for (int t = 0; t < T; ++t) {
        tok[static_cast<size_t>(w * T + t)] = text_.ids[static_cast<size_t>(split_ + w * T + t)];
        tgt[static_cast<size_t>(w * T + t)] = text_.ids[static_cast<size_t>(split_ + w * T + t + 1)];
      }
    double loss = model_->forward(tok, tgt, static_cast<int>(windows), false);
    cpu::argmax_rows(model_->logits().f32(), static_cast<int>(tok.size()), V, pred.data());
    int64_t correct = 0;
    for (size_t i = 0; i < tok.size(); ++i) correct += pred[i] == tgt[i];
    return {static_cast<double>(correct) / static_cast<double>(tok.size()), loss};
  }
  std::vector<Param>& params() override { return model_->params(); }
  std::string config_json() const override {
    std::string j = model_->config().json();
    j.pop_back();
    return j + ",\"chars\":" + loom::topo::json_quote(text_.chars) + "}";
  }
  double train_flops(int batch) const override { return model_->train_flops(batch); }
  std::string rng_state() const override { return model_->rng_state(); }
  void set_rng_state(const std::string& s) override {
    if (!s.empty()) model_->set_rng_state(s);
  }

 private:
  struct Text {
    std::string chars;          // the vocabulary, sorted
    std::vector<int32_t> ids;   // the text as vocabulary indices
  };
  static Text load_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path + ": cannot read the text file");
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (s.empty()) throw Error(path + ": the text file has no content");
    Text t;
    bool seen[256] = {false};
    for (unsigned char ch : s) seen[ch] = true;
    int index[256];
    for (int ch = 0; ch < 256; ++ch)
      if (seen[ch]) index[ch] = static_cast<int>(t.chars.size()), t.chars += static_cast<char>(ch);
    t.ids.reserve(s.size());
    for (unsigned char ch : s) t.ids.push_back(index[ch]);
    return t;
  }
  Text text_;
  uint64_t seed_;
  std::unique_ptr<Gpt> model_;
  int64_t split_ = 0, order_epoch_ = -1;
  std::vector<int64_t> order_;
  std::vector<int32_t> tok_, tgt_;
};

}  // namespace

TrainResult train(const TrainConfig& c, const std::function<void(const std::string&)>& log) {
  if (c.global_batch <= 0) throw Error("--global-batch must be positive, not " + std::to_string(c.global_batch));
  if (!(c.lr > 0) || !std::isfinite(c.lr)) throw Error("--lr must be positive, not " + num(c.lr));
  if (c.epochs <= 0 && c.steps <= 0) throw Error("--epochs or --steps must be positive");
  if (c.optim.kind != "sgd" && c.optim.kind != "adamw")
    throw Error("--optimizer must be sgd or adamw, not '" + c.optim.kind + "'");
  if (c.schedule != "constant" && c.schedule != "cosine")
    throw Error("--lr-schedule must be constant or cosine, not '" + c.schedule + "'");
  cpu::set_threads(c.threads);
  cpu::set_gemm_backend(c.gemm);

  if (c.device != "auto" && c.device != "cpu" && c.device != "cuda")
    throw Error("--device must be auto, cpu or cuda, not '" + c.device + "'");
  std::string why;
  const bool cuda = c.device != "cpu" && c.model == "mlp" && ops::cuda_usable(&why);
  if (c.device == "cuda" && c.model != "mlp")
    throw Error("--device cuda: only the mlp model runs on CUDA in this build; gpt runs with --device cpu");
  if (c.device == "cuda" && !cuda) throw Error("--device cuda: " + why);
  std::unique_ptr<Task> task;
  if (c.model == "mlp") task = std::make_unique<MlpTask>(c, cuda ? Device::kCuda : Device::kCpu);
  else if (c.model == "gpt") task = std::make_unique<GptTask>(c);
  else throw Error("--model must be mlp or gpt, not '" + c.model + "'");

  std::ofstream metrics;
  if (!c.metrics_file.empty() && (!c.comm || c.comm->rank() == 0)) {
    metrics.open(c.metrics_file, std::ios::trunc);
    if (!metrics) throw Error(c.metrics_file + ": cannot open for writing");
  }
  const bool json = c.log_format == "json";
  const int ranks = c.comm ? c.comm->size() : 1, me = c.comm ? c.comm->rank() : 0;
  auto emit_any = [&](const std::string& human, const std::string& fields) {
    if (json) {
      double ts = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      log("{\"ts\":" + num(ts) + ",\"component\":\"loom-train\",\"rank\":" + std::to_string(me) + "," + fields +
          ",\"msg\":" + loom::topo::json_quote(human) + "}");
    } else {
      log("loom-train: " + (ranks > 1 ? "rank " + std::to_string(me) + ": " : std::string()) + human);
    }
  };
  auto emit = [&](const std::string& human, const std::string& fields) {  // rank 0 speaks for the job
    if (me == 0) emit_any(human, fields);
  };
  if (!(c.emulate_speed > 0 && c.emulate_speed <= 1))
    throw Error("LOOM_EMULATE_SPEED must be in (0, 1], not " + num(c.emulate_speed));
  if (c.emulate_speed < 1)
    emit_any("emulating a slow device: compute takes 1/" + num(c.emulate_speed) + " as long (LOOM_EMULATE_SPEED)",
             "\"level\":\"warning\",\"event\":\"emulation\"");
  if (ranks > 1 && cuda)
    throw Error("multi-rank training on CUDA: the trainer does not drive the NCCL communicator yet "
                "(it is built and tested on its own: tests/gpu/nccl_test); use --device cpu");

  // Shares of the global batch: static from every rank's device weight, then dynamic.
  Balancer bal(c.balance, c.global_batch, ranks, c.replan_every);
  auto gather = [&](double mine) {  // every rank's value, in rank order
    std::vector<float> v(static_cast<size_t>(ranks), 0.0f);
    v[static_cast<size_t>(me)] = static_cast<float>(mine);
    if (c.comm) c.comm->allreduce_sum(v.data(), v.size());
    return std::vector<double>(v.begin(), v.end());
  };
  bal.start(gather(c.device_weight));
  auto shares_text = [&] {
    std::string t;
    for (size_t i = 0; i < bal.shares().size(); ++i) t += (i ? "," : "") + std::to_string(bal.shares()[i]);
    return t;
  };
  if (ranks > 1) emit("balance " + c.balance + ": shares " + shares_text(), "\"level\":\"info\",\"event\":\"shares\"");
  GradExchange exchange(parse_grad_compress(c.grad_compress), c.bucket_mb);
  bool reported_compression = false;
  size_t comm_bytes = 0;
  // bf16 needs every rank's device to have it (a V100 does not): otherwise every rank agrees on
  // fp16 with loss scaling, so that no rank computes differently from the others.
  std::string precision = c.precision;
  if (precision == "bf16") {
    const std::vector<double> lacking = gather(loom::topo::device_has_bf16(c.gpu_class) ? 0.0 : 1.0);
    for (size_t r = 0; r < lacking.size(); ++r)
      if (lacking[r] > 0) {
        emit("rank " + std::to_string(r) + " has a GPU without bf16 (LOOM_GPU_CLASS" +
                 (static_cast<int>(r) == me ? "=" + c.gpu_class : std::string()) +
                 "): every rank uses fp16 with loss scaling instead",
             "\"level\":\"warning\",\"event\":\"precision\",\"precision\":\"fp16\"");
        precision = "fp16";
        break;
      }
  }
  MixedPrecision amp(precision);
  // Gradients go out while backward runs, unless their precision pass (AMP) or an injected
  // overflow must see them all first, or the transport cannot be driven from a second thread.
  const bool overlap = ranks > 1 && exchange.overlaps() && !amp.enabled() && c.inject_overflow_step < 0 &&
                       c.comm->thread_serialized();
  std::function<void(size_t)> ready;
  if (overlap) ready = [&exchange](size_t i) { exchange.ready(i); };
  if (ranks > 1)
    emit("allreduce " + c.comm->describe() + " (" + c.comm->backend() + "), " +
             (overlap ? "buckets of " + num(c.bucket_mb) + " MiB overlapped with backward"
                      : std::string("after backward")) +
             (c.grad_compress != "none" ? ", gradients " + c.grad_compress : std::string()),
         "\"level\":\"info\",\"event\":\"comm\",\"hierarchical\":" +
             std::string(c.comm->hierarchical() ? "true" : "false") + ",\"overlap\":" + (overlap ? "true" : "false"));
  if (amp.enabled() && cuda) throw Error("--precision " + c.precision + " runs on the CPU (emulated) in this build");
  if (amp.enabled())
    emit("mixed precision " + precision + " (emulated by rounding on the CPU), fp32 master weights" +
             (precision == "fp16" ? ", loss scale " + num(amp.scale()) : std::string()),
         "\"level\":\"info\",\"event\":\"precision\"");

  Optimizer opt(c.optim);
  const int64_t per_epoch = task->steps_per_epoch(c.global_batch);
  const int64_t total = c.steps > 0 ? c.steps : per_epoch * c.epochs;
  emit("training " + task->describe() + ", " + std::to_string(total) + " steps of " +
           std::to_string(c.global_batch) + ", " + std::to_string(c.threads) + " threads, GEMM " + cpu::gemm_backend(),
       "\"level\":\"info\",\"event\":\"start\",\"steps\":" + std::to_string(total));

  TrainResult r;
  double train_seconds = 0, window_seconds = 0;
  int64_t window_samples = 0, step = 0;
  Eval ev;

  // Checkpoints: what a resume must share with the run that wrote the checkpoint.
  nlohmann::json tc;
  tc["model"] = nlohmann::json::parse(task->config_json());
  tc["data"] = c.model == "gpt" ? c.text_path : c.data_dir;
  tc["global_batch"] = c.global_batch;
  tc["total_steps"] = total;
  tc["optimizer"] = {{"kind", c.optim.kind}, {"momentum", c.optim.momentum}, {"nesterov", c.optim.nesterov},
                     {"weight_decay", c.optim.weight_decay}};
  tc["lr"] = {{"base", c.lr}, {"schedule", c.schedule}, {"warmup", c.warmup}};
  tc["clip"] = c.clip;
  tc["seed"] = c.seed;
  tc["precision"] = precision;
  tc["grad_compress"] = c.grad_compress;
  const std::string train_config = tc.dump();
  CheckpointWriter ckpt(c, ranks > 1 ? c.comm : nullptr, [&](const std::string& h, const std::string& f) { emit_any(h, f); });
  int64_t start_epoch = 0, start_b = 0;
  if (auto loaded = ckpt.find_resume(train_config)) {
    const Checkpoint& k = loaded->second;
    auto st = nlohmann::json::parse(k.state_json);
    std::vector<Param>& ps = task->params();
    auto by_name = [&](const std::vector<std::pair<std::string, Tensor>>& ts, const std::string& name) -> const Tensor* {
      for (const auto& t : ts)
        if (t.first == name) return &t.second;
      return nullptr;
    };
    std::vector<Tensor> m, v;
    for (auto& p : ps) {
      const Tensor* t = by_name(k.params, p.name);
      if (!t || t->shape() != p.value.shape()) throw Error(loaded->first + ": no /params/" + p.name + " of shape " + p.value.shape_str());
      p.value = t->to(p.value.device());
      if (const Tensor* tm = by_name(k.opt_m, p.name)) m.push_back(tm->to(p.value.device()));
      if (const Tensor* tv = by_name(k.opt_v, p.name)) v.push_back(tv->to(p.value.device()));
    }
    if ((!m.empty() && m.size() != ps.size()) || (!v.empty() && v.size() != ps.size()))
      throw Error(loaded->first + ": the optimizer state does not cover every parameter");
    opt.restore(std::move(m), std::move(v), st.at("opt_t").get<int64_t>());
    amp.restore(st.at("loss_scale").get<float>(), st.at("clean_steps").get<int>());
    task->set_rng_state(k.rng);
    step = st.at("step").get<int64_t>();
    start_epoch = st.at("epoch").get<int64_t>();
    start_b = st.at("batch").get<int64_t>();
    const int world = st.at("world").get<int>();
    if (world == ranks) {
      bal.restore(st.at("shares").get<std::vector<int>>(), st.at("speeds").get<std::vector<double>>(),
                  st.at("observed").get<int>());
    } else {
      emit("resharding: the checkpoint was written by " + std::to_string(world) + " ranks, resuming on " +
               std::to_string(ranks) + "; shares start again from the device weights",
           "\"level\":\"info\",\"event\":\"reshard\"");
    }
    emit("resumed from " + loaded->first + " at step " + std::to_string(step) + " (epoch " + std::to_string(start_epoch) + ")",
         "\"level\":\"info\",\"event\":\"resume\",\"step\":" + std::to_string(step));
    if (ranks > 1 && parse_grad_compress(c.grad_compress).kind == "powersgd") {
      if (world == ranks && k.shards == ranks) {
        exchange.restore(k.rank_state[static_cast<size_t>(me)]);
      } else {
        emit("PowerSGD's error feedback and warm-started Q belong to the " + std::to_string(world) +
                 " ranks that wrote the checkpoint: they start again from zero on " + std::to_string(ranks),
             "\"level\":\"warning\",\"event\":\"resume_powersgd\"");
      }
    }
  }
  {
    const std::vector<double> steps = gather(static_cast<double>(step));
    for (double s : steps)
      if (s != static_cast<double>(step)) throw Error("ranks resumed at different steps (is --ckpt-dir shared by every node?)");
  }
  auto snapshot = [&](int64_t epoch, int64_t next_b, int64_t done) {
    CheckpointState k;
    k.model_config = task->config_json();
    k.train_config = train_config;
    const auto& ps = task->params();
    for (const auto& p : ps) k.tensors.push_back({"params", p.name, p.value});
    for (size_t i = 0; i < opt.first_moments().size(); ++i) k.tensors.push_back({"optimizer/m", ps[i].name, opt.first_moments()[i]});
    for (size_t i = 0; i < opt.second_moments().size(); ++i) k.tensors.push_back({"optimizer/v", ps[i].name, opt.second_moments()[i]});
    if (ranks > 1) k.rank_state = exchange.state();
    nlohmann::json st;
    st["step"] = done;
    st["epoch"] = epoch;
    st["batch"] = next_b;
    st["world"] = ranks;
    st["opt_t"] = opt.steps();
    st["loss_scale"] = amp.scale();
    st["clean_steps"] = amp.clean_steps();
    st["shares"] = bal.shares();
    st["speeds"] = bal.speeds();
    st["observed"] = bal.observed();
    k.state_json = st.dump();
    k.rng = task->rng_state();
    return k;
  };
  bool stopped = false, evaluated = false, time_due = false;
  const int64_t first_step = step;  // > 0 after a resume
  const auto loop_start = Clock::now();
  double eval_seconds = 0;
  if (step >= total)
    emit("the checkpoint is already at step " + std::to_string(step) + " of " + std::to_string(total) + ": nothing to train",
         "\"level\":\"info\",\"event\":\"done_before\"");
  for (int64_t epoch = start_epoch; step < total && !stopped; ++epoch) {
    for (int64_t b = epoch == start_epoch ? start_b : 0; b < per_epoch && step < total; ++b, ++step) {
      auto t0 = Clock::now();
      const int share = bal.shares()[static_cast<size_t>(me)];
      if (amp.enabled()) ckpt.wait_copied();  // rounding to fp16/bf16 changes the parameters
      amp.enter(task->params());
      // Each rank's gradient is the mean over its share; weighted by share / global batch and
      // summed, they are the gradient of the mean over the whole global batch.
      const float w = static_cast<float>(share) / static_cast<float>(c.global_batch);
      if (ranks > 1) exchange.begin(*c.comm, task->params(), w);
      double loss = task->train_step(epoch, b * c.global_batch + bal.offset(me), share, ready);
      bool finite = amp.leave(task->params());
      if (step == c.inject_overflow_step) {
        task->params()[0].grad.f32()[0] = INFINITY;  // as an fp16 overflow would leave it
        finite = false;
      }
      double compute = seconds_since(t0);
      if (c.emulate_speed < 1) {
        std::this_thread::sleep_for(std::chrono::duration<double>(compute * (1 / c.emulate_speed - 1)));
        compute = seconds_since(t0);
      }
      if (ranks > 1) {
        // loss, overflowed ranks, ranks told to stop (SIGUSR1/SIGTERM): every rank decides alike
        // and the checkpoint's: shards written and failed, and rank 0's clock for --ckpt-every-min.
        const auto shard = ckpt.shard_flags();
        std::vector<float> extras{static_cast<float>(loss) * w, finite ? 0.0f : 1.0f, ckpt.stop_requested() ? 1.0f : 0.0f,
                                  shard.first, shard.second, me == 0 && ckpt.time_due() ? 1.0f : 0.0f};
        exchange.finish(extras, step);
        ckpt.agree(extras[3], extras[4]);
        time_due = extras[5] > 0.0f;
        comm_bytes += exchange.last_bytes();
        loss = extras[0];
        finite = extras[1] == 0.0f;  // every rank now makes the same decision
        stopped = extras[2] > 0.0f;
        if (!reported_compression && exchange.last_bytes() < exchange.plain_bytes()) {
          reported_compression = true;
          const double ratio = static_cast<double>(exchange.plain_bytes()) / exchange.last_bytes();
          emit("gradient compression " + c.grad_compress + " from step " + std::to_string(step + 1) + ": " +
                   std::to_string(exchange.last_bytes()) + " bytes per step instead of " +
                   std::to_string(exchange.plain_bytes()) + " (" + num(ratio) + "x fewer)",
               "\"level\":\"info\",\"event\":\"compression\",\"ratio\":" + num(ratio));
        }
        std::vector<double> seconds = gather(compute);
        for (int straggler : bal.stragglers(seconds))
          emit("rank " + std::to_string(straggler) + " is a straggler: its step took " +
                   num(seconds[static_cast<size_t>(straggler)]) + " s, more than 1.5x what its share predicts",
               "\"level\":\"warning\",\"event\":\"straggler\",\"straggler\":" + std::to_string(straggler));
        if (bal.observe(seconds))
          emit("re-planned shares " + shares_text(), "\"level\":\"info\",\"event\":\"shares\"");
      }
      if (!std::isfinite(loss)) throw Error("loss is " + num(loss) + " at step " + std::to_string(step) + " (lower --lr)");
      bool skip = false;
      if (amp.enabled() || c.inject_overflow_step >= 0) {
        amp.update(!finite);
        skip = !finite;  // no rank steps alone
        if (skip) {
          emit("gradient overflow at step " + std::to_string(step + 1) + ": step skipped on every rank, loss scale " +
                   num(amp.scale()),
               "\"level\":\"warning\",\"event\":\"overflow\",\"step\":" + std::to_string(step + 1) +
                   ",\"loss_scale\":" + num(amp.scale()));
          if (metrics.is_open())
            metrics << "{\"event\":\"overflow\",\"step\":" << step + 1 << ",\"loss_scale\":" << num(amp.scale()) << "}\n";
        }
      }
      if (!skip) {
        ckpt.wait_copied();  // an asynchronous checkpoint's copy of the state is done before it changes
        if (c.clip > 0) clip_grad_norm(task->params(), c.clip);
        opt.step(task->params(), lr_at(step, total, c.lr, c.warmup, c.schedule));
      }
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
        if (metrics.is_open())
          metrics << "{\"step\":" << step + 1 << ",\"epoch\":" << epoch << ",\"loss\":" << num(loss)
                  << ",\"samples_per_s\":" << num(rate) << ",\"rank_batch\":[" << shares_text()
                  << "],\"comm_bytes\":" << comm_bytes << ",\"loss_scale\":" << num(amp.scale()) << "}\n";
        window_seconds = 0;
        window_samples = 0;
      }
      if (ranks == 1) {
        stopped = ckpt.stop_requested();
        time_due = ckpt.time_due();
      }
      if (ckpt.enabled() && (stopped || ckpt.due(step + 1, time_due) || step + 1 == total)) {
        // Every rank writes its slice (one rank: the whole state) and rank 0 the index.
        ckpt.save(snapshot(epoch, b + 1, step + 1), step + 1, /*sync=*/stopped || step + 1 == total);
        if (stopped && c.comm) c.comm->barrier();  // no rank exits (and ends the job) before the index is down
      }
      if (stopped) {
        ++step;
        emit("stopping at step " + std::to_string(step) + " on a signal" +
                 (ckpt.enabled() ? ", checkpoint written: resume with --resume auto" : " (no --ckpt-dir: nothing saved)"),
             "\"level\":\"warning\",\"event\":\"preempted\",\"step\":" + std::to_string(step));
        break;
      }
    }
    if (stopped) break;
    const auto t_eval = Clock::now();
    if (me == 0 && c.evaluate) ev = task->evaluate();
    eval_seconds += seconds_since(t_eval);
    evaluated = true;
    emit("epoch " + std::to_string(epoch) + " test accuracy " + num(ev.accuracy) + " test loss " + num(ev.loss),
         "\"level\":\"info\",\"event\":\"eval\",\"epoch\":" + std::to_string(epoch) +
             ",\"test_accuracy\":" + num(ev.accuracy));
    if (metrics.is_open())
      metrics << "{\"event\":\"eval\",\"epoch\":" << epoch << ",\"step\":" << step
              << ",\"test_accuracy\":" << num(ev.accuracy) << ",\"test_loss\":" << num(ev.loss) << "}\n";
  }
  ckpt.finish();  // the last asynchronous write, if any, is down (or reported) before we go on
  r.loop_seconds = seconds_since(loop_start) - eval_seconds;
  r.preempted = stopped;
  r.steps = step;
  if (!evaluated && !stopped && me == 0 && c.evaluate) ev = task->evaluate();  // resumed with nothing left to train
  const double trained = static_cast<double>(step - first_step);  // steps this run computed
  r.samples_per_s = train_seconds > 0 ? trained * c.global_batch / train_seconds : 0;
  r.test_accuracy = ev.accuracy;
  r.gflops = train_seconds > 0 ? task->train_flops(c.global_batch) * trained / train_seconds / 1e9 : 0;
  if (!c.export_path.empty() && me == 0) {
    std::vector<Param> host;
    for (const auto& p : task->params()) host.push_back({p.name, p.value.to(Device::kCpu), Tensor()});
    save_model(c.export_path, task->config_json(), host);
    emit("exported " + c.export_path, "\"level\":\"info\",\"event\":\"export\"");
  }
  if (metrics.is_open()) {
    metrics << "{\"event\":\"summary\",\"steps\":" << r.steps << ",\"samples_per_s\":" << num(r.samples_per_s)
            << ",\"comm_bytes\":" << comm_bytes << ",\"test_accuracy\":" << num(r.test_accuracy) << ",\"gflops\":" << num(r.gflops)
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

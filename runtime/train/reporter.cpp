// reporter.cpp — progress lines (text or JSON) and the metrics file's JSON lines.
#include "loom/rt/train/reporter.hpp"

#include <chrono>

#include "loom/json_text.hpp"
#include "loom/rt/error.hpp"
#include "loom/rt/io/tensorboard.hpp"
#include "loom/rt/train/metrics_http.hpp"
#include "loom/rt/train/trainer.hpp"

namespace loom::rt {

namespace {

// "42,42,18,18" (a step line's shares) as numbers.
std::vector<int> shares_of(const std::string& text) {
  std::vector<int> shares;
  for (size_t pos = 0; pos < text.size();) {
    const size_t comma = text.find(',', pos);
    shares.push_back(std::atoi(text.substr(pos, comma - pos).c_str()));
    pos = comma == std::string::npos ? text.size() : comma + 1;
  }
  return shares;
}

}  // namespace

Reporter::Reporter(const TrainConfig& c, int rank, int ranks, Log log)
    : metrics_path_(c.metrics_file), rank_(rank), log_("loom-train", c.log_format == LogFormat::kJson, rank, ranks, std::move(log)) {
  if (!c.metrics_file.empty() && rank == 0) {
    metrics_.open(c.metrics_file, std::ios::trunc);
    if (!metrics_) throw Error(c.metrics_file + ": cannot open for writing");
  }
  if (!c.tensorboard_dir.empty() && rank == 0) {
    tb_ = std::make_unique<EventWriter>(c.tensorboard_dir);
    if (c.model == ModelKind::kGpt) tokens_per_sample_ = c.context;
    say("tensorboard: " + tb_->path() + " (tensorboard --logdir " + c.tensorboard_dir + ")",
        LogFields(LogLevel::kInfo, {{"event", "tensorboard"}, {"path", tb_->path()}}));
  }
  if (c.metrics_port >= 0 && rank == 0) {
    server_ = std::make_unique<MetricsServer>(c.metrics_bind, c.metrics_port);
    server_->update([&](TrainGauges& g) {
      g.model = word_of(c.model);
      g.ranks = ranks;
    });
    say("metrics: http://" + c.metrics_bind + ":" + std::to_string(server_->port()) + "/metrics",
        LogFields(LogLevel::kInfo, {{"event", "metrics"}, {"port", server_->port()}}));
  }
}

Reporter::~Reporter() = default;

void Reporter::live(const StepLine& s, int64_t planned) {
  if (!server_) return;
  std::vector<int> shares = shares_of(s.shares);
  server_->update([&](TrainGauges& g) {
    g.step = s.step, g.epoch = s.epoch, g.steps_planned = planned;
    g.loss = s.loss, g.samples_per_s = s.samples_per_s, g.loss_scale = s.loss_scale;
    g.shares = std::move(shares);
    g.comm_bytes = s.comm_bytes;
  });
}

void Reporter::say(const std::string& human, const LogFields& fields) const {
  if (rank_ == 0) say_mine(human, fields);
}

// Each line is logged; a checkpoint's is also a TensorBoard scalar (rank 0, which has the writer).
void Reporter::say_mine(const std::string& human, const LogFields& fields) const {
  log_.write(human, fields);
  const LogMembers& m = fields.members;
  if (tb_ && m.contains("event") && m["event"] == "checkpoint" && m.contains("step") && m.contains("write_s")) {
    tb_->scalars(m["step"].get<int64_t>(), {{"checkpoint/write_s", m["write_s"].get<double>()},
                        {"checkpoint/paused_s", m.value("paused_s", m["write_s"].get<double>())}});
    tb_->flush();
  }
}

void Reporter::metrics_line(const LogMembers& j) {
  if (metrics_.is_open()) metrics_ << json_text(j) << "\n";
}

void Reporter::step(const StepLine& s) {
  const std::vector<int> shares = shares_of(s.shares);
  if (metrics_.is_open())
    metrics_line({{"step", s.step}, {"epoch", s.epoch}, {"loss", s.loss}, {"samples_per_s", s.samples_per_s},
                  {"rank_batch", shares}, {"comm_bytes", s.comm_bytes}, {"loss_scale", s.loss_scale}});
  if (!tb_) return;
  std::vector<std::pair<std::string, double>> v = {
      {"train/loss", s.loss}, {"train/samples_per_s", s.samples_per_s}, {"train/learning_rate", s.lr},
      {"train/loss_scale", s.loss_scale}, {"train/comm_bytes", static_cast<double>(s.comm_bytes)},
      {"time/compute_ms", s.compute_ms}, {"time/exchange_wait_ms", s.exchange_ms}, {"time/update_ms", s.update_ms}};
  if (tokens_per_sample_ > 0) v.emplace_back("train/tokens_per_s", s.samples_per_s * tokens_per_sample_);
  for (size_t r = 0; r < shares.size(); ++r) v.emplace_back("shares/rank" + std::to_string(r), shares[r]);
  tb_->scalars(s.step, v);
  tb_->flush();
}

void Reporter::eval(int64_t epoch, int64_t step, double accuracy, double loss) {
  say("epoch " + std::to_string(epoch) + " test accuracy " + num(accuracy) + " test loss " + num(loss),
      LogFields(LogLevel::kInfo, {{"event", "eval"}, {"epoch", epoch}, {"test_accuracy", accuracy}}));
  if (server_) server_->update([&](TrainGauges& g) { g.test_accuracy = accuracy; });
  metrics_line({{"event", "eval"}, {"epoch", epoch}, {"step", step}, {"test_accuracy", accuracy}, {"test_loss", loss}});
  if (tb_) {
    tb_->scalars(step, {{"eval/test_accuracy", accuracy}, {"eval/test_loss", loss}});
    tb_->flush();
  }
}

void Reporter::overflow(int64_t step, double loss_scale) {
  say("gradient overflow at step " + std::to_string(step) + ": step skipped on every rank, loss scale " + num(loss_scale),
      LogFields(LogLevel::kWarning, {{"event", "overflow"}, {"step", step}, {"loss_scale", loss_scale}}));
  metrics_line({{"event", "overflow"}, {"step", step}, {"loss_scale", loss_scale}});
  if (tb_) tb_->scalars(step, {{"train/overflow_loss_scale", loss_scale}});
}

void Reporter::summary(const TrainResult& r, int64_t total, size_t comm_bytes) {
  const LogMembers accuracy = r.evaluated ? LogMembers(r.test_accuracy) : LogMembers();
  if (metrics_.is_open()) {
    LogMembers j = {{"event", "summary"}, {"steps", r.steps}, {"samples_per_s", r.samples_per_s}, {"comm_bytes", comm_bytes},
                    {"test_accuracy", accuracy}, {"gflops", r.gflops}, {"param_bytes_per_rank", r.param_bytes},
                    {"grad_bytes_per_rank", r.grad_bytes}, {"optimizer_bytes_per_rank", r.optimizer_bytes},
                    {"peak_memory_bytes", r.peak_memory_bytes}};
    if (r.preempted) j["preempted"] = true;
    metrics_line(j);
    if (!metrics_.flush()) throw Error(metrics_path_ + ": write failed");
  }
  if (tb_) {
    tb_->scalars(r.steps, {{"summary/samples_per_s", r.samples_per_s}, {"summary/gflops", r.gflops},
                           {"summary/peak_memory_bytes", static_cast<double>(r.peak_memory_bytes)}});
    tb_->flush();
  }
  const std::string rates = fixed(r.samples_per_s, 0) + " samples/s, " + fixed(r.gflops, 1) + " GFLOP/s, param_bytes_per_rank " +
                            std::to_string(r.param_bytes) + ", grad_bytes_per_rank " + std::to_string(r.grad_bytes) +
                            ", optimizer_bytes_per_rank " + std::to_string(r.optimizer_bytes) + ", peak memory " + fixed(r.peak_memory_bytes / 1048576.0, 1) + " MiB";
  LogFields fields(LogLevel::kInfo, {{"event", "summary"}, {"samples_per_s", r.samples_per_s}, {"param_bytes_per_rank", r.param_bytes},
                                     {"grad_bytes_per_rank", r.grad_bytes}, {"optimizer_bytes_per_rank", r.optimizer_bytes},
                                     {"peak_memory_bytes", r.peak_memory_bytes}, {"test_accuracy", accuracy}});
  if (r.preempted) {
    fields.members["preempted"] = true;
    say("stopped: " + std::to_string(r.steps) + " of " + std::to_string(total) + " steps, " + rates +
            "; not evaluated and not exported (the run is unfinished)",
        fields);
  } else {
    say("done: " + std::to_string(r.steps) + " steps, " + rates +
            (r.evaluated ? ", test accuracy " + num(r.test_accuracy) : std::string(", not evaluated")),
        fields);
  }
}

}  // namespace loom::rt

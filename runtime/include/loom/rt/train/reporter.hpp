// reporter.hpp — what a training run says: progress lines as human text or JSON objects
// (`--log-format`), rank 0 speaking for the job, the `--metrics-file` JSON lines (steps,
// evaluations, overflows, the summary) and the `--tensorboard` event files' scalars, written by
// rank 0 only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include "loom/log.hpp"

namespace loom::rt {

struct TrainConfig;
struct TrainResult;
class MetricsServer;
class EventWriter;

class Reporter {
 public:
  using Log = std::function<void(const std::string&)>;
  // Opens the metrics file and the --metrics-port endpoint on rank 0 (throws Error when it cannot).
  Reporter(const TrainConfig& c, int rank, int ranks, Log log);
  ~Reporter();

  // Rank 0's line for the job (loom::Logger's: component loom-train, the rank, text or JSON);
  // `fields`: its level and extra JSON members.
  void say(const std::string& human, const LogFields& fields) const;
  // This rank's own line (prefixed "rank R:" in text when there are several).
  void say_mine(const std::string& human, const LogFields& fields) const;

  struct StepLine {
    int64_t step, epoch;
    double loss, samples_per_s;
    std::string shares;  // "64,32"
    size_t comm_bytes;
    double loss_scale;
    double lr = 0;                                          // the learning rate of the step
    double compute_ms = 0, exchange_ms = 0, update_ms = 0;  // this rank's mean per step so far
  };
  void step(const StepLine& s);
  // Every step: the --metrics-port gauges (rank 0; nothing without the endpoint).
  void live(const StepLine& s, int64_t planned);
  void eval(int64_t epoch, int64_t step, double accuracy, double loss);
  void overflow(int64_t step, double loss_scale);
  // The last metrics line and the last log line: "done: ..." for a finished run, "stopped: ..."
  // for one stopped on a signal (no test accuracy: none was measured).
  void summary(const TrainResult& r, int64_t total, size_t comm_bytes);

 private:
  void metrics_line(const LogMembers& j);  // one JSON line of the metrics file
  std::string metrics_path_;
  std::ofstream metrics_;
  int rank_;
  Logger log_;
  std::unique_ptr<MetricsServer> server_;
  std::unique_ptr<EventWriter> tb_;  // --tensorboard, rank 0
  double tokens_per_sample_ = 0;     // the gpt's context: tokens/s beside samples/s
};

}  // namespace loom::rt

// checkpoint.hpp — when and where loom-train writes checkpoints, and which one a run resumes
// from. Files are `DIR/ckpt-<step>.h5` (Contract 4, written atomically by save_checkpoint);
// `--ckpt-keep K` keeps the newest K. Asynchronous writes run on one background thread, at most
// one in flight, from a copy of the state taken at a step boundary; a failed write is reported
// and the previous checkpoint stays. Rank 0 writes: the state it saves is the same on every rank.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "loom/rt/model_io.hpp"

namespace loom::rt {

struct TrainConfig;

class CheckpointWriter {
 public:
  using Log = std::function<void(const std::string& human, const std::string& json_fields)>;
  CheckpointWriter(const TrainConfig& c, int rank, Log log);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  bool enabled() const { return !dir_.empty(); }
  // SIGUSR1 or SIGTERM arrived (the trainer agrees on it across ranks).
  bool stop_requested() const;
  // Whether a checkpoint is due after `done` steps: every --ckpt-every steps, or when
  // --ckpt-every-min minutes passed since the last one. Also reports finished async writes.
  bool due(int64_t done);
  // --resume never: nothing. FILE: that checkpoint (any problem is an Error). auto: the newest
  // DIR/ckpt-*.h5 that verifies; corrupt or truncated ones are skipped with a warning naming
  // them. A checkpoint of another configuration (train_config differs) is an Error naming the
  // first difference.
  std::optional<std::pair<std::string, Checkpoint>> find_resume(const std::string& train_config);
  // Writes the checkpoint of step `step`: now (sync) or on the background thread.
  // `paused_s`: what taking the copy cost the training loop (reported with async writes).
  void save(Checkpoint k, int64_t step, bool sync, double paused_s);
  // Waits for the write in flight and reports it.
  void finish();
  std::string path_for(int64_t step) const;
  // Checkpoint files in `dir`, oldest first, as (step, path).
  static std::vector<std::pair<int64_t, std::string>> list(const std::string& dir);

 private:
  void write(const Checkpoint& k, int64_t step, double paused_s);
  void flush_messages();
  std::string dir_, resume_;
  bool async_;
  int64_t every_;
  double every_min_;
  int keep_, rank_;
  const std::atomic<int>* stop_;
  Log log_;
  std::chrono::steady_clock::time_point last_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::pair<std::string, std::string>> messages_;  // from the writer thread
};

}  // namespace loom::rt

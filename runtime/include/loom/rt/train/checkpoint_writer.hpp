// checkpoint_writer.hpp — when and where loom-train writes checkpoints, and which one a run resumes
// from. Files are `DIR/ckpt-<step>.h5` (Contract 4, written atomically by save_checkpoint);
// `--ckpt-keep K` keeps the newest K. Asynchronous writes run on one background thread, at most
// one in flight, from a copy of the state taken at a step boundary into host buffers that are
// kept from one checkpoint to the next; a failed write is reported and the previous checkpoint
// stays. One rank writes one file; several ranks each write their slice of the state (and their
// own state) to a shard in parallel, and rank 0 writes the index once every rank says its shard
// is down (model_io.hpp). --ckpt-dir must then be shared by every node.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "loom/log.hpp"
#include "loom/rt/io/model_io.hpp"

namespace loom::rt {

struct TrainConfig;
class Communicator;

// What the trainer hands over at a step boundary: the live tensors (any device; a Tensor shares
// its storage), copied by save() before it returns or, asynchronously, before wait_copied() does.
struct CheckpointState {
  std::string model_config, train_config, state_json, rng;
  struct Entry {
    std::string group, name;  // group: "params", "optimizer/m" or "optimizer/v", in that order
    Tensor tensor;
  };
  std::vector<Entry> tensors;
  std::vector<std::pair<std::string, Tensor>> rank_state;  // this rank's own (PowerSGD), already a copy
};

// Throws Error naming `path` and the value unless `k` is a loom-train checkpoint a resume can
// use as it is: its state's counters whole and in range, the loss scale finite, shares and
// speeds one per rank, each optimizer moment of its parameter's shape, and AdamW's two moments
// both there or both absent. Run before a resume touches anything, and by --inspect.
void check_train_state(const std::string& path, const Checkpoint& k);

class CheckpointWriter {
 public:
  using Log = std::function<void(const std::string& human, const LogFields& fields)>;
  // `comm` is null for one process; with several ranks every rank makes the same calls at the
  // same steps (save, finish and the agreement are collective).
  CheckpointWriter(const TrainConfig& c, Communicator* comm, Log log);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  bool enabled() const { return !dir_.empty(); }
  // Whether --ckpt-every-min minutes passed since the last checkpoint (on this rank's clock:
  // the trainer sends rank 0's answer to every rank).
  bool time_due() const;
  // Whether a checkpoint is due after `done` steps: every --ckpt-every steps, or `time_due`.
  // Also reports finished async writes.
  bool due(int64_t done, bool time_due);
  // --resume never: nothing. FILE: that checkpoint (any problem is an Error). auto: the newest
  // DIR/ckpt-*.h5 that verifies and whose state check_train_state accepts; the others are
  // skipped with a warning naming them. A checkpoint of another configuration (train_config differs, the top-level keys in
  // `may_differ` aside: the caller judges those) is an Error naming the first difference.
  std::optional<std::pair<std::string, Checkpoint>> find_resume(const std::string& train_config,
                                                                const std::vector<std::string>& may_differ = {});
  // Writes the checkpoint of step `step`: now (sync), or on the background thread, which first
  // copies the state into host buffers kept from one checkpoint to the next. Returns the
  // seconds the call took (what an asynchronous checkpoint costs the loop, besides waiting).
  double save(CheckpointState s, int64_t step, bool sync);
  // Before anything changes the state handed to an asynchronous save(): waits until it is
  // copied. Returns the seconds waited (usually 0: the copy runs beside forward and backward).
  double wait_copied();
  // Several ranks, asynchronous writes: this rank's (shard written, shard failed) flags, summed
  // over the ranks with each step's gradients, and what the sums say: when every shard of the
  // pending checkpoint is down rank 0 writes its index; when one failed, it is dropped.
  std::pair<float, float> shard_flags() const;
  void agree(float written, float failed);
  // Waits for the write in flight, commits it (collective with several ranks) and reports it.
  void finish();
  std::string path_for(int64_t step) const;
  // Checkpoint files in `dir`, oldest first, as (step, path).
  static std::vector<std::pair<int64_t, std::string>> list(const std::string& dir);

 private:
  void fail_shard(int64_t step, const std::string& why);  // this rank's shard of `step` is lost: said, flagged
  double stage(const CheckpointState& s, void* mark = nullptr);  // copies into stage_ / shard_ (mark: ops::mark_queued)
  // A staging buffer of `shape`, kept when it already has it (its pages are in memory, and copying
  // into them is twice as fast as into fresh ones). One that receives a GPU's state is page-locked
  // once, when allocated, so the device's copies into it run asynchronously at full speed; it is
  // unpinned before it is let go (its memory returns to the allocator's cache).
  void reuse(Tensor& t, const std::vector<int64_t>& shape, Device from);
  void let_go(Tensor& t);
  void write_single(int64_t step);
  std::string async_text() const;
  void write_shard(int64_t step);
  void commit_index(int64_t step);  // rank 0: the index of a sharded checkpoint, then pruning
  void prune();
  void flush_messages();
  std::string dir_, resume_;
  bool async_;
  int64_t every_;
  double every_min_;
  int keep_, rank_, world_;
  Communicator* comm_;
  Checkpoint stage_;          // one rank: the whole state
  std::vector<void*> pinned_;  // staging buffers page-locked for a GPU's copies
  CheckpointShard shard_;     // several ranks: this rank's slice
  Checkpoint index_;          // several ranks: what rank 0's index holds besides the layout
  std::string layout_;
  int64_t pending_step_ = -1;  // several ranks: a checkpoint whose shards are not all agreed down
  double shard_seconds_ = 0;
  bool pending_async_ = false;   // the last save() was asynchronous
  double copy_s_ = 0, waited_s_ = 0;  // its copy, and what the loop waited for it
  bool copied_ = true;
  std::condition_variable copied_cv_;
  struct Result {  // one rank: the last write, reported by flush_messages() on the loop's thread
    int64_t step = 0;
    bool done = false;
    std::string error;
    double write_s = 0;
  } result_;
  std::atomic<int> shard_status_{0};  // 0 in flight, 1 written, 2 failed
  Log log_;
  std::chrono::steady_clock::time_point last_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::pair<std::string, LogFields>> messages_;  // from the writer thread
};

}  // namespace loom::rt

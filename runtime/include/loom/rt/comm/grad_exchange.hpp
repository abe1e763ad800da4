// grad_exchange.hpp — how ranks combine their gradients each step: an allreduce of the
// ranks' gradients in buckets overlapped with backward (fp32, or fp16 payloads), or
// PowerSGD (Vogels et al., 2019): rank-R factors P and Q of each weight matrix, with error
// feedback, warm-started Q, Gram-Schmidt orthogonalisation, a plain start for the first S steps,
// and matrices that would not shrink at least 2x sent as they are.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loom/rt/comm/comm.hpp"
#include "loom/rt/tensor/param.hpp"

namespace loom::rt {

struct CompressConfig {
  std::string kind = "none";  // none | fp16 | powersgd
  int rank = 4;
  int64_t start = 0;
};

// "none", "fp16", "powersgd", "powersgd:rank=4,start=100"; throws Error naming what is wrong.
CompressConfig parse_grad_compress(const std::string& text);

// Where several ranks' CUDA gradients can be summed in device memory: NCCL, when the ranks are
// MPI processes each driving a GPU of its own and the payload is not PowerSGD's (collective:
// every rank calls it alike). Otherwise null, and *why says why the gradients are staged through
// host memory instead.
std::unique_ptr<DeviceCollectives> gpu_collectives(Communicator& comm, double timeout_s, bool powersgd, std::string* why);

// CPU: makes params[i].*member, for i in `order`, views of consecutive places of *flat (made
// with `floats` floats when undefined), copying in the values of any tensor that is not already
// a view of its place (the first call, or a caller replaced it). The exchange's gradients and
// ZeRO-1's parameters live so.
void bind_flat(Tensor* flat, size_t floats, const std::vector<size_t>& order, std::vector<Param>& params,
               Tensor Param::*member);

// Each step: begin() before backward, ready(i) as parameter i's gradient becomes final (the
// model's backward calls it, last layer first), finish() after backward. With buckets
// (`bucket_mb` > 0, kinds none and fp16) a communication thread sums each bucket over the
// ranks as soon as all its gradients are ready, while backward goes on; otherwise (PowerSGD
// needs every gradient at once) finish() exchanges everything. The gradients are summed as they
// are: each rank's are already its part of the whole (Task::train_step). The `extras` (loss,
// overflow flag) are summed in fp32 at the end.
class GradExchange {
 public:
  GradExchange(CompressConfig c, double bucket_mb);
  ~GradExchange();
  GradExchange(const GradExchange&) = delete;
  GradExchange& operator=(const GradExchange&) = delete;

  bool overlaps() const { return bucket_bytes_ > 0 && c_.kind != "powersgd"; }
  // ZeRO-1 (before the first step; plain fp32 only): each bucket is reduce-scattered instead of
  // allreduced. After finish(), this rank's chunk [begin, begin + count) of each bucket's flat
  // buffer holds the summed gradient of those positions; the rest of the buffer, which on the
  // CPU is the parameters' gradients themselves (bind_views), holds partial sums. The flat order
  // is the bucket's parameters one after another. With a device communicator the flat buffer is
  // the packed bucket on the device, `per_rank` floats a rank (DeviceCollectives' layout: chunk r
  // at r * per_rank, the last one padded); otherwise it is in host memory.
  void set_sharded();
  bool sharded() const { return sharded_; }
  struct Chunk {
    const std::vector<size_t>& params;
    float* flat;  // the bucket's `size` floats; free for the caller until the next begin()
    size_t size, begin, count;
    size_t per_rank, ranks;  // the device layout (both 0 in host memory)
    size_t padded() const { return per_rank * ranks; }  // the flat buffer's floats on the device
  };
  Chunk chunk(size_t bucket) {
    Bucket& b = buckets_[bucket];
    if (dev_comm_) return {b.params, b.dev.f32(), b.floats, b.begin, b.count, per_rank(b), device_ranks()};
    return {b.params, b.flat.defined() ? b.flat.f32() : b.buf.data(), b.floats, b.begin, b.count, 0, 0};
  }
  DeviceCollectives* device_comm() const { return dev_comm_; }
  Device device() const { return dev_; }  // where the gradients live (known from the first begin())

  // Gradients on a GPU summed in device memory by `dc` (NCCL; before the first step; plain, fp16
  // or sharded, not PowerSGD): each bucket is packed on the device as it becomes ready, reduced there
  // and unpacked at finish(); the host Communicator carries only the extras. Without it, GPU
  // gradients are staged through the buckets' page-locked host buffers.
  void set_device_comm(DeviceCollectives* dc);
  bool on_device() const { return dev_comm_ != nullptr; }

  void begin(Communicator& comm, std::vector<Param>& params);
  void ready(size_t param);
  void finish(std::vector<float>& extras, int64_t step);
  // Bytes this rank sent into collectives in the last step, and what plain fp32 would send
  // (in the same ring: 2 (p-1)/p of the payload).
  size_t last_bytes() const { return last_bytes_; }
  size_t plain_bytes() const { return plain_bytes_; }
  size_t buckets() const { return buckets_.size(); }
  // CPU seconds the communication thread spent on buckets (copies, sums, polling), summed over
  // the run: on a rank with one core, time taken from backward.
  double thread_busy_seconds() {
    std::lock_guard<std::mutex> lock(mu_);
    return thread_busy_;
  }
  // PowerSGD's state on this rank (error feedback, warm-started Q), for checkpoints, as
  // "powersgd.<parameter index>.error|q"; restore() applies such a state (when the exchange is
  // planned at its first step) and throws Error when it does not fit the model.
  std::vector<std::pair<std::string, Tensor>> state() const;
  void restore(std::vector<std::pair<std::string, Tensor>> state);

 private:
  struct Matrix {
    size_t param;
    int rows, cols;
    std::vector<float> q;  // warm-started Q [cols, r] (on the host, where it is summed)
    Tensor error;          // error feedback [rows * cols], beside the gradient
  };
  struct Bucket {
    std::vector<size_t> params;
    size_t floats = 0;
    int pending = 0;
    std::vector<float> buf;
    bool pinned = false;          // buf page-locked for the GPU's copies
    size_t begin = 0, count = 0;  // sharded: this rank's reduced chunk of flat (CPU) or buf
    Tensor dev;                   // with a device communicator: the packed bucket on the GPU
    Tensor flat;                  // CPU, not PowerSGD: the bucket's gradients live here (bind_views)
    void* ready_mark = nullptr;   // the default stream's work that wrote the gradients
    void* landed_mark = nullptr;  // staged: the side stream's copies back to the device
  };
  void plan(const std::vector<Param>& params);
  size_t device_ranks() const { return static_cast<size_t>(dev_comm_->size()); }
  size_t per_rank(const Bucket& b) const { return (b.floats + device_ranks() - 1) / device_ranks(); }  // sharded on the device
  size_t padded(const Bucket& b) const { return per_rank(b) * device_ranks(); }
  // Training thread, as a bucket's last gradient is final: packs it on the device (with a device
  // communicator) and marks the work queued so far, which the exchange waits for and no more.
  void mark_ready(Bucket& b);
  void bind_views(std::vector<Param>& params);  // CPU: each gradient a view of its bucket's flat
  void reduce_bucket(Bucket& b);  // sum over ranks: on the device, in place (flat), or staged through buf
  void sum(float* data, size_t n);  // allreduce, fp32 or fp16 payloads
  void land_buckets();            // training thread, after every bucket's sum: back into the gradients
  void drop_marks();
  void powersgd(std::vector<Param>& params, std::vector<float>& extras, int64_t step);  // where the gradients live
  void comm_loop();

  CompressConfig c_;
  size_t bucket_bytes_;
  Communicator* comm_ = nullptr;
  DeviceCollectives* dev_comm_ = nullptr;
  Device dev_ = Device::kCpu;  // where the gradients live
  std::vector<Param>* params_ = nullptr;
  bool planned_ = false, sharded_ = false;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // parameter -> bucket
  std::vector<char> is_ready_;
  std::vector<Matrix> matrices_;
  std::vector<std::pair<std::string, Tensor>> restore_;  // applied by plan()
  std::vector<size_t> plain_;  // PowerSGD: parameters sent as they are
  std::vector<float> buf_;
  Tensor psgd_scratch_;  // PowerSGD's P and Q on the gradients' device
  size_t last_bytes_ = 0, plain_bytes_ = 0, grad_bytes_ = 0;

  // The communication thread and what it shares with the training thread.
  std::thread thread_;
  int gpu_ = -1;  // the rank's CUDA device when its gradients live there: the thread uses it too
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;
  size_t done_ = 0;
  double thread_busy_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace loom::rt

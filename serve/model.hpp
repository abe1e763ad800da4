// core.hpp — loom-serve's protocol-neutral core (Contract 5): the model repository, one dynamic
// batcher per loaded model version, the metrics, and the checks every inference request goes
// through. The HTTP and gRPC front ends only translate their wire formats to and from these types.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loom/rt/mlp.hpp"

namespace loom::serve {

using Clock = std::chrono::steady_clock;

// What went wrong, as the protocol says it: HTTP status and gRPC code come from the kind.
enum class Status { kOk, kBadRequest, kUnauthorized, kNotFound, kTooLarge, kUnavailable, kTimeout, kInternal };
int http_status(Status s);
int grpc_code(Status s);  // grpc::StatusCode values
const char* status_reason(Status s);  // metrics label: "bad_request", "not_found", ...

class ServeError : public std::runtime_error {
 public:
  ServeError(Status s, const std::string& msg) : std::runtime_error(msg), status(s) {}
  Status status;
};

struct Options {
  int max_batch_size = 32;
  int64_t max_queue_delay_us = 500;
  int max_queue_size = 256;      // requests waiting per model version; beyond: 503 at once
  int64_t request_timeout_ms = 30000;
  int threads = 1;               // BLAS threads of each model's forward pass
  std::string device = "auto";   // auto (CUDA when built and a GPU is usable) | cpu | cuda
};

// One model version loaded from a Loom HDF5 file (type "mlp"). Inputs: "input", FP32 (as the
// model sees it) or UINT8 (raw pixels: model.config's preprocess scale/mean/std applied),
// shape [N, features] or [N, ...] whose trailing dimensions multiply to the features. Output:
// "logits", FP32 [N, classes].
class ServedModel {
 public:
  // Throws rt::Error when the file cannot be served, or device "cuda" is not usable.
  ServedModel(std::string name, std::string version, std::string path, const std::string& device = "cpu");
  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  const std::string& path() const { return path_; }
  int in_features() const { return in_; }
  bool on_cuda() const { return cuda_; }
  int out_features() const { return out_; }
  const std::string& config_json() const { return config_; }
  float scale() const { return scale_; }
  float mean() const { return mean_; }
  float stddev() const { return std_; }
  // rows x in_features (preprocessed) -> rows x out_features; one caller at a time (the batcher).
  void forward(const float* x, int rows, float* out);

 private:
  std::string name_, version_, path_, config_;
  int in_ = 0, out_ = 0;
  bool cuda_ = false;
  float scale_ = 1, mean_ = 0, std_ = 1;
  std::unique_ptr<rt::Mlp> mlp_;
};

class Metrics;

// Forms batches of up to max_batch_size rows, waiting at most max_queue_delay_us after the
// first request of a batch, runs them through the model on its own thread and hands each
// request its rows. The queue is bounded: submit() refuses at once when it is full.
class Batcher {
 public:
  struct Outcome {
    Status status = Status::kOk;
    std::string error;
    std::vector<float> out;  // rows x out_features
    double queue_s = 0, compute_s = 0;
    int batch_rows = 0;
  };
  using Done = std::function<void(Outcome)>;
  Batcher(std::shared_ptr<ServedModel> model, const Options& o, Metrics* metrics);
  ~Batcher();  // drains: every admitted request gets its answer
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;
  // Throws ServeError kUnavailable (queue full, or stopping) or kBadRequest (too many rows).
  void submit(std::vector<float> x, int rows, Clock::time_point deadline, Done done);
  // Blocking convenience for the synchronous front ends.
  Outcome run(std::vector<float> x, int rows, Clock::time_point deadline);
  size_t queued() const;
  const ServedModel& model() const { return *model_; }

 private:
  struct Job {
    std::vector<float> x;
    int rows;
    Clock::time_point arrived, deadline;
    Done done;
  };
  void loop();
  void answer_loop();
  std::shared_ptr<ServedModel> model_;
  Options o_;
  Metrics* metrics_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  std::thread thread_;
  // Answers go out on a thread of their own: sending responses (gRPC may write inline) does
  // not hold up the next batch's forward pass.
  std::mutex answer_mu_;
  std::condition_variable answer_cv_;
  std::deque<std::pair<Done, Outcome>> answers_;
  bool answers_done_ = false;
  std::thread answer_thread_;
};

// Prometheus text: counters, gauges and histograms per model.
class Metrics {
 public:
  void request(const std::string& model, const std::string& protocol, Status s);
  void observe(const std::string& model, double queue_s, double compute_s, int batch_rows, bool batch_start);
  void set_queue(const std::string& model, size_t n);
  std::string text() const;

 private:
  struct Histogram {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // one per bound, plus +Inf
    double sum = 0;
    uint64_t n = 0;
    void add(double v);
  };
  struct PerModel {
    std::map<std::string, uint64_t> requests;  // "protocol|code" -> count
    std::map<std::string, uint64_t> failures;  // reason -> count
    size_t queue = 0;
    Histogram queue_s, compute_s, batch;
    uint64_t batches = 0;
  };
  PerModel& at(const std::string& model);
  mutable std::mutex mu_;
  std::map<std::string, PerModel> models_;
};

// The models loaded from a repository (DIR/<model>/<version>/model.h5) and from
// InferenceService specs, with their batchers. reload() loads what is new or changed and
// unloads what is gone, while requests keep running on the versions they started with.
class Repository {
 public:
  Repository(std::string dir, std::vector<std::string> specs, Options o, Metrics* metrics,
             std::function<void(const std::string& level, const std::string& msg)> log);
  // Throws when nothing can be served at start; later reloads keep what fails to load.
  void reload(bool initial);
  // The batcher of `name` at `version` (empty: the newest). Throws ServeError kNotFound.
  std::shared_ptr<Batcher> find(const std::string& name, const std::string& version) const;
  std::vector<std::string> versions(const std::string& name) const;
  bool empty() const;
  void stop();  // drains and drops every batcher

 private:
  struct Entry {
    std::string path;
    int64_t mtime_ns = 0, size = 0;
    std::shared_ptr<Batcher> batcher;
  };
  std::string dir_;
  std::vector<std::string> specs_;
  Options o_;
  Metrics* metrics_;
  std::function<void(const std::string&, const std::string&)> log_;
  mutable std::mutex mu_;
  std::map<std::string, std::map<std::string, Entry>> models_;  // name -> version -> entry
};

// An InferenceService spec (examples/inferenceservice.yaml), validated. Throws ServeError
// kBadRequest naming the field at fault, unknown fields included.
struct InferenceServiceSpec {
  std::string name, path, format;
  int requests_gpu = 0, limits_gpu = 0;
  std::string requests_memory, limits_memory;
  int min_replicas = 1, max_replicas = 1, queue_length = 0;
};
InferenceServiceSpec load_spec(const std::string& file);

// A Loom model name or version as found in a URL or a folder: letters, digits, '-', '_', '.'
// (not starting with '.'), at most 128 characters.
bool valid_name(const std::string& s);

// Decodes one input tensor's bytes to the model's FP32 rows: checks name, datatype, shape and
// size against the model. `data` holds datatype-sized little-endian elements.
struct TensorIn {
  std::string name, datatype;
  std::vector<int64_t> shape;
  std::string data;  // raw bytes
};
std::vector<float> decode_input(const ServedModel& m, const std::vector<TensorIn>& inputs, int* rows);

}  // namespace loom::serve

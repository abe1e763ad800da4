// stats.hpp — one model version's inference statistics (Triton's statistics extension): the
// counters its /v2/models/M/versions/V/stats answer, gRPC's ModelStatistics and its nv_inference_*
// Prometheus lines are all read from.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "grpc_service.pb.h"
#include "loom/rt/io/prometheus.hpp"

namespace loom::serve {

class ModelStats {
 public:
  // One forward pass of `rows` rows for `requests` requests, and how long it took to stack the
  // inputs, run the model and hand out the outputs.
  void executed(int rows, int requests, uint64_t input_ns, uint64_t infer_ns, uint64_t output_ns);
  // A request answered: ok, how long it waited in the queue, and from arrival to its answer.
  void answered(bool ok, uint64_t queue_ns, uint64_t total_ns);
  // A request refused before it was queued (its inputs did not decode).
  void refused(uint64_t total_ns);
  void fill(inference::ModelStatistics* out) const;

 private:
  struct Duration {
    uint64_t count = 0, ns = 0;
    void add(uint64_t n, uint64_t times = 1) { count += times, ns += n * times; }
  };
  struct Batch {
    Duration input, infer, output;
  };
  mutable std::mutex mu_;
  Duration success_, fail_, queue_, input_, infer_, output_;
  uint64_t inferences_ = 0, executions_ = 0, last_ms_ = 0;
  std::map<int, Batch> batches_;  // by rows in the batch
};

// Triton's nv_inference_* counters for every (name, version, stats) given, from the same numbers.
void stats_prometheus(rt::PrometheusText& out,
                      const std::vector<std::pair<std::pair<std::string, std::string>, const ModelStats*>>& models);

}  // namespace loom::serve

// pipeline.hpp — an InferencePipeline (Contract 9) served as one model: steps that call KServe
// v2 services over gRPC, each step's inputs mapped from the request's tensors or from earlier
// steps' outputs; steps whose inputs are ready run at once (in parallel), tensors pass between
// hops as raw bytes, the caller's deadline bounds every hop and a cancelled call cancels its
// hops; a failed step answers with its name and status. The spec's reader is pure; the runner
// (pipeline_plan.cpp, pipeline_run.cpp) needs gRPC.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.hpp"
#include "core/tensor_in.hpp"

namespace loom::serve {

struct PipelineStep {
  std::string name, address, model;  // address: host:port of url grpc://host:port, or where `service` is
  std::string service;               // `service: <name>`: a controller found in the services folder
  std::vector<std::pair<std::string, std::string>> inputs;  // the model's input <- "request.X" or "step.Y"
};

struct PipelineSpec {
  std::string name, file, services_dir;
  std::vector<PipelineStep> steps;  // in an order where every step follows those it reads
  std::vector<std::pair<std::string, std::string>> outputs;  // answer name <- "step.Y"
};

// Reads and checks a pipeline spec: names, url grpc://host:port, every source "request.X" or
// "<earlier step>.<output>", no cycle, no unknown field. Throws ServeError kInput naming
// the field at fault. A step's `service: <name>` is looked up in `services_dir` (services.hpp);
// one that is not announced there is an rt::Error naming the step and the folder.
PipelineSpec load_pipeline_spec(const std::string& file, const std::string& services_dir);

// A pipeline being served. run() may be called from many threads; `done` is called once, on a
// gRPC thread.
class PipelineRunner {
 public:
  virtual ~PipelineRunner() = default;
  virtual const std::string& name() const = 0;
  // Empty until the pipeline has been ready once (its steps' metadata makes them).
  virtual const std::vector<TensorDesc>& inputs() const = 0;
  virtual const std::vector<TensorDesc>& outputs() const = 0;
  // Whether every step answers (and answered its metadata as the spec needs); `why` names the
  // step and the fault when not.
  virtual bool ready(std::string* why = nullptr) const = 0;
  // Whether every step has answered its metadata once (the pipeline knows its inputs and
  // outputs). A run before that answers kUnavailable at once; after it, a run is tried even
  // while a step is not ready (it may be back before the next probe), and a hop that fails
  // names its step.
  virtual bool connected(std::string* why = nullptr) const = 0;
  struct Result {
    Status status = Status::kOk;
    std::string error;
    std::vector<TensorIn> outputs;  // in outputs() order
  };
  // Cancels the run's hops in flight (the caller went away); the run then answers kTimeout.
  class Cancel {
   public:
    virtual ~Cancel() = default;
    virtual void cancel() = 0;
  };
  virtual std::shared_ptr<Cancel> run(std::vector<TensorIn> in, Clock::time_point deadline, std::function<void(Result)> done) = 0;
};

// Throws ServeError kUnavailable naming the pipeline and why, when `p` is not connected: what a
// front end answers for its infer and metadata calls then.
void require_connected(const PipelineRunner& p);

// Connects to every step's service, reads its models' metadata (each step's inputs and outputs
// must exist there) and returns the runner. A step that cannot be reached or does not fit (yet)
// leaves it not ready, naming the step, and a thread tries again with backoff: the steps may
// start after the pipeline, in any order. Once ready, a step whose model stops answering makes
// it not ready again until it is back (the server never exits for it). A `service:` step whose
// hop finds nobody listening (UNAVAILABLE) looks the service up again: when its controller has
// come back elsewhere, the hop is sent there once more. `token`: sent as a bearer token to the
// services when not empty.
// Every hop's answer is checked against its model's metadata (check_answer) before it is used;
// a hop's messages may be up to `max_bytes` either way (the server's --max-request-bytes).
std::unique_ptr<PipelineRunner> connect_pipeline(const PipelineSpec& spec, const std::string& token, int timeout_ms,
                                                 int max_bytes);

}  // namespace loom::serve

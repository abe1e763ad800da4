// infer.hpp — the one request flow of inference, whatever the protocol: resolve the model or the
// pipeline, check and decode the inputs, run them (a model's batcher, a pipeline's steps) within
// the deadline, and answer the outputs asked for. HTTP and gRPC only translate to and from it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "frontend/context.hpp"

namespace loom::serve {

// One call as a front end hands it over.
struct InferCall {
  std::string model, version;       // version "": the newest
  std::vector<TensorIn> inputs;     // as the client sent them (raw bytes of their datatype)
  std::vector<std::string> outputs; // the names asked for; none: every output
  Clock::time_point deadline;
};

// Its answer: who answered, and the outputs asked for, in the order asked.
struct InferAnswer {
  Status status = Status::kOk;
  std::string error;
  std::string model, version;
  std::vector<TensorIn> outputs;
};

// What can be refused from the name alone, before a request is read: an unknown model or
// version (404), a pipeline not ready (503), a language model (400: it answers generate,
// not infer).
void check_target(Context& ctx, const std::string& model, const std::string& version);

// Starts `call` and calls `done` once with its answer, on the batcher's or the pipeline's thread.
// What is refused before anything runs (an unknown model or output, a bad input) throws
// ServeError instead. Returns a pipeline run's cancel handle (null for a model).
std::shared_ptr<PipelineRunner::Cancel> start_inference(Context& ctx, InferCall call, std::function<void(InferAnswer)> done);

// The same, waited for (HTTP's threads): the answer, or ServeError with its status.
InferAnswer run_inference(Context& ctx, InferCall call);

}  // namespace loom::serve

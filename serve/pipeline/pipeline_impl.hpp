// pipeline_impl.hpp — the gRPC pipeline runner's parts, shared by pipeline_plan.cpp (connecting:
// the steps' metadata, the plan, readiness and the watcher) and pipeline_run.cpp (one call: the
// hops, their answers checked, the answer).
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "grpc_service.grpc.pb.h"
#include "pipeline/pipeline.hpp"

namespace loom::serve::pipeline_impl {

using Stub = inference::GRPCInferenceService::Stub;

// Where a step's input comes from: the request's input `index` (step -1), or output `index` of
// step `step` (its needed outputs, in the order it asks for them).
struct Source {
  int step = -1;
  size_t index = 0;
};

inline Status from_grpc(grpc::StatusCode c) {
  switch (c) {
    case grpc::INVALID_ARGUMENT: return Status::kInput;
    case grpc::UNAUTHENTICATED: return Status::kUnauthorized;
    case grpc::UNAVAILABLE: return Status::kUnavailable;
    case grpc::DEADLINE_EXCEEDED:
    case grpc::CANCELLED: return Status::kTimeout;
    default: return Status::kInternal;
  }
}

class GrpcPipeline;

// What the steps' metadata made of the spec: the pipeline's inputs and outputs and where every
// hop's tensors come from. Built when every step has answered its metadata; a run keeps the plan
// it started with.
struct Plan {
  std::vector<TensorDesc> inputs, outputs;
  std::vector<std::vector<Source>> sources;           // per step, per input
  std::vector<std::vector<std::string>> needed;       // per step, the outputs later steps or the answer read
  std::vector<std::vector<TensorDesc>> needed_desc;   // and what the step's metadata says of each
  std::vector<std::vector<size_t>> consumers;         // per step, the steps that read it
  std::vector<Source> answer;                         // per pipeline output
  std::vector<int> request_uses;                      // per request input, the steps that read it
  std::vector<std::vector<int>> out_uses;             // per step and needed output, the steps and answers that read it
};

// Where a step's hops go. A `service:` step's address can change (its controller came back on
// other ports), so the stub is swapped under the lock and each hop holds the one it used.
struct Endpoint {
  mutable std::mutex mu;
  std::string address;
  std::shared_ptr<Stub> stub;
  std::atomic<int64_t> hop_us{0};  // the step's recent hop time (a moving average), for the launch order
};

struct Call {
  grpc::ClientContext ctx;
  inference::ModelInferRequest req;
  inference::ModelInferResponse res;
  std::shared_ptr<Stub> stub;  // kept alive until the hop answers
  std::string address;
  Clock::time_point sent;
  bool started = false, done = false, retried = false;
};

class Run : public PipelineRunner::Cancel, public std::enable_shared_from_this<Run> {
 public:
  Run(const GrpcPipeline& p, std::shared_ptr<const Plan> plan, std::vector<TensorIn> request, Clock::time_point deadline,
      std::function<void(PipelineRunner::Result)> done);
  void start();
  void cancel() override;

 private:
  void launch_all(std::vector<size_t> ready);
  void launch(size_t step);
  void send(size_t step, Call& c);
  std::string take(const Source& s);
  bool retry_elsewhere(size_t step, const grpc::Status& st, std::unique_lock<std::mutex>& lock);
  void on_done(size_t step, const grpc::Status& st);
  void fail(Status s, const std::string& why, std::unique_lock<std::mutex>& lock);
  const GrpcPipeline& p_;
  std::shared_ptr<const Plan> plan_;
  std::vector<TensorIn> request_;
  Clock::time_point deadline_;
  std::function<void(PipelineRunner::Result)> done_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Call>> calls_;
  std::vector<std::unique_ptr<Call>> retired_;  // hops sent again elsewhere: theirs ended, freed with the run
  std::vector<std::vector<TensorIn>> outs_;  // per step, its needed outputs
  std::vector<int> waiting_;                 // per step, producers not yet answered
  std::vector<int> request_uses_;            // per request input, the hops that have yet to read it
  std::vector<std::vector<int>> out_uses_;   // per step and needed output, the readers yet to come
  size_t left_;
  bool finished_ = false;
};

class GrpcPipeline : public PipelineRunner {
 public:
  GrpcPipeline(const PipelineSpec& spec, const std::string& token, int timeout_ms, int max_bytes);
  ~GrpcPipeline() override;
  const std::string& name() const override { return spec_.name; }
  const std::vector<TensorDesc>& inputs() const override { return current() ? current()->inputs : none_; }
  const std::vector<TensorDesc>& outputs() const override { return current() ? current()->outputs : none_; }
  bool ready(std::string* why) const override {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (why) *why = why_;
    return ready_;
  }
  bool connected(std::string* why) const override {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (why) *why = why_;
    return plan_ != nullptr;
  }
  std::shared_ptr<Cancel> run(std::vector<TensorIn> in, Clock::time_point deadline, std::function<void(Result)> done) override {
    std::string why;
    auto plan = current();
    if (!plan) {
      connected(&why);
      Result r;
      r.status = Status::kUnavailable;
      r.error = "pipeline " + spec_.name + " is not ready: " + why;
      done(std::move(r));
      return nullptr;
    }
    auto r = std::make_shared<Run>(*this, std::move(plan), std::move(in), deadline, std::move(done));
    r->start();
    return r;
  }
  std::shared_ptr<grpc::Channel> channel(const std::string& address) const {
    grpc::ChannelArguments args;  // gRPC's default 4 MiB would refuse a BERT hidden state at batch 32
    args.SetMaxReceiveMessageSize(max_bytes_);
    args.SetMaxSendMessageSize(max_bytes_);
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }

 private:
  friend class Run;
  void read_metadata(size_t i, int timeout_ms, std::vector<inference::ModelMetadataResponse>* meta) const;
  std::shared_ptr<const Plan> build(int timeout_ms) const;  // rt::Error naming the step at fault
  void probe(int timeout_ms);  // every step's model ready: else not ready, with the step named
  void watch();
  std::shared_ptr<const Plan> current() const {
    std::lock_guard<std::mutex> lock(state_mu_);
    return plan_;
  }
  std::shared_ptr<Stub> stub(size_t i, std::string* address) const {
    std::lock_guard<std::mutex> lock(ends_[i]->mu);
    *address = ends_[i]->address;
    return ends_[i]->stub;
  }
  bool look_up_again(size_t i, const std::string& was) const;
  std::string where(size_t i, const std::string& address) const {
    const PipelineStep& st = spec_.steps[i];
    return "pipeline " + spec_.name + ": step '" + st.name + "' (model " + st.model + " at " + address +
           (st.service.empty() ? "" : ", service " + st.service) + ")";
  }
  PipelineSpec spec_;
  std::string token_;
  int timeout_ms_, max_bytes_;  // metadata calls; a hop's largest message, either way (--max-request-bytes)
  std::vector<std::unique_ptr<Endpoint>> ends_;
  const std::vector<TensorDesc> none_;
  mutable std::mutex state_mu_;
  std::condition_variable wake_;
  std::shared_ptr<const Plan> plan_;               // null until every step has answered
  std::vector<std::shared_ptr<const Plan>> kept_;  // every plan made: inputs() and outputs() hand out references
  bool ready_ = false, stop_ = false;
  std::string why_;
  std::thread watcher_;
};

}  // namespace loom::serve::pipeline_impl

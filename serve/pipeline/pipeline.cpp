// pipeline.cpp — the pipeline runner on gRPC's callback client: at connect, each step's model
// metadata (what it takes and gives); per run, a small state machine that starts every step
// whose producers have answered, passes their raw output bytes on as the next hop's
// raw_input_contents, and answers once: the outputs, or the first failed step by name.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "grpc_service.grpc.pb.h"
#include "loom/rt/error.hpp"
#include "pipeline/pipeline.hpp"
#include "services.hpp"

namespace loom::serve {

namespace {

using Stub = inference::GRPCInferenceService::Stub;

// Where a step's input comes from: the request's input `index` (step -1), or output `index` of
// step `step` (its needed outputs, in the order it asks for them).
struct Source {
  int step = -1;
  size_t index = 0;
};

Status from_grpc(grpc::StatusCode c) {
  switch (c) {
    case grpc::INVALID_ARGUMENT: return Status::kBadRequest;
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

const inference::ModelMetadataResponse::TensorMetadata* find_tensor(
    const google::protobuf::RepeatedPtrField<inference::ModelMetadataResponse::TensorMetadata>& ts, const std::string& name) {
  for (const auto& t : ts)
    if (t.name() == name) return &t;
  return nullptr;
}

void GrpcPipeline::read_metadata(size_t i, int timeout_ms, std::vector<inference::ModelMetadataResponse>* meta) const {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  if (!token_.empty()) ctx.AddMetadata("authorization", "Bearer " + token_);
  inference::ModelMetadataRequest req;
  req.set_name(spec_.steps[i].model);
  const grpc::Status st = ends_[i]->stub->ModelMetadata(&ctx, req, &(*meta)[i]);
  if (!st.ok()) throw rt::Error(where(i, ends_[i]->address) + " cannot be reached for its metadata: " + st.error_message());
}

// A `service:` step's announcement read again: true when it now names another address than
// `was` (the step's stub then goes there).
bool GrpcPipeline::look_up_again(size_t i, const std::string& was) const {
  const PipelineStep& st = spec_.steps[i];
  if (st.service.empty()) return false;
  std::string now;
  try {
    now = service_grpc_address(spec_.services_dir, st.service);
  } catch (const std::exception&) {
    return false;
  }
  std::lock_guard<std::mutex> lock(ends_[i]->mu);
  if (ends_[i]->address == now) return now != was;  // another hop has moved it already
  ends_[i]->address = now;
  ends_[i]->stub = inference::GRPCInferenceService::NewStub(channel(now));
  return true;
}

GrpcPipeline::GrpcPipeline(const PipelineSpec& spec, const std::string& token, int timeout_ms, int max_bytes)
    : spec_(spec), token_(token), timeout_ms_(timeout_ms), max_bytes_(max_bytes) {
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels;  // steps at one address share a connection
  for (const auto& st : spec_.steps) {
    auto& ch = channels[st.address];
    if (!ch) ch = channel(st.address);
    ends_.push_back(std::make_unique<Endpoint>());
    ends_.back()->address = st.address;
    ends_.back()->stub = inference::GRPCInferenceService::NewStub(ch);
  }
  try {
    plan_ = build(timeout_ms_);
    kept_.push_back(plan_);
    ready_ = true;
  } catch (const std::exception& e) {
    why_ = e.what();
  }
  watcher_ = std::thread([this] { watch(); });
}

GrpcPipeline::~GrpcPipeline() {
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    stop_ = true;
  }
  wake_.notify_all();
  watcher_.join();
}

// Steps may start after the pipeline (on Slurm they are replica jobs that start in any order)
// and may go away: until every step has answered its metadata the pipeline is not ready, and
// tries again with backoff (0.5 s, doubling, at most 2 s; a `service:` step looked up again each
// time); once ready it asks each step every 2 s whether its model is ready, and is not ready
// while one is not (reading the metadata again when they are back: a step may have come back
// with another model).
void GrpcPipeline::watch() {
  int wait_ms = 500;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(state_mu_);
      wake_.wait_for(lock, std::chrono::milliseconds(ready_ ? 2000 : wait_ms), [this] { return stop_; });
      if (stop_) return;
    }
    if (ready(nullptr)) {
      probe(1000);
      wait_ms = 500;
      continue;
    }
    for (size_t i = 0; i < spec_.steps.size(); ++i) {
      std::string address;
      stub(i, &address);
      look_up_again(i, address);  // a controller that came back on other ports
    }
    try {
      auto plan = build(std::min(timeout_ms_, 2000));
      std::lock_guard<std::mutex> lock(state_mu_);
      plan_ = plan;
      kept_.push_back(plan);
      ready_ = true;
      why_.clear();
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(state_mu_);
      why_ = e.what();
      wait_ms = std::min(wait_ms * 2, 2000);
    }
  }
}

void GrpcPipeline::probe(int timeout_ms) {
  for (size_t i = 0; i < spec_.steps.size(); ++i) {
    std::string address;
    auto s = stub(i, &address);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
    if (!token_.empty()) ctx.AddMetadata("authorization", "Bearer " + token_);
    inference::ModelReadyRequest req;
    req.set_name(spec_.steps[i].model);
    inference::ModelReadyResponse res;
    grpc::Status st = s->ModelReady(&ctx, req, &res);
    if (!st.ok() && st.error_code() == grpc::UNAVAILABLE && look_up_again(i, address)) continue;  // moved: next probe
    if (st.ok() && res.ready()) continue;
    std::lock_guard<std::mutex> lock(state_mu_);
    ready_ = false;
    why_ = where(i, address) + (st.ok() ? ": its model is not ready" : ": " + st.error_message());
    return;
  }
}

std::shared_ptr<const Plan> GrpcPipeline::build(int timeout_ms) const {
  auto plan = std::make_shared<Plan>();
  Plan& P = *plan;
  const size_t n = spec_.steps.size();
  std::vector<inference::ModelMetadataResponse> meta(n);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < n; ++i) {
    read_metadata(i, timeout_ms, &meta);
    index[spec_.steps[i].name] = i;
  }
  P.needed.assign(n, {});
  P.needed_desc.assign(n, {});
  P.consumers.assign(n, {});
  // A source "step.output" as (step, index among its needed outputs), the output checked.
  auto step_source = [&](const std::string& src, const std::string& at) {
    const size_t dot = src.find('.');
    const size_t j = index.at(src.substr(0, dot));
    const std::string out = src.substr(dot + 1);
    if (!find_tensor(meta[j].outputs(), out))
      throw rt::Error("pipeline " + spec_.name + ": " + at + " reads '" + src + "', but model " + spec_.steps[j].model +
                      " has no output '" + out + "'");
    auto& need = P.needed[j];
    auto it = std::find(need.begin(), need.end(), out);
    if (it == need.end()) {
      const auto* t = find_tensor(meta[j].outputs(), out);
      P.needed_desc[j].push_back({out, t->datatype(), {t->shape().begin(), t->shape().end()}});
      it = need.insert(need.end(), out);
    }
    return Source{static_cast<int>(j), static_cast<size_t>(it - need.begin())};
  };
  for (size_t i = 0; i < n; ++i) {
    std::vector<Source> srcs;
    for (const auto& [in, src] : spec_.steps[i].inputs) {
      const auto* t = find_tensor(meta[i].inputs(), in);
      if (!t) throw rt::Error(where(i, spec_.steps[i].address) + ": the model has no input '" + in + "'");
      if (src.compare(0, 8, "request.") == 0) {
        const std::string name = src.substr(8);
        size_t k = 0;
        while (k < P.inputs.size() && P.inputs[k].name != name) ++k;
        if (k == P.inputs.size()) P.inputs.push_back({name, t->datatype(), {t->shape().begin(), t->shape().end()}});
        else if (P.inputs[k].datatype != t->datatype())
          throw rt::Error("pipeline " + spec_.name + ": request." + name + " feeds inputs of types " + P.inputs[k].datatype +
                          " and " + t->datatype());
        srcs.push_back({-1, k});
      } else {
        const Source s = step_source(src, "step " + spec_.steps[i].name + " input " + in);
        srcs.push_back(s);
        auto& c = P.consumers[static_cast<size_t>(s.step)];
        if (std::find(c.begin(), c.end(), i) == c.end()) c.push_back(i);
      }
    }
    P.sources.push_back(std::move(srcs));
  }
  for (const auto& [out, src] : spec_.outputs) {
    const Source s = step_source(src, "spec.outputs." + out);
    const auto* t = find_tensor(meta[static_cast<size_t>(s.step)].outputs(), src.substr(src.find('.') + 1));
    P.outputs.push_back({out, t->datatype(), {t->shape().begin(), t->shape().end()}});
    P.answer.push_back(s);
  }
  P.request_uses.assign(P.inputs.size(), 0);
  for (size_t i = 0; i < n; ++i) P.out_uses.emplace_back(P.needed[i].size(), 0);
  auto count = [&](const Source& s) { ++(s.step < 0 ? P.request_uses[s.index] : P.out_uses[static_cast<size_t>(s.step)][s.index]); };
  for (const auto& srcs : P.sources)
    for (const Source& s : srcs) count(s);
  for (const Source& s : P.answer) count(s);
  return plan;
}

Run::Run(const GrpcPipeline& p, std::shared_ptr<const Plan> plan, std::vector<TensorIn> request, Clock::time_point deadline,
         std::function<void(PipelineRunner::Result)> done)
    : p_(p), plan_(std::move(plan)), request_(std::move(request)), deadline_(deadline), done_(std::move(done)),
      request_uses_(plan_->request_uses), out_uses_(plan_->out_uses), left_(p.spec_.steps.size()) {
  const size_t n = p_.spec_.steps.size();
  outs_.assign(n, {});
  waiting_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    calls_.push_back(std::make_unique<Call>());
    std::vector<int> producers;
    for (const Source& s : plan_->sources[i])
      if (s.step >= 0 && std::find(producers.begin(), producers.end(), s.step) == producers.end()) producers.push_back(s.step);
    waiting_[i] = static_cast<int>(producers.size());
  }
}

void Run::start() {
  std::vector<size_t> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < waiting_.size(); ++i)
      if (waiting_[i] == 0) ready.push_back(i);
  }
  launch_all(std::move(ready));
}

// The slowest step first: the steps that start together end with the slowest of them, and each
// send takes the sending thread a while.
void Run::launch_all(std::vector<size_t> ready) {
  std::stable_sort(ready.begin(), ready.end(), [this](size_t a, size_t b) { return p_.ends_[a]->hop_us > p_.ends_[b]->hop_us; });
  for (size_t i : ready) launch(i);
}

// With mu_ held: a tensor for a hop or the answer. Its last reader takes it; earlier ones copy.
std::string Run::take(const Source& s) {
  TensorIn& t = s.step < 0 ? request_[s.index] : outs_[static_cast<size_t>(s.step)][s.index];
  int& left = s.step < 0 ? request_uses_[s.index] : out_uses_[static_cast<size_t>(s.step)][s.index];
  return --left == 0 ? std::move(t.data) : t.data;
}

// Builds step i's request from the tensors it reads and sends it (the answer comes to on_done).
void Run::launch(size_t i) {
  Call& c = *calls_[i];
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    const PipelineStep& st = p_.spec_.steps[i];
    c.req.set_model_name(st.model);
    for (size_t k = 0; k < st.inputs.size(); ++k) {
      const Source& s = plan_->sources[i][k];
      const TensorIn& t = s.step < 0 ? request_[s.index] : outs_[static_cast<size_t>(s.step)][s.index];
      auto* in = c.req.add_inputs();
      in->set_name(st.inputs[k].first);
      in->set_datatype(t.datatype);
      for (int64_t d : t.shape) in->add_shape(d);
      c.req.add_raw_input_contents(take(s));
    }
    for (const auto& o : plan_->needed[i]) c.req.add_outputs()->set_name(o);
    c.started = true;
  }
  send(i, c);
}

// Sends step i's hop `c` (its request built) to where the step's service is now.
void Run::send(size_t i, Call& c) {
  c.ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::duration_cast<std::chrono::system_clock::duration>(deadline_ - Clock::now()));
  if (!p_.token_.empty()) c.ctx.AddMetadata("authorization", "Bearer " + p_.token_);
  c.stub = p_.stub(i, &c.address);
  c.sent = Clock::now();
  auto self = shared_from_this();
  c.stub->async()->ModelInfer(&c.ctx, &c.req, &c.res, [self, i](grpc::Status st) { self->on_done(i, st); });
}

// With mu_ held: a `service:` hop that found nobody listening is sent once more when the
// service's announcement now names another address (its controller came back). The ended hop
// is kept until the run ends; its request moves to the new one.
bool Run::retry_elsewhere(size_t i, const grpc::Status& st, std::unique_lock<std::mutex>& lock) {
  Call& old = *calls_[i];
  if (st.error_code() != grpc::UNAVAILABLE || old.retried || !p_.look_up_again(i, old.address)) return false;
  auto again = std::make_unique<Call>();
  again->req = std::move(old.req);
  again->started = again->retried = true;
  Call& c = *again;
  retired_.push_back(std::move(calls_[i]));
  calls_[i] = std::move(again);
  lock.unlock();
  send(i, c);
  return true;
}

// With mu_ held: the run's one answer; the hops still in flight are cancelled (outside the lock:
// their callbacks take it).
void Run::fail(Status s, const std::string& why, std::unique_lock<std::mutex>& lock) {
  finished_ = true;
  std::vector<grpc::ClientContext*> flying;
  for (auto& c : calls_)
    if (c->started && !c->done) flying.push_back(&c->ctx);
  auto done = std::move(done_);
  lock.unlock();
  for (auto* ctx : flying) ctx->TryCancel();
  PipelineRunner::Result r;
  r.status = s;
  r.error = why;
  done(std::move(r));
}

void Run::on_done(size_t i, const grpc::Status& st) {
  std::unique_lock<std::mutex> lock(mu_);
  Call& c = *calls_[i];
  c.done = true;
  if (finished_) return;
  if (!st.ok() && retry_elsewhere(i, st, lock)) return;
  if (!st.ok()) return fail(from_grpc(st.error_code()), p_.where(i, c.address) + ": " + st.error_message(), lock);
  std::vector<TensorIn> got;
  for (size_t w = 0; w < plan_->needed[i].size(); ++w) {
    const std::string& want = plan_->needed[i][w];
    int k = 0;
    while (k < c.res.outputs_size() && c.res.outputs(k).name() != want) ++k;
    if (k == c.res.outputs_size() || k >= c.res.raw_output_contents_size())
      return fail(Status::kInternal, p_.where(i, c.address) + " answered without output '" + want + "' as raw contents", lock);
    const auto& o = c.res.outputs(k);
    got.push_back({want, o.datatype(), {o.shape().begin(), o.shape().end()}, std::move(*c.res.mutable_raw_output_contents(k))});
    try {  // checked before it is passed on to a step or returned: a hop is another server
      check_answer(plan_->needed_desc[i][w], got.back(), p_.where(i, c.address) + " answered output '" + want + "', which");
    } catch (const ServeError& e) {
      return fail(Status::kInternal, e.what(), lock);
    }
  }
  outs_[i] = std::move(got);
  const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - c.sent).count();
  const int64_t avg = p_.ends_[i]->hop_us;
  p_.ends_[i]->hop_us = avg == 0 ? us : (7 * avg + us) / 8;
  std::vector<size_t> ready;
  for (size_t j : plan_->consumers[i])
    if (--waiting_[j] == 0) ready.push_back(j);
  if (--left_ > 0) {
    lock.unlock();
    launch_all(std::move(ready));
    return;
  }
  PipelineRunner::Result r;
  for (size_t k = 0; k < plan_->answer.size(); ++k) {
    const Source& s = plan_->answer[k];
    const TensorIn& t = outs_[static_cast<size_t>(s.step)][s.index];
    r.outputs.push_back({plan_->outputs[k].name, t.datatype, t.shape, {}});
    r.outputs.back().data = take(s);
  }
  finished_ = true;
  auto done = std::move(done_);
  lock.unlock();
  done(std::move(r));
}

void Run::cancel() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!finished_) fail(Status::kTimeout, "pipeline " + p_.spec_.name + ": the call was cancelled", lock);
}

}  // namespace

std::unique_ptr<PipelineRunner> connect_pipeline(const PipelineSpec& spec, const std::string& token, int timeout_ms,
                                                 int max_bytes) {
  return std::make_unique<GrpcPipeline>(spec, token, timeout_ms, max_bytes);
}

}  // namespace loom::serve

// pipeline_plan.cpp — connecting a pipeline (pipeline_impl.hpp): each step's model metadata,
// the plan made of it, readiness with the reason, and the watcher that retries with backoff and
// goes unready when a step disappears.
#include <algorithm>
#include <atomic>
#include <map>

#include "loom/rt/error.hpp"
#include "pipeline/pipeline_impl.hpp"
#include "spec/services.hpp"

namespace loom::serve {
namespace pipeline_impl {

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

}  // namespace pipeline_impl

std::unique_ptr<PipelineRunner> connect_pipeline(const PipelineSpec& spec, const std::string& token, int timeout_ms,
                                                 int max_bytes) {
  return std::make_unique<pipeline_impl::GrpcPipeline>(spec, token, timeout_ms, max_bytes);
}

}  // namespace loom::serve

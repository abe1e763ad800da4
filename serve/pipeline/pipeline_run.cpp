// pipeline_run.cpp — one call of a pipeline (pipeline_impl.hpp): a small state machine that starts
// every step whose producers have answered, passes their raw output bytes on as the next hop's
// raw_input_contents, checks every hop's answer against the step's metadata, and answers once:
// the outputs, or the first failed step by name.
#include <algorithm>

#include "loom/rt/error.hpp"
#include "pipeline/pipeline_impl.hpp"
#include "spec/services.hpp"

namespace loom::serve::pipeline_impl {

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
    std::unique_lock<std::mutex> lock(mu_);
    if (finished_) return;
    const PipelineStep& st = p_.spec_.steps[i];
    // gRPC enforces a deadline by a timer with some slack: a hop past the caller's deadline is
    // never sent, however fast the steps are.
    if (Clock::now() >= deadline_)
      return fail(Status::kTimeout, "pipeline " + p_.spec_.name + ": the deadline passed before step '" + st.name + "'", lock);
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
    } catch (const loom::Error& e) {
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

}  // namespace loom::serve::pipeline_impl

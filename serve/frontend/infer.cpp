// infer.cpp — infer.hpp: models through their batcher, pipelines through their runner.
#include "frontend/infer.hpp"

#include <algorithm>
#include <future>

#include "repository/batcher.hpp"

namespace loom::serve {
namespace {

// The model's batcher, or what refuses it by name: unknown (404), a language model (400: it
// answers generate, not infer).
std::shared_ptr<Batcher> infer_model(Context& ctx, const std::string& model, const std::string& version) {
  std::shared_ptr<Batcher> b = ctx.repo->find(model, version);
  if (b->model().engine())
    throw ServeError(Status::kInput, "model " + b->model().name() + " is a language model: use POST /v2/models/" +
                                              b->model().name() + "/generate");
  return b;
}

std::shared_ptr<PipelineRunner::Cancel> start_pipeline(PipelineRunner& p, InferCall call,
                                                       std::function<void(InferAnswer)> done) {
  const std::vector<size_t> wanted = output_indices(p.outputs(), call.outputs);
  int rows = 0;
  std::vector<TensorIn> in;
  for (const TensorIn* t : check_named(p.inputs(), call.inputs, INT32_MAX, false, &rows))
    in.push_back(std::move(call.inputs[static_cast<size_t>(t - call.inputs.data())]));
  const std::string name = p.name();
  return p.run(std::move(in), call.deadline, [done, wanted, name](PipelineRunner::Result r) {
    InferAnswer a;
    a.status = r.status, a.error = std::move(r.error), a.model = name, a.version = "1";
    if (a.status == Status::kOk)
      for (size_t i = 0; i < wanted.size(); ++i) {
        const bool again = std::find(wanted.begin() + static_cast<long>(i) + 1, wanted.end(), wanted[i]) != wanted.end();
        a.outputs.push_back(again ? r.outputs[wanted[i]] : std::move(r.outputs[wanted[i]]));
      }
    done(std::move(a));
  });
}

void start_model(Context& ctx, const std::shared_ptr<Batcher>& batcher, InferCall call,
                 std::function<void(InferAnswer)> done) {
  const ServedModel& m = batcher->model();
  std::vector<size_t> wanted = output_indices(m.outputs(), call.outputs);
  int rows = 0;
  const auto arrived = Clock::now();
  std::vector<rt::Tensor> x;
  try {
    x = m.decode(call.inputs, batcher->max_rows(), &rows);
  } catch (const loom::Error&) {  // the statistics extension counts it failed, as Triton does
    batcher->stats().refused(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - arrived).count()));
    throw;
  }
  // The model's names are read when the answer is made, not copied per request: the batcher,
  // and so its model, outlives every answer (its destructor drains them). Not a shared_ptr: the
  // batcher's own answer thread must never hold its last reference.
  batcher->submit(std::move(x), rows, call.deadline, [done = std::move(done), wanted = std::move(wanted), served = &m](Batcher::Outcome o) {
    InferAnswer a;
    a.status = o.status, a.error = std::move(o.error), a.model = served->name(), a.version = served->version();
    if (a.status == Status::kOk) {
      a.outputs.reserve(wanted.size());
      for (size_t k : wanted) {
        const rt::Tensor& t = o.outputs.at(k);
        const TensorDesc& d = served->outputs()[k];
        a.outputs.push_back({d.name, d.datatype, t.shape(), std::string(t.data<char>(), t.bytes())});
      }
    }
    done(std::move(a));
  });
}

}  // namespace

void check_target(Context& ctx, const std::string& model, const std::string& version) {
  if (PipelineRunner* p = ctx.pipeline(model)) return require_connected(*p);
  infer_model(ctx, model, version);
}

std::shared_ptr<PipelineRunner::Cancel> start_inference(Context& ctx, InferCall call, std::function<void(InferAnswer)> done) {
  if (PipelineRunner* p = ctx.pipeline(call.model)) {
    require_connected(*p);
    return start_pipeline(*p, std::move(call), std::move(done));
  }
  const std::shared_ptr<Batcher> batcher = infer_model(ctx, call.model, call.version);  // before `call` moves
  start_model(ctx, batcher, std::move(call), std::move(done));
  return nullptr;
}

InferAnswer run_inference(Context& ctx, InferCall call) {
  auto promise = std::make_shared<std::promise<InferAnswer>>();
  auto future = promise->get_future();
  start_inference(ctx, std::move(call), [promise](InferAnswer a) { promise->set_value(std::move(a)); });
  InferAnswer a = future.get();  // every admitted call is answered, timeouts included
  if (a.status != Status::kOk) throw ServeError(a.status, a.error);
  return a;
}

}  // namespace loom::serve

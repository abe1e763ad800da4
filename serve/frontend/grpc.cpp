// grpc.cpp — inference.GRPCInferenceService on gRPC's server: raw_input_contents (and typed
// contents), outputs in raw_output_contents, the bearer token in the "authorization" metadata,
// UNAVAILABLE when a queue is full, DEADLINE_EXCEEDED on timeouts; ModelStreamInfer (Triton's
// streaming extension) answers each request of a stream in order.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <functional>
#include <mutex>

#include "frontend/grpc_stream.hpp"
#include "frontend/infer.hpp"
#include "frontend/servers.hpp"
#include "grpc_service.grpc.pb.h"

namespace loom::serve {

namespace {

grpc::Status to_grpc(Status s, const std::string& msg) {
  return grpc::Status(static_cast<grpc::StatusCode>(grpc_code(s)), msg);
}

// ModelInfer and ModelStreamInfer use the callback API: no thread waits while a request sits in
// the batcher's queue; the batcher's answer finishes the call. The other methods are cheap and
// synchronous.
class Service final
    : public inference::GRPCInferenceService::WithCallbackMethod_ModelInfer<
          inference::GRPCInferenceService::WithRawCallbackMethod_ModelStreamInfer<inference::GRPCInferenceService::Service>> {
 public:
  explicit Service(Context& ctx) : ctx_(ctx) {}

  grpc::Status ServerLive(grpc::ServerContext*, const inference::ServerLiveRequest*,
                          inference::ServerLiveResponse* res) override {
    res->set_live(true);
    return grpc::Status::OK;
  }
  grpc::Status ServerReady(grpc::ServerContext*, const inference::ServerReadyRequest*,
                           inference::ServerReadyResponse* res) override {
    res->set_ready(ctx_.is_ready());
    return grpc::Status::OK;
  }
  grpc::Status ModelReady(grpc::ServerContext* sc, const inference::ModelReadyRequest* req,
                          inference::ModelReadyResponse* res) override {
    return guarded(sc, [&] { res->set_ready(ctx_.model_ready(req->name(), req->version())); });
  }
  grpc::Status ServerMetadata(grpc::ServerContext* sc, const inference::ServerMetadataRequest*,
                              inference::ServerMetadataResponse* res) override {
    return guarded(sc, [&] {
      res->set_name(kServerName);
      res->set_version(kServerVersion);
      for (const auto& e : server_extensions()) res->add_extensions(e);
    });
  }
  grpc::Status ModelConfig(grpc::ServerContext* sc, const inference::ModelConfigRequest* req,
                           inference::ModelConfigResponse* res) override {
    return guarded(sc, [&] { *res->mutable_config() = ctx_.model_config(req->name(), req->version()); });
  }
  grpc::Status ModelStatistics(grpc::ServerContext* sc, const inference::ModelStatisticsRequest* req,
                               inference::ModelStatisticsResponse* res) override {
    return guarded(sc, [&] { *res = ctx_.statistics(req->name(), req->version()); });
  }
  grpc::Status RepositoryIndex(grpc::ServerContext* sc, const inference::RepositoryIndexRequest* req,
                               inference::RepositoryIndexResponse* res) override {
    return guarded(sc, [&] {
      for (const auto& st : ctx_.repository_index()) {
        if (req->ready() && st.state != "READY") continue;
        auto* m = res->add_models();
        m->set_name(st.name);
        m->set_version(st.version);
        m->set_state(st.state);
        m->set_reason(st.reason);
      }
    });
  }
  grpc::Status ModelMetadata(grpc::ServerContext* sc, const inference::ModelMetadataRequest* req,
                             inference::ModelMetadataResponse* res) override {
    return guarded(sc, [&] {
      const serve::ModelMetadata m = ctx_.model_metadata(req->name(), req->version());
      res->set_name(m.name);
      for (const auto& v : m.versions) res->add_versions(v);
      res->set_platform(m.platform);
      for (const auto& d : m.inputs) describe(d, res->add_inputs());
      for (const auto& d : m.outputs) describe(d, res->add_outputs());
    });
  }
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* sc, const inference::ModelInferRequest* req,
                                       inference::ModelInferResponse* res) override {
    const grpc::Status st = check_token(sc);
    if (!st.ok()) {
      ctx_.metrics->request(ctx_.metrics_label(req->model_name()), "grpc", from_grpc_code(st.error_code()));
      grpc::ServerUnaryReactor* refused = sc->DefaultReactor();
      refused->Finish(st);
      return refused;
    }
    if (!ctx_.pipeline(req->model_name())) {
      // A model's call needs no cancel hook (the batcher keeps its deadline): gRPC's default
      // reactor, whose OnDone runs inline. A reactor of our own has gRPC run OnDone on its
      // executor, a thread switch per call: 0.5 of the 0.7 switches per request that loom-serve
      // made against a bare server's 0.13.
      grpc::ServerUnaryReactor* reactor = sc->DefaultReactor();
      start_infer(sc->deadline(), *req, res, [reactor](const grpc::Status& s) { reactor->Finish(s); });
      return reactor;
    }
    auto* reactor = new UnaryReactor;  // a pipeline's: a client that cancels cancels its hops
    auto run = start_infer(sc->deadline(), *req, res, [reactor](const grpc::Status& s) { reactor->Finish(s); });
    {
      std::lock_guard<std::mutex> lock(reactor->mu);
      reactor->run = run;
    }
    reactor->release();
    return reactor;
  }

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ModelStreamInfer(grpc::CallbackServerContext* sc) override {
    return new StreamReactor(*this, sc);
  }

 private:
  // A unary call's reactor, so that a client that cancels cancels a pipeline's hops in flight.
  // Two owners: gRPC (until OnDone) and ModelInfer (until it has stored the run, which may
  // already have answered).
  class UnaryReactor : public grpc::ServerUnaryReactor {
   public:
    void OnCancel() override {
      std::shared_ptr<PipelineRunner::Cancel> r;
      {
        std::lock_guard<std::mutex> lock(mu);
        r = run;
      }
      if (r) r->cancel();
    }
    void OnDone() override { release(); }
    void release() {
      if (--refs == 0) delete this;
    }
    std::mutex mu;
    std::shared_ptr<PipelineRunner::Cancel> run;
    std::atomic<int> refs{2};
  };

  // ModelStreamInfer: each request as ModelInfer would run it, answered in order; a failed
  // request is answered with its error_message and the stream goes on (Triton's semantics).
  // The messages are parsed here, not by gRPC: gRPC reports a message that does not parse as the
  // end of the stream, and the client would see OK and no answer.
  class StreamReactor : public OrderedStream<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    StreamReactor(Service& s, grpc::CallbackServerContext* sc) : OrderedStream(64), s_(s), sc_(sc) {
      const grpc::Status st = s_.check_token(sc);
      if (st.ok()) begin();
      else refuse(st);
    }

   private:
    void dispatch(std::unique_ptr<grpc::ByteBuffer> raw, uint64_t seq) override {
      auto keep = std::make_shared<inference::ModelInferRequest>();
      const grpc::Status parsed = grpc::SerializationTraits<inference::ModelInferRequest>::Deserialize(raw.get(), keep.get());
      auto* res = new inference::ModelStreamInferResponse;
      auto done = [this, seq, res](const grpc::Status& st) {
        std::unique_ptr<inference::ModelStreamInferResponse> r(res);
        if (!st.ok()) {
          r->clear_infer_response();
          r->set_error_message(st.error_message());
        }
        auto out = std::make_unique<grpc::ByteBuffer>();
        bool own = false;
        grpc::SerializationTraits<inference::ModelStreamInferResponse>::Serialize(*r, out.get(), &own);
        answer(seq, std::move(out));
      };
      if (!parsed.ok()) {
        s_.ctx_.metrics->request(s_.ctx_.metrics_label(""), "grpc", Status::kInput);
        const std::string why = parsed.error_message().empty() ? "" : ": " + parsed.error_message();
        return done(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "the stream's message " + std::to_string(seq + 1) + " is not a ModelInferRequest" + why));
      }
      auto run = s_.start_infer(sc_->deadline(), *keep, res->mutable_infer_response(),
                                [done, keep](const grpc::Status& st) { done(st); });
      if (run) {
        std::lock_guard<std::mutex> lock(mu_);
        runs_.push_back(run);
      }
    }
    void cancelled() override {
      std::vector<std::weak_ptr<PipelineRunner::Cancel>> runs;
      {
        std::lock_guard<std::mutex> lock(mu_);
        runs.swap(runs_);
      }
      for (auto& w : runs)
        if (auto r = w.lock()) r->cancel();
    }
    Service& s_;
    grpc::CallbackServerContext* sc_;
    std::mutex mu_;
    std::vector<std::weak_ptr<PipelineRunner::Cancel>> runs_;  // pipelines' runs, to cancel with the stream
  };

  // Runs one inference request, a model's (through its batcher) or a pipeline's, and calls
  // `done` once with its status, the answer in *res; a request refused before it starts is
  // answered at once. Returns a pipeline run's cancel handle (null for a model). The deadline:
  // the caller's, or --request-timeout-ms when that is sooner.
  std::shared_ptr<PipelineRunner::Cancel> start_infer(std::chrono::system_clock::time_point client_deadline,
                                                      const inference::ModelInferRequest& req,
                                                      inference::ModelInferResponse* res,
                                                      std::function<void(const grpc::Status&)> done) {
    // Answered: the name was a model's or a pipeline's, its own label; refused: unknown names
    // share one (looked up only then).
    auto finish = [this, name = req.model_name(), done](const grpc::Status& st) {
      if (st.ok()) ctx_.metrics->request(name, "grpc", Status::kOk);  // the name as it is, not a copy
      else ctx_.metrics->request(ctx_.metrics_label(name), "grpc", from_grpc_code(st.error_code()));
      done(st);
    };
    const auto now = Clock::now();
    const auto left = client_deadline - std::chrono::system_clock::now();
    auto deadline = now + std::chrono::milliseconds(ctx_.options.request_timeout_ms);
    if (left < deadline - now) deadline = now + std::chrono::duration_cast<Clock::duration>(left);
    std::shared_ptr<PipelineRunner::Cancel> run;
    const grpc::Status st = run_guarded([&] {
      InferCall call{req.model_name(), req.model_version(), tensors_of(req), {}, deadline};
      for (const auto& o : req.outputs()) call.outputs.push_back(o.name());
      run = start_inference(ctx_, std::move(call), [res, finish, id = req.id()](InferAnswer a) {
        if (a.status != Status::kOk) return finish(to_grpc(a.status, a.error));
        res->set_model_name(a.model);
        res->set_model_version(a.version);
        res->set_id(id);
        for (TensorIn& t : a.outputs) {
          auto* out = res->add_outputs();
          out->set_name(t.name);
          out->set_datatype(t.datatype);
          for (int64_t d : t.shape) out->add_shape(d);
          res->add_raw_output_contents(std::move(t.data));
        }
        finish(grpc::Status::OK);
      });
    });
    if (!st.ok()) finish(st);  // refused before it started
    return run;
  }

  // The token check: OK, or UNAUTHENTICATED when a token is set and the call lacks it.
  grpc::Status check_token(grpc::ServerContextBase* sc) const {
    if (ctx_.token.empty()) return grpc::Status::OK;
    const auto& md = sc->client_metadata();
    auto it = md.find("authorization");
    const std::string v = it == md.end() ? "" : std::string(it->second.data(), it->second.size());
    return ctx_.authorized(v) ? grpc::Status::OK : to_grpc(Status::kUnauthorized, "missing or wrong bearer token");
  }

  // The token check, then f() with its exceptions as statuses.
  template <class F>
  grpc::Status guarded(grpc::ServerContextBase* sc, F&& f) {
    grpc::Status st = check_token(sc);
    return st.ok() ? run_guarded(std::forward<F>(f)) : st;
  }

  template <class F>
  static grpc::Status run_guarded(F&& f) {
    try {
      f();
      return grpc::Status::OK;
    } catch (const loom::Error& e) {  // any part's error, answered by its kind
      return to_grpc(e.kind(), e.what());
    } catch (const std::exception& e) {
      return to_grpc(Status::kInternal, e.what());
    } catch (...) {
      return to_grpc(Status::kInternal, "unexpected error");
    }
  }

  static void describe(const TensorDesc& d, inference::ModelMetadataResponse::TensorMetadata* t) {
    t->set_name(d.name);
    t->set_datatype(d.datatype);
    for (int64_t v : d.shape) t->add_shape(v);
  }

  // A typed contents field as little-endian bytes of `width` each.
  template <class Field, class Conv>
  static std::string packed(const Field& f, Conv conv) {
    std::string out;
    for (const auto& v : f) conv(v, out);
    return out;
  }

  static std::string contents_bytes(const inference::ModelInferRequest::InferInputTensor& in) {
    const auto& c = in.contents();
    const std::string& dt = in.datatype();
    if (dt == "FP32")
      return std::string(reinterpret_cast<const char*>(c.fp32_contents().data()), static_cast<size_t>(c.fp32_contents_size()) * 4);
    if (dt == "INT64")
      return std::string(reinterpret_cast<const char*>(c.int64_contents().data()), static_cast<size_t>(c.int64_contents_size()) * 8);
    if (dt == "INT32")
      return std::string(reinterpret_cast<const char*>(c.int_contents().data()), static_cast<size_t>(c.int_contents_size()) * 4);
    if (dt == "UINT8")
      return packed(c.uint_contents(), [](uint32_t v, std::string& o) {
        if (v > 255) throw ServeError(Status::kInput, "UINT8 contents must be 0-255");
        o.push_back(static_cast<char>(v));
      });
    if (dt == "INT8")
      return packed(c.int_contents(), [](int32_t v, std::string& o) {
        if (v < -128 || v > 127) throw ServeError(Status::kInput, "INT8 contents must be -128-127");
        o.push_back(static_cast<char>(v));
      });
    if (dt == "BOOL") return packed(c.bool_contents(), [](bool v, std::string& o) { o.push_back(v ? 1 : 0); });
    return "";
  }

  // A request's input tensors: raw contents, or typed ones (bounded by the message size limit).
  // The raw contents are moved out, not copied: gRPC hands the handler a const request, but it
  // is the call's own message, which gRPC does not read again (it frees it after Finish).
  static std::vector<TensorIn> tensors_of(const inference::ModelInferRequest& request) {
    auto& req = const_cast<inference::ModelInferRequest&>(request);
    std::vector<TensorIn> inputs;
    if (req.raw_input_contents_size() > 0 && req.raw_input_contents_size() != req.inputs_size())
      throw ServeError(Status::kInput, "raw_input_contents must hold one entry per input");
    for (int i = 0; i < req.inputs_size(); ++i) {
      const auto& in = req.inputs(i);
      TensorIn t;
      t.name = in.name();
      t.datatype = in.datatype();
      t.shape.assign(in.shape().begin(), in.shape().end());
      if (req.raw_input_contents_size() > 0) t.data = std::move(*req.mutable_raw_input_contents(i));
      else t.data = contents_bytes(in);
      inputs.push_back(std::move(t));
    }
    return inputs;
  }

  Context& ctx_;
};

}  // namespace

struct GrpcServer::Impl {
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

GrpcServer::GrpcServer(Context& ctx, const std::string& bind, int port) : impl_(std::make_unique<Impl>()) {
  impl_->service = std::make_unique<Service>(ctx);
  grpc::ServerBuilder b;
  const std::string addr = (bind.find(':') != std::string::npos ? "[" + bind + "]" : bind) + ":" + std::to_string(port);
  b.AddListeningPort(addr, grpc::InsecureServerCredentials(), &impl_->port);
  b.SetMaxReceiveMessageSize(static_cast<int>(std::min<size_t>(ctx.max_request_bytes, INT32_MAX)));
  b.RegisterService(impl_->service.get());
  impl_->server = b.BuildAndStart();
  if (!impl_->server || impl_->port == 0) throw rt::Error("gRPC: cannot listen on " + addr);
}

GrpcServer::~GrpcServer() { shutdown(); }

int GrpcServer::port() const { return impl_->port; }

void GrpcServer::shutdown() {
  if (!impl_->server) return;
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(30));  // in-flight calls finish
  impl_->server->Wait();
  impl_->server.reset();
}

}  // namespace loom::serve

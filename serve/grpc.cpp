// grpc.cpp — inference.GRPCInferenceService on gRPC's synchronous server: raw_input_contents
// (and typed contents), outputs in raw_output_contents, the bearer token in the
// "authorization" metadata, UNAVAILABLE when a queue is full, DEADLINE_EXCEEDED on timeouts.
#include <grpcpp/grpcpp.h>

#include <cstring>

#include "frontend.hpp"
#include "grpc_service.grpc.pb.h"

namespace loom::serve {

namespace {

grpc::Status to_grpc(Status s, const std::string& msg) {
  return grpc::Status(static_cast<grpc::StatusCode>(grpc_code(s)), msg);
}

class Service final : public inference::GRPCInferenceService::Service {
 public:
  explicit Service(Context& ctx) : ctx_(ctx) {}

  grpc::Status ServerLive(grpc::ServerContext*, const inference::ServerLiveRequest*,
                          inference::ServerLiveResponse* res) override {
    res->set_live(true);
    return grpc::Status::OK;
  }
  grpc::Status ServerReady(grpc::ServerContext*, const inference::ServerReadyRequest*,
                           inference::ServerReadyResponse* res) override {
    res->set_ready(ctx_.ready.load() && !ctx_.stopping.load());
    return grpc::Status::OK;
  }
  grpc::Status ModelReady(grpc::ServerContext* sc, const inference::ModelReadyRequest* req,
                          inference::ModelReadyResponse* res) override {
    return guarded(sc, [&] {
      ctx_.repo->find(req->name(), req->version());
      res->set_ready(ctx_.ready.load() && !ctx_.stopping.load());
    });
  }
  grpc::Status ServerMetadata(grpc::ServerContext* sc, const inference::ServerMetadataRequest*,
                              inference::ServerMetadataResponse* res) override {
    return guarded(sc, [&] {
      res->set_name(kServerName);
      res->set_version(kServerVersion);
      res->add_extensions("binary_tensor_data");
    });
  }
  grpc::Status ModelMetadata(grpc::ServerContext* sc, const inference::ModelMetadataRequest* req,
                             inference::ModelMetadataResponse* res) override {
    return guarded(sc, [&] {
      auto b = ctx_.repo->find(req->name(), req->version());
      const ServedModel& m = b->model();
      res->set_name(m.name());
      for (const auto& v : ctx_.repo->versions(req->name())) res->add_versions(v);
      res->set_platform("loom-hdf5");
      auto* in = res->add_inputs();
      in->set_name("input");
      in->set_datatype("FP32");
      in->add_shape(-1);
      in->add_shape(m.in_features());
      auto* out = res->add_outputs();
      out->set_name("logits");
      out->set_datatype("FP32");
      out->add_shape(-1);
      out->add_shape(m.out_features());
    });
  }
  grpc::Status ModelInfer(grpc::ServerContext* sc, const inference::ModelInferRequest* req,
                          inference::ModelInferResponse* res) override {
    std::string model = req->model_name();
    grpc::Status st = guarded(sc, [&] { infer(sc, *req, res); });
    ctx_.metrics->request(valid_name(model) ? model : "-", "grpc",
                          st.ok() ? Status::kOk
                          : st.error_code() == grpc::INVALID_ARGUMENT ? Status::kBadRequest
                          : st.error_code() == grpc::UNAUTHENTICATED ? Status::kUnauthorized
                          : st.error_code() == grpc::NOT_FOUND ? Status::kNotFound
                          : st.error_code() == grpc::UNAVAILABLE ? Status::kUnavailable
                          : st.error_code() == grpc::DEADLINE_EXCEEDED ? Status::kTimeout
                                                                        : Status::kInternal);
    return st;
  }

 private:
  template <class F>
  grpc::Status guarded(grpc::ServerContext* sc, F&& f) {
    if (!ctx_.token.empty()) {
      const auto& md = sc->client_metadata();
      auto it = md.find("authorization");
      const std::string v = it == md.end() ? "" : std::string(it->second.data(), it->second.size());
      if (!ctx_.authorized(v)) return to_grpc(Status::kUnauthorized, "missing or wrong bearer token");
    }
    try {
      f();
      return grpc::Status::OK;
    } catch (const ServeError& e) {
      return to_grpc(e.status, e.what());
    } catch (const std::exception& e) {
      return to_grpc(Status::kInternal, e.what());
    }
  }

  void infer(grpc::ServerContext* sc, const inference::ModelInferRequest& req, inference::ModelInferResponse* res) {
    auto batcher = ctx_.repo->find(req.model_name(), req.model_version());
    const ServedModel& m = batcher->model();
    std::vector<TensorIn> inputs;
    if (req.raw_input_contents_size() > 0 && req.raw_input_contents_size() != req.inputs_size())
      throw ServeError(Status::kBadRequest, "raw_input_contents must hold one entry per input");
    for (int i = 0; i < req.inputs_size(); ++i) {
      const auto& in = req.inputs(i);
      TensorIn t;
      t.name = in.name();
      t.datatype = in.datatype();
      t.shape.assign(in.shape().begin(), in.shape().end());
      if (req.raw_input_contents_size() > 0) {
        t.data = req.raw_input_contents(i);
      } else if (in.datatype() == "FP32") {
        const auto& c = in.contents().fp32_contents();
        t.data.assign(reinterpret_cast<const char*>(c.data()), static_cast<size_t>(c.size()) * sizeof(float));
      } else if (in.datatype() == "UINT8") {
        for (uint32_t v : in.contents().uint_contents()) {
          if (v > 255) throw ServeError(Status::kBadRequest, "UINT8 contents must be 0-255");
          t.data.push_back(static_cast<char>(v));
        }
      }
      inputs.push_back(std::move(t));
    }
    for (const auto& o : req.outputs())
      if (o.name() != "logits") throw ServeError(Status::kBadRequest, "unknown output '" + o.name() + "': the model's output is 'logits'");
    int rows = 0;
    std::vector<float> x = decode_input(m, inputs, &rows);
    auto deadline = Clock::now() + std::chrono::milliseconds(ctx_.options.request_timeout_ms);
    const auto client = sc->deadline();  // the client's own deadline, when shorter
    const auto left = client - std::chrono::system_clock::now();
    if (left < deadline - Clock::now()) deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(left);
    auto out = batcher->run(std::move(x), rows, deadline);
    if (out.status != Status::kOk) throw ServeError(out.status, out.error);
    res->set_model_name(m.name());
    res->set_model_version(m.version());
    res->set_id(req.id());
    auto* o = res->add_outputs();
    o->set_name("logits");
    o->set_datatype("FP32");
    o->add_shape(rows);
    o->add_shape(m.out_features());
    res->add_raw_output_contents(std::string(reinterpret_cast<const char*>(out.out.data()), out.out.size() * sizeof(float)));
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

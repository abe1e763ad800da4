// grpc_router.cpp — grpc_router.hpp on gRPC's callback generic service and generic stub;
// ModelStreamInfer's requests are routed one by one.
#include "grpc_router.hpp"

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstring>
#include <map>
#include <set>
#include <mutex>
#include <vector>

#include "activator.hpp"
#include "frontend/grpc_stream.hpp"

namespace loom::serve {

namespace {

constexpr const char* kPrefix = "/inference.GRPCInferenceService/";

// Channels to the replicas, by address, made once; when a new address comes, those of replicas
// that have left the pool are dropped (their channels would otherwise pile up with every
// replaced or scaled-down replica).
class Channels {
 public:
  std::shared_ptr<grpc::GenericStub> stub(const std::string& addr, const ReplicaPool& pool) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& s = stubs_[addr];
    if (!s) {
      std::set<std::string> live = {addr};
      for (const auto& r : pool.all()) live.insert(r->host + ":" + std::to_string(r->grpc_port));
      for (auto it = stubs_.begin(); it != stubs_.end();) it = live.count(it->first) ? std::next(it) : stubs_.erase(it);
      grpc::ChannelArguments args;
      args.SetMaxReceiveMessageSize(-1);
      args.SetMaxSendMessageSize(-1);
      s = std::make_shared<grpc::GenericStub>(grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args));
    }
    return s;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::GenericStub>> stubs_;
};

grpc::ByteBuffer bool_message(bool v) {  // {bool field 1 = v}: ServerLive/ServerReadyResponse
  const char bytes[2] = {0x08, 0x01};
  grpc::Slice s(bytes, v ? 2 : 0);
  return grpc::ByteBuffer(&s, 1);
}

// The model_name of a ModelInferRequest as it came (field 1, which protobuf writes first), for
// the router's request counters; "" when the message does not start with it.
std::string model_name_of(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  if (!b.Dump(&slices).ok()) return "";
  std::string head;
  for (const auto& sl : slices) {
    head.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    if (head.size() >= 512) break;
  }
  if (head.size() < 2 || head[0] != 0x0a) return "";
  size_t n = 0, at = 1;
  for (int shift = 0; at < head.size() && shift < 28; shift += 7) {
    const auto c = static_cast<unsigned char>(head[at++]);
    n |= static_cast<size_t>(c & 0x7f) << shift;
    if (!(c & 0x80)) return n <= head.size() - at ? head.substr(at, n) : "";
  }
  return "";
}

// A call's deadline on the router's clock (monotonic seconds); far away when it has none.
double deadline_s(std::chrono::system_clock::time_point d) {
  const auto left = d - std::chrono::system_clock::now();
  if (left > std::chrono::hours(24 * 365)) return monotonic_s() + 1e9;
  return monotonic_s() + std::chrono::duration<double>(left).count();
}

grpc::Status no_replica(int status, const std::string& why) {
  return grpc::Status(status == 429 ? grpc::StatusCode::RESOURCE_EXHAUSTED : grpc::StatusCode::UNAVAILABLE, why);
}


// One routed inference request in the router's /metrics, under its model's label.
void count(Context& ctx, const grpc::ByteBuffer& req, grpc::StatusCode code) {
  ctx.metrics->request(ctx.metrics_label(model_name_of(req)), "grpc", from_grpc_code(code));
}

class Call : public grpc::ServerGenericBidiReactor {
 public:
  Call(Context& ctx, ReplicaPool& pool, Channels& ch, grpc::GenericCallbackServerContext* sc)
      : ctx_(ctx), pool_(pool), ch_(ch), sc_(sc) {
    StartRead(&req_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) return Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request message"));
    const std::string& m = sc_->method();
    if (m.rfind(kPrefix, 0) != 0) return Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "unknown service"));
    const std::string name = m.substr(std::strlen(kPrefix));
    if (name == "ServerLive" || name == "ServerReady") {
      resp_ = bool_message(name == "ServerLive" || ctx_.is_ready());
      return StartWrite(&resp_);
    }
    const auto auth = sc_->client_metadata().find("authorization");
    const std::string token = auth == sc_->client_metadata().end() ? "" : std::string(auth->second.data(), auth->second.size());
    infer_ = name == "ModelInfer";
    if (!ctx_.authorized(token)) return end(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong bearer token"));
    if (!token.empty()) cc_.AddMetadata("authorization", token);
    cc_.set_deadline(sc_->deadline());
    Activator* act = pool_.activator();
    if (act && act->should_hold()) {  // no replica ready: wait for one
      const uint64_t t = act->hold(req_.Length(), deadline_s(sc_->deadline()),
                                   [this](std::shared_ptr<Replica> r, int status, const std::string& why) {
                                     answered_ = true;
                                     if (!r) return end(no_replica(status, why));
                                     lease_ = std::move(r);
                                     call_replica(sc_->method());
                                   });
      ticket_ = t;
      if (t == 0 && !answered_.exchange(true)) end(no_replica(429, act->full_message()));
      return;
    }
    lease_ = pool_.acquire();
    if (!lease_) return end(no_replica(503, kNoReplica));
    call_replica(m);
  }
  void call_replica(const std::string& m) {
    stub_ = ch_.stub(lease_->host + ":" + std::to_string(lease_->grpc_port), pool_);  // held until the call ends
    stub_->UnaryCall(&cc_, m, grpc::StubOptions(), &req_, &resp_, [this](grpc::Status s) {
      pool_.release(*lease_);
      lease_.reset();
      if (!s.ok()) return end(s);
      if (infer_) count(ctx_, req_, grpc::StatusCode::OK);
      StartWrite(&resp_);
    });
  }
  void end(const grpc::Status& s) {
    if (infer_) count(ctx_, req_, s.error_code());
    Finish(s);
  }
  void OnWriteDone(bool ok) override {
    Finish(ok ? grpc::Status::OK : grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
  }
  void OnCancel() override {
    Activator* act = pool_.activator();
    const uint64_t t = ticket_.load();
    if (act && t && act->cancel(t)) return end(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away while held"));
    cc_.TryCancel();
  }
  void OnDone() override { delete this; }

 private:
  Context& ctx_;
  ReplicaPool& pool_;
  Channels& ch_;
  grpc::GenericCallbackServerContext* sc_;
  grpc::ClientContext cc_;
  std::shared_ptr<grpc::GenericStub> stub_;
  grpc::ByteBuffer req_, resp_;
  std::shared_ptr<Replica> lease_;
  bool infer_ = false;  // ModelInfer: counted in /metrics
  std::atomic<uint64_t> ticket_{0};   // while held by the activator
  std::atomic<bool> answered_{false};  // the activator handed it on (or refused it)
};

// The bytes of a ModelStreamInferResponse around `infer_response` (field 2, the replica's
// ModelInferResponse as it came), or with only `error_message` (field 1).
grpc::ByteBuffer stream_answer(grpc::ByteBuffer* infer_response, const std::string& error) {
  auto field = [](unsigned char tag, size_t n) {
    std::string h(1, static_cast<char>(tag));
    for (; n >= 0x80; n >>= 7) h.push_back(static_cast<char>((n & 0x7f) | 0x80));
    h.push_back(static_cast<char>(n));
    return h;
  };
  std::vector<grpc::Slice> slices;
  if (infer_response) {
    std::vector<grpc::Slice> body;
    infer_response->Dump(&body);
    slices.emplace_back(field(0x12, infer_response->Length()));
    slices.insert(slices.end(), body.begin(), body.end());
  } else {
    slices.emplace_back(field(0x0a, error.size()) + error);
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// ModelStreamInfer through the router: each request of the stream is routed on its own, as a
// unary ModelInfer to the least loaded ready replica (so the autoscaler sees it), and the
// answers go back in order; a request no replica can take, or that fails, is answered with its
// error_message and the stream goes on.
class StreamCall : public OrderedStream<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamCall(Context& ctx, ReplicaPool& pool, Channels& ch, grpc::GenericCallbackServerContext* sc)
      : OrderedStream(64), ctx_(ctx), pool_(pool), ch_(ch), sc_(sc) {
    const auto auth = sc->client_metadata().find("authorization");
    token_ = auth == sc->client_metadata().end() ? "" : std::string(auth->second.data(), auth->second.size());
    if (ctx.authorized(token_)) begin();
    else refuse(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong bearer token"));
  }

 private:
  struct Hop {
    grpc::ClientContext cc;
    grpc::ByteBuffer req, resp;
    std::shared_ptr<Replica> lease;
    std::shared_ptr<grpc::GenericStub> stub;
  };

  void dispatch(std::unique_ptr<grpc::ByteBuffer> req, uint64_t seq) override {
    auto hop = std::make_shared<Hop>();
    hop->req = std::move(*req);
    Activator* act = pool_.activator();
    if (act && act->should_hold()) {  // no replica ready: this request waits for one, in turn
      {
        std::lock_guard<std::mutex> lock(mu_);
        held_[seq] = 0;  // its ticket once hold() returns (the grant may come first)
      }
      const uint64_t t = act->hold(hop->req.Length(), deadline_s(sc_->deadline()),
                                   [this, hop, seq](std::shared_ptr<Replica> r, int status, const std::string& why) {
                                     {
                                       std::lock_guard<std::mutex> lock(mu_);
                                       if (!held_.erase(seq)) return;  // the stream was cancelled meanwhile
                                     }
                                     hop->lease = std::move(r);
                                     send(hop, seq, why);
                                   });
      std::lock_guard<std::mutex> lock(mu_);
      const auto it = held_.find(seq);
      if (it == held_.end()) return;  // granted or answered already
      if (t) return void(it->second = t);
      held_.erase(it);  // the hold is full
    }
    if (!hop->lease && act && act->should_hold()) return refuse_one(hop, seq, act->full_message());
    hop->lease = pool_.acquire();
    send(hop, seq, kNoReplica);
  }
  void refuse_one(const std::shared_ptr<Hop>& hop, uint64_t seq, const std::string& why) {
    count(ctx_, hop->req, grpc::StatusCode::UNAVAILABLE);
    answer(seq, std::make_unique<grpc::ByteBuffer>(stream_answer(nullptr, why)));
  }
  void send(std::shared_ptr<Hop> hop, uint64_t seq, const std::string& why) {
    if (!hop->lease) return refuse_one(hop, seq, why);
    if (!token_.empty()) hop->cc.AddMetadata("authorization", token_);
    hop->cc.set_deadline(sc_->deadline());
    hop->stub = ch_.stub(hop->lease->host + ":" + std::to_string(hop->lease->grpc_port), pool_);
    Hop* h = hop.get();
    {
      std::lock_guard<std::mutex> lock(mu_);
      hops_[h] = std::move(hop);
    }
    h->stub->UnaryCall(&h->cc, std::string(kPrefix) + "ModelInfer", grpc::StubOptions(), &h->req, &h->resp,
                       [this, h, seq](grpc::Status s) {
                         pool_.release(*h->lease);
                         count(ctx_, h->req, s.error_code());
                         auto a = std::make_unique<grpc::ByteBuffer>(s.ok() ? stream_answer(&h->resp, "")
                                                                            : stream_answer(nullptr, s.error_message()));
                         {
                           std::lock_guard<std::mutex> lock(mu_);
                           hops_.erase(h);
                         }
                         answer(seq, std::move(a));
                       });
  }
  void cancelled() override {
    std::vector<uint64_t> gone;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [h, hop] : hops_) h->cc.TryCancel();
      Activator* act = pool_.activator();
      for (auto it = held_.begin(); it != held_.end();)
        if (act && it->second && act->cancel(it->second)) gone.push_back(it->first), it = held_.erase(it);
        else ++it;
    }
    for (uint64_t seq : gone) answer(seq, std::make_unique<grpc::ByteBuffer>(stream_answer(nullptr, "the client went away")));
  }

  Context& ctx_;
  ReplicaPool& pool_;
  Channels& ch_;
  grpc::GenericCallbackServerContext* sc_;
  std::string token_;
  std::mutex mu_;
  std::map<Hop*, std::shared_ptr<Hop>> hops_;  // in flight, to cancel with the stream
  std::map<uint64_t, uint64_t> held_;          // request -> its activator ticket, while held
};

class Service : public grpc::CallbackGenericService {
 public:
  Service(Context& ctx, ReplicaPool& pool) : ctx_(ctx), pool_(pool) {}
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* sc) override {
    if (sc->method() == std::string(kPrefix) + "ModelStreamInfer") return new StreamCall(ctx_, pool_, ch_, sc);
    return new Call(ctx_, pool_, ch_, sc);
  }

 private:
  Context& ctx_;
  ReplicaPool& pool_;
  Channels ch_;
};

}  // namespace

struct GrpcRouter::Impl {
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

GrpcRouter::GrpcRouter(Context& ctx, ReplicaPool& pool, const std::string& bind, int port) : impl_(std::make_unique<Impl>()) {
  impl_->service = std::make_unique<Service>(ctx, pool);
  grpc::ServerBuilder b;
  b.AddListeningPort(bind + ":" + std::to_string(port), grpc::InsecureServerCredentials(), &impl_->port);
  b.SetMaxReceiveMessageSize(static_cast<int>(std::min<size_t>(ctx.max_request_bytes, 2147483647)));
  b.SetMaxSendMessageSize(-1);
  b.RegisterCallbackGenericService(impl_->service.get());
  impl_->server = b.BuildAndStart();
  if (!impl_->server || impl_->port == 0)
    throw loom::Error("gRPC: cannot listen on " + bind + ":" + std::to_string(port), Kind::kIO);
}

GrpcRouter::~GrpcRouter() { shutdown(); }

int GrpcRouter::port() const { return impl_->port; }

void GrpcRouter::shutdown() {
  if (impl_->server) {
    impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(30));
    impl_->server->Wait();
    impl_->server.reset();
  }
}

}  // namespace loom::serve

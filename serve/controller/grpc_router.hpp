// grpc_router.hpp — the controller's KServe v2 gRPC port: every unary call of
// inference.GRPCInferenceService goes, as raw bytes (never parsed), to the least loaded ready
// replica, with the caller's deadline and token; ServerLive and ServerReady are answered here;
// each request of a ModelStreamInfer stream is routed on its own, its answer written back in turn.
#pragma once

#include <memory>
#include <string>

#include "router.hpp"

namespace loom::serve {

class GrpcRouter {
 public:
  GrpcRouter(Context& ctx, ReplicaPool& pool, const std::string& bind, int port);
  ~GrpcRouter();
  int port() const;
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::serve

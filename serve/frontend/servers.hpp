// servers.hpp — the two front ends as loom-serve and the controller start them: HTTP/1.1 on
// Boost.Beast (http.cpp, its endpoints in http_routes.cpp and llm_routes.cpp) and gRPC (grpc.cpp).
#pragma once

#include <memory>
#include <string>

#include "frontend/context.hpp"

namespace loom::serve {

// HTTP/1.1 (keep-alive) front end on Boost.Beast: one thread per connection, at most
// max_connections; a watchdog closes connections whose request does not arrive in time.
class HttpServer {
 public:
  HttpServer(Context& ctx, const std::string& bind, int port);
  ~HttpServer();
  int port() const;
  void stop_accepting();  // no new connections; idle keep-alive ones are closed
  void wait_idle();       // until every connection has finished its request and closed
 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// gRPC front end (inference.GRPCInferenceService), when built with gRPC.
class GrpcServer {
 public:
  GrpcServer(Context& ctx, const std::string& bind, int port);
  ~GrpcServer();
  int port() const;
  void shutdown();  // stops accepting, waits for in-flight calls
 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::serve

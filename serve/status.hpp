// status.hpp — what went wrong with a request, as the protocol says it: one kind, mapped to
// the HTTP status and the gRPC code, and the exception that carries it from any depth.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>

namespace loom::serve {

using Clock = std::chrono::steady_clock;

// What went wrong, as the protocol says it: HTTP status and gRPC code come from the kind.
enum class Status { kOk, kBadRequest, kUnauthorized, kNotFound, kTooLarge, kUnavailable, kTimeout, kInternal };
int http_status(Status s);
int grpc_code(Status s);  // grpc::StatusCode values
Status from_grpc_code(int code);  // the kind of a gRPC code (what a replica answered the router)
const char* status_reason(Status s);  // metrics label: "bad_request", "not_found", ...

class ServeError : public std::runtime_error {
 public:
  ServeError(Status s, const std::string& msg) : std::runtime_error(msg), status(s) {}
  Status status;
};

}  // namespace loom::serve

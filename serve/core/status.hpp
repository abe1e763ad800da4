// status.hpp — what went wrong with a request, as the protocol says it: a loom::Kind, whose
// HTTP status and gRPC code come from loom/error.hpp's one table, and the exception that carries
// it from any depth.
#pragma once

#include <chrono>
#include <string>

#include "loom/error.hpp"

namespace loom::serve {

using Clock = std::chrono::steady_clock;

using Status = loom::Kind;
using loom::from_grpc_code;
using loom::grpc_code;
using loom::http_status;
inline const char* status_reason(Status s) { return loom::kind_name(s); }  // metrics label

// A serving failure with its kind (not found, unavailable, timeout, ...). Front ends catch any
// loom::Error and answer by its kind, so a runtime's InvalidInput is a 400 as this is.
class ServeError : public loom::Error {
 public:
  ServeError(Status s, const std::string& msg) : loom::Error(msg, s) {}
};

}  // namespace loom::serve

// status.cpp — the protocol's HTTP status and gRPC code for each kind of failure.
#include "status.hpp"

namespace loom::serve {

int http_status(Status s) {
  switch (s) {
    case Status::kOk: return 200;
    case Status::kBadRequest: return 400;
    case Status::kUnauthorized: return 401;
    case Status::kNotFound: return 404;
    case Status::kTooLarge: return 413;
    case Status::kUnavailable: return 503;
    case Status::kTimeout: return 504;
    case Status::kInternal: return 500;
  }
  return 500;
}

int grpc_code(Status s) {
  switch (s) {  // grpc::StatusCode
    case Status::kOk: return 0;
    case Status::kBadRequest: return 3;     // INVALID_ARGUMENT
    case Status::kUnauthorized: return 16;  // UNAUTHENTICATED
    case Status::kNotFound: return 5;       // NOT_FOUND
    case Status::kTooLarge: return 8;       // RESOURCE_EXHAUSTED
    case Status::kUnavailable: return 14;   // UNAVAILABLE
    case Status::kTimeout: return 4;        // DEADLINE_EXCEEDED
    case Status::kInternal: return 13;      // INTERNAL
  }
  return 13;
}

Status from_grpc_code(int code) {
  for (Status s : {Status::kOk, Status::kBadRequest, Status::kUnauthorized, Status::kNotFound, Status::kTooLarge,
                   Status::kUnavailable, Status::kTimeout})
    if (grpc_code(s) == code) return s;
  return Status::kInternal;
}

const char* status_reason(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kBadRequest: return "bad_request";
    case Status::kUnauthorized: return "unauthorized";
    case Status::kNotFound: return "not_found";
    case Status::kTooLarge: return "too_large";
    case Status::kUnavailable: return "unavailable";
    case Status::kTimeout: return "timeout";
    case Status::kInternal: return "internal";
  }
  return "internal";
}

}  // namespace loom::serve

// error.hpp — Loom's one error type and the one table of what each kind of failure becomes
// (doc/errors.md): a tool's exit status, a server's HTTP status and gRPC code. It lives in the
// lowest library, so topology, the runtime, compress, sweep and serve all throw the same thing;
// each part's own class (topo::Error, rt::Error, rt::InvalidInput, sweep::SpecError,
// serve::ServeError) is a loom::Error with its kind.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace loom {

// What went wrong, by what the caller can do about it. kOk is the outcome of a request that
// went right (serve keeps outcomes in this type too).
enum class Kind {
  kOk,
  kUsage,         // a command line or spec the program cannot act on: exit 2
  kInput,         // bad input from the caller: a request's data, a file or option's value
  kUnauthorized,  // no token, or the wrong one
  kNotFound,      // a model, version or file that is not there
  kTooLarge,      // past a size limit
  kUnavailable,   // not ready, full, stopping, a step that is down: try again later
  kTimeout,       // a deadline passed
  kIO,            // the machine: a file that cannot be read or written, a library call that failed
  kInternal,      // a broken invariant (a bug)
};

int exit_status(Kind k);        // 0, 2 for kUsage, else 1
int http_status(Kind k);        // 200, 400, 401, 404, 413, 503, 504, 500
int grpc_code(Kind k);          // grpc::StatusCode values
Kind from_grpc_code(int code);  // the kind of a gRPC code (what a replica or a step answered)
const char* kind_name(Kind k);  // the metrics label: "ok", "bad_request", "not_found", ...

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg, Kind kind = Kind::kIO) : std::runtime_error(msg), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// A command line or spec the program cannot act on (kind kUsage: exit 2). Every tool's usage
// errors are this.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& msg) : Error(msg, Kind::kUsage) {}
};

// The kind of any exception: a loom::Error's own, kInternal for anything else.
Kind kind_of(const std::exception& e);

// A tool's last words: prints "<tool>: <message>" on stderr and returns the exit status of the
// error's kind.
int report(const char* tool, const std::exception& e);

}  // namespace loom

// error.hpp — the runtime's error policy (doc/errors.md): loom::rt::Error for what a caller can
// handle (bad input, I/O), LOOM_CHECK for broken invariants and failed library calls, with
// file:line and the library's own message.
#pragma once

#include <string>

#include "loom/error.hpp"

namespace loom::rt {

// A loom::Error of the runtime: kind kIO unless said (a file, an option's value, the machine).
class Error : public loom::Error {
 public:
  explicit Error(const std::string& msg, Kind kind = Kind::kIO) : loom::Error(msg, kind) {}
};

// An Error the input itself caused (a request's data or shape, not the program or the machine):
// kind kInput, so a server answers it as the client's (HTTP 400, gRPC INVALID_ARGUMENT), never
// as its own 500.
class InvalidInput : public Error {
 public:
  explicit InvalidInput(const std::string& msg) : Error(msg, Kind::kInput) {}
};

// An Error in a data file that was whole when training started (truncated or rewritten under a
// running job): the trainer first checkpoints the steps it finished, then fails naming the file.
class DataChanged : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void check_failed(const char* file, int line, const char* expr, const std::string& msg);

}  // namespace loom::rt

#define LOOM_CHECK(cond, msg)                                                  \
  do {                                                                         \
    if (!(cond)) ::loom::rt::check_failed(__FILE__, __LINE__, #cond, (msg));   \
  } while (0)

// A library call that must succeed: `ok(rc)` says whether it did; a failure throws (kind kIO)
// with file:line, the call and the library's own words `why(rc)`. Each library's check is this
// with its two functions: LOOM_CHECK_CUDA and LOOM_CHECK_CUBLAS (tensor/cuda_check.cuh),
// LOOM_CHECK_NCCL (comm/comm_nccl.cpp), LOOM_CHECK_MPI (comm/comm_mpi.cpp); HDF5's is
// LOOM_CHECK_H5 (io/h5.hpp), which also names the file being read or written.
#define LOOM_CHECK_CALL(call, ok, why)                                                  \
  do {                                                                                  \
    const auto rc_ = (call);                                                            \
    if (!(ok(rc_))) ::loom::rt::check_failed(__FILE__, __LINE__, #call, why(rc_));      \
  } while (0)

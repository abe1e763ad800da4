// error.hpp — the runtime's error policy (doc/errors.md): loom::rt::Error for what a caller can
// handle (bad input, I/O), LOOM_CHECK for broken invariants and failed library calls, with
// file:line and the library's own message.
#pragma once

#include <stdexcept>
#include <string>

namespace loom::rt {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An Error the input itself caused (a request's data or shape, not the program or the machine):
// a server answers it as the client's (HTTP 400, gRPC INVALID_ARGUMENT), never as its own 500.
class InvalidInput : public Error {
 public:
  using Error::Error;
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

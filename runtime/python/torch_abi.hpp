// torch_abi.hpp — what the C ABI's files share: every entry point runs its body through
// guarded(), which turns an exception into -1 and the message lt_last_error() returns.
#pragma once

#include <string>

#include "loom/rt/error.hpp"

namespace lt {

std::string& last_error();  // this thread's

template <class F>
int guarded(F&& body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    last_error() = e.what();
  } catch (...) {
    last_error() = "unknown error";
  }
  return -1;
}

inline void need(const void* p, const char* what) {
  if (!p) throw loom::rt::Error(std::string(what) + " is null");
}

}  // namespace lt

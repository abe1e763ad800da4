// ranks_harness.hpp — N ranks as threads over the in-process transport, for the collective
// and gradient exchange tests: run_ranks(n, body) runs body(Communicator&) on each and expects
// every rank to end without an exception.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "loom/rt/comm/comm.hpp"

namespace loom::rt {

template <typename F>
void run_ranks(int n, F body) {
  auto transports = make_inproc_group(n);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        Communicator c(std::move(transports[static_cast<size_t>(r)]), 10.0);
        body(c);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

}  // namespace loom::rt

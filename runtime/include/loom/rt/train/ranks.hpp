// ranks.hpp — who this process is in a training job, and the exchange of one number per rank
// that the loop's parts use to agree (shares, precision, resume step, step times).
#pragma once

#include <vector>

#include "loom/rt/comm/comm.hpp"

namespace loom::rt {

struct Ranks {
  Communicator* comm = nullptr;  // null: one process
  int me = 0, size = 1;

  explicit Ranks(Communicator* c) : comm(c), me(c ? c->rank() : 0), size(c ? c->size() : 1) {}
  bool many() const { return size > 1; }
  // Every rank's value, in rank order (collective: every rank calls it at the same point).
  std::vector<double> gather(double mine) const {
    std::vector<float> v(static_cast<size_t>(size), 0.0f);
    v[static_cast<size_t>(me)] = static_cast<float>(mine);
    if (comm) comm->allreduce_sum(v.data(), v.size());
    return std::vector<double>(v.begin(), v.end());
  }
};

}  // namespace loom::rt

// grad_exchange.hpp — how ranks combine their gradients each step: a plain allreduce of the
// share-weighted gradients, or PowerSGD (Vogels et al., 2019): rank-R factors P and Q of each
// weight matrix, with error feedback, warm-started Q, Gram-Schmidt orthogonalisation, a plain
// start for the first S steps, and matrices that would not shrink at least 2x sent as they are.
// A few extra floats (loss, overflow flag) ride along in the same allreduce.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/rt/comm.hpp"
#include "loom/rt/mlp.hpp"

namespace loom::rt {

struct CompressConfig {
  std::string kind = "none";  // none | powersgd
  int rank = 4;
  int64_t start = 0;
};

// "none", "powersgd", "powersgd:rank=4,start=100"; throws Error naming what is wrong.
CompressConfig parse_grad_compress(const std::string& text);

class GradExchange {
 public:
  explicit GradExchange(CompressConfig c) : c_(std::move(c)) {}
  // Gradients (already weighted by share / global batch) and `extras` are summed over ranks.
  void exchange(Communicator& comm, std::vector<Param>& params, std::vector<float>& extras, int64_t step);
  // Floats this rank put into collectives in the last exchange, and what a plain allreduce needs.
  size_t last_floats() const { return last_floats_; }
  static size_t plain_floats(const std::vector<Param>& params, size_t extras);

 private:
  struct Matrix {
    size_t param;
    int rows, cols;
    std::vector<float> q, error;  // warm-started Q [cols, r]; error feedback [rows, cols]
  };
  void plan(const std::vector<Param>& params);
  CompressConfig c_;
  bool planned_ = false;
  std::vector<Matrix> matrices_;
  std::vector<size_t> plain_;  // parameters sent as they are
  std::vector<float> buf_;
  size_t last_floats_ = 0;
};

}  // namespace loom::rt

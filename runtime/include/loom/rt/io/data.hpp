// data.hpp — data sets: Fashion-MNIST from the gzip'd IDX files of Debian's
// dataset-fashion-mnist, and a seeded per-epoch shuffle that does not depend on how a global
// batch is later split.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt {

constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct Dataset {
  Tensor images;                 // [N, rows*cols] float32, pixel / 255
  std::vector<int32_t> labels;   // N labels in [0, classes)
  int rows = 0, cols = 0, classes = 10;
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

// split: "train" or "t10k". Throws Error naming the file and, when missing, the package.
Dataset load_fashion_mnist(const std::string& dir, const std::string& split);

// Reads one IDX file (gzip or plain); used by load_fashion_mnist and tested directly.
struct Idx {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> data;
};
Idx read_idx(const std::string& path, uint8_t expected_ndims);

// The sample order of epoch `epoch`: a permutation of [0, n) from (seed, epoch) alone.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch);

// Copies the samples order[begin, end) into x [B, features] and y [B].
void gather_batch(const Dataset& d, const std::vector<int64_t>& order, int64_t begin, int64_t end, Tensor* x,
                  std::vector<int32_t>* y);

}  // namespace loom::rt

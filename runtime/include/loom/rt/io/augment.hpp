// augment.hpp — augmentation and synthetic samples for image data (loom-train --augment
// shift:N,flip[,noise:S], --synthetic N, --train-subset N). Every random draw comes from
// (seed, epoch, sample) alone, so a sample looks the same however the global batch is split
// across ranks, and a run resumed from a checkpoint sees the same epochs as one never stopped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/rt/io/data.hpp"

namespace loom::rt {

struct AugmentConfig {
  int shift = 0;       // random translation by up to N pixels each way (zero fill)
  bool flip = false;   // horizontal flip with probability 1/2
  float noise = 0.0f;  // Gaussian pixel noise of this standard deviation (clamped to [0, 1])
  bool any() const { return shift > 0 || flip || noise > 0; }
};

// "shift:2,flip,noise:0.05" (or "none"); throws Error naming the bad item.
AugmentConfig parse_augment(const std::string& spec);

// The first n images of a seeded permutation of d (its class balance kept on average).
Dataset subset(const Dataset& d, int64_t n, uint64_t seed);

// Serves batches of a training set grown by `synthetic` samples per epoch (within-class mixup:
// x = l a + (1 - l) b for two images a, b of one class, l uniform), augmented as configured.
class BatchSource {
 public:
  BatchSource(const Dataset& d, AugmentConfig aug, int64_t synthetic, uint64_t seed);
  int64_t size() const { return data_.size() + synthetic_; }  // samples per epoch
  // Like gather_batch over [0, size()): indices past the data set are synthetic samples.
  void gather(const std::vector<int64_t>& order, int64_t begin, int64_t end, int64_t epoch, Tensor* x,
              std::vector<int32_t>* y) const;

 private:
  void synthesise(int64_t index, int64_t epoch, float* out, int32_t* label) const;
  void augment(float* img, uint64_t key) const;

  const Dataset& data_;
  AugmentConfig aug_;
  int64_t synthetic_;
  uint64_t seed_;
  std::vector<std::vector<int64_t>> by_class_;
};

}  // namespace loom::rt

// augment.cpp — image augmentation and within-class mixup samples (augment.hpp).
#include "loom/rt/io/augment.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "loom/rt/error.hpp"

namespace loom::rt {
namespace {

// One generator per (seed, epoch, sample, purpose): splitmix64 of the mixed key.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t key(uint64_t seed, int64_t epoch, int64_t sample, uint64_t purpose) {
  return mix(mix(mix(seed ^ purpose) + static_cast<uint64_t>(epoch)) + static_cast<uint64_t>(sample));
}
double unit(std::mt19937_64& g) { return static_cast<double>(g() >> 11) * 0x1.0p-53; }

int parse_int(const std::string& item, const std::string& v, int lo, int hi) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || n < lo || n > hi)
    throw Error("--augment: '" + item + "': expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  return static_cast<int>(n);
}

}  // namespace

AugmentConfig parse_augment(const std::string& spec) {
  AugmentConfig a;
  if (spec.empty() || spec == "none") return a;
  std::stringstream ss(spec);
  for (std::string item; std::getline(ss, item, ',');) {
    const auto colon = item.find(':');
    const std::string name = item.substr(0, colon), value = colon == std::string::npos ? "" : item.substr(colon + 1);
    if (name == "shift") {
      a.shift = parse_int(item, value, 1, 8);
    } else if (name == "flip" && colon == std::string::npos) {
      a.flip = true;
    } else if (name == "noise") {
      char* end = nullptr;
      a.noise = std::strtof(value.c_str(), &end);
      if (value.empty() || *end || !(a.noise > 0 && a.noise <= 1))
        throw Error("--augment: '" + item + "': noise takes a standard deviation in (0, 1]");
    } else {
      throw Error("--augment: unknown item '" + item + "' (shift:N, flip, noise:S, or none)");
    }
  }
  return a;
}

Dataset subset(const Dataset& d, int64_t n, uint64_t seed) {
  if (n <= 0 || n > d.size())
    throw Error("--train-subset must be between 1 and " + std::to_string(d.size()) + ", not " + std::to_string(n));
  const std::vector<int64_t> order = epoch_order(d.size(), seed ^ 0x5ab5e7ull, -1);
  Dataset s;
  s.rows = d.rows, s.cols = d.cols, s.classes = d.classes;
  std::vector<int32_t> labels;
  gather_batch(d, order, 0, n, &s.images, &labels);
  s.labels = std::move(labels);
  return s;
}

BatchSource::BatchSource(const Dataset& d, AugmentConfig aug, int64_t synthetic, uint64_t seed)
    : data_(d), aug_(aug), synthetic_(synthetic), seed_(seed), by_class_(static_cast<size_t>(d.classes)) {
  if (synthetic < 0) throw Error("--synthetic must not be negative, not " + std::to_string(synthetic));
  for (int64_t i = 0; i < d.size(); ++i) by_class_[static_cast<size_t>(d.labels[static_cast<size_t>(i)])].push_back(i);
  if ((aug.shift > 0 || aug.flip) && d.rows * d.cols != d.images.dim(1))
    throw Error("--augment shift and flip need images (rows x cols)");
}

void BatchSource::synthesise(int64_t index, int64_t epoch, float* out, int32_t* label) const {
  std::mt19937_64 g(key(seed_, epoch, index, 0x53594eull));
  const int64_t f = data_.images.dim(1);
  const int64_t a = static_cast<int64_t>(g() % static_cast<uint64_t>(data_.size()));
  *label = data_.labels[static_cast<size_t>(a)];
  const auto& same = by_class_[static_cast<size_t>(*label)];
  const int64_t b = same[g() % same.size()];
  const float l = static_cast<float>(unit(g));
  const float *xa = data_.images.f32() + a * f, *xb = data_.images.f32() + b * f;
  for (int64_t i = 0; i < f; ++i) out[i] = l * xa[i] + (1 - l) * xb[i];
}

void BatchSource::augment(float* img, uint64_t k) const {
  std::mt19937_64 g(k);
  const int R = data_.rows, C = data_.cols;
  if (aug_.shift > 0 || aug_.flip) {
    const int span = 2 * aug_.shift + 1;
    const int dy = aug_.shift ? static_cast<int>(g() % static_cast<uint64_t>(span)) - aug_.shift : 0;
    const int dx = aug_.shift ? static_cast<int>(g() % static_cast<uint64_t>(span)) - aug_.shift : 0;
    const bool flip = aug_.flip && (g() & 1);
    std::vector<float> src(img, img + R * C);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        const int sr = r - dy, sc0 = c - dx, sc = flip ? C - 1 - sc0 : sc0;
        img[r * C + c] = sr >= 0 && sr < R && sc >= 0 && sc < C ? src[static_cast<size_t>(sr * C + sc)] : 0.0f;
      }
  }
  if (aug_.noise > 0) {
    std::normal_distribution<float> n(0.0f, aug_.noise);
    for (int i = 0; i < R * C; ++i) img[i] = std::clamp(img[i] + n(g), 0.0f, 1.0f);
  }
}

void BatchSource::gather(const std::vector<int64_t>& order, int64_t begin, int64_t end, int64_t epoch, Tensor* x,
                         std::vector<int32_t>* y) const {
  const int64_t b = end - begin, f = data_.images.dim(1), n = data_.size();
  if (!x->defined() || x->dim(0) != b) *x = Tensor::empty({b, f});
  y->resize(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) {
    const int64_t s = order[static_cast<size_t>(begin + i)];
    float* dst = x->f32() + i * f;
    if (s < n) {
      std::memcpy(dst, data_.images.f32() + s * f, static_cast<size_t>(f) * sizeof(float));
      (*y)[static_cast<size_t>(i)] = data_.labels[static_cast<size_t>(s)];
    } else {
      synthesise(s - n, epoch, dst, &(*y)[static_cast<size_t>(i)]);
    }
    if (aug_.any()) augment(dst, key(seed_, epoch, s, 0x415547ull));
  }
}

}  // namespace loom::rt

// data.cpp — IDX reading through zlib (gz read directly), Fashion-MNIST, shuffling, batching.
#include "loom/rt/io/data.hpp"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

namespace loom::rt {

Idx read_idx(const std::string& path, uint8_t expected_ndims) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) throw Error(path + ": " + std::strerror(errno));
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw Error(path + ": cannot open");
  auto read_exact = [&](void* buf, size_t n) {
    size_t got = 0;
    while (got < n) {
      int r = gzread(f, static_cast<char*>(buf) + got, static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30)));
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  };
  Idx idx;
  uint8_t magic[4];
  if (!read_exact(magic, 4)) {
    gzclose(f);
    throw Error(path + ": truncated IDX file (no header)");
  }
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] != expected_ndims) {
    gzclose(f);
    throw Error(path + ": not an IDX file of unsigned bytes with " + std::to_string(expected_ndims) + " dimensions");
  }
  uint64_t total = 1;
  for (int i = 0; i < expected_ndims; ++i) {
    uint8_t b[4];
    if (!read_exact(b, 4)) {
      gzclose(f);
      throw Error(path + ": truncated IDX header");
    }
    uint32_t d = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    idx.dims.push_back(d);
    total *= d;
  }
  if (total > (1ull << 32)) {
    gzclose(f);
    throw Error(path + ": IDX dimensions too large");
  }
  idx.data.resize(total);
  bool ok = read_exact(idx.data.data(), idx.data.size());
  gzclose(f);
  if (!ok) throw Error(path + ": truncated IDX file (expected " + std::to_string(total) + " bytes of data)");
  return idx;
}

Dataset load_fashion_mnist(const std::string& dir, const std::string& split) {
  const std::string img = dir + "/" + split + "-images-idx3-ubyte.gz";
  const std::string lab = dir + "/" + split + "-labels-idx1-ubyte.gz";
  struct stat st;
  if (stat(img.c_str(), &st) != 0 || stat(lab.c_str(), &st) != 0)
    throw Error("Fashion-MNIST not found in " + dir + " (missing " + (stat(img.c_str(), &st) ? img : lab) +
                "); on Debian: apt-get install dataset-fashion-mnist");
  Idx images = read_idx(img, 3), labels = read_idx(lab, 1);
  if (images.dims[0] != labels.dims[0])
    throw Error(img + ": " + std::to_string(images.dims[0]) + " images but " + std::to_string(labels.dims[0]) +
                " labels");
  Dataset d;
  d.rows = static_cast<int>(images.dims[1]);
  d.cols = static_cast<int>(images.dims[2]);
  const int64_t n = images.dims[0], f = int64_t{d.rows} * d.cols;
  d.images = Tensor::empty({n, f});
  float* x = d.images.f32();
  for (int64_t i = 0; i < n * f; ++i) x[i] = static_cast<float>(images.data[static_cast<size_t>(i)]) * (1.0f / 255.0f);
  d.labels.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    d.labels[static_cast<size_t>(i)] = labels.data[static_cast<size_t>(i)];
    if (d.labels[static_cast<size_t>(i)] >= d.classes) throw Error(lab + ": label out of range");
  }
  return d;
}

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch) + 1);
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates with our own draw: identical on every libstdc++
    int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

void gather_batch(const Dataset& d, const std::vector<int64_t>& order, int64_t begin, int64_t end, Tensor* x,
                  std::vector<int32_t>* y) {
  const int64_t b = end - begin, f = d.images.dim(1);
  if (!x->defined() || x->dim(0) != b) *x = Tensor::empty({b, f});
  y->resize(static_cast<size_t>(b));
  const float* src = d.images.f32();
  float* dst = x->f32();
  for (int64_t i = 0; i < b; ++i) {
    int64_t s = order[static_cast<size_t>(begin + i)];
    std::memcpy(dst + i * f, src + s * f, static_cast<size_t>(f) * sizeof(float));
    (*y)[static_cast<size_t>(i)] = d.labels[static_cast<size_t>(s)];
  }
}

}  // namespace loom::rt

// half_linear.cpp — 16-bit weights, float32 products (half_linear.hpp).
#include "loom/rt/tensor/half_linear.hpp"

#include <algorithm>
#include <cstring>

#include "loom/rt/error.hpp"
#include "loom/rt/tensor/ops.hpp"
#include "loom/rt/tensor/tensor.hpp"
#include "loom/rt/tensor/vec.hpp"

namespace loom::rt {

namespace {

constexpr int kBlockRows = 64;  // rows converted at once: 64 x 4096 floats = 1 MiB, held in L2

const float* half_table() {  // every IEEE half's float value
  static const std::vector<float> t = [] {
    std::vector<float> v(65536);
    for (uint32_t h = 0; h < 65536; ++h) v[h] = half_to_float(static_cast<uint16_t>(h));
    return v;
  }();
  return t.data();
}

LOOM_VEC void bf16_to_f32(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t b = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(out + i, &b, 4);
  }
}

}  // namespace

HalfLinear::HalfLinear(std::vector<uint16_t> w, int out, int in, bool bf16) : w_(std::move(w)), out_(out), in_(in), bf16_(bf16) {
  if (out <= 0 || in <= 0 || w_.size() != static_cast<size_t>(out) * static_cast<size_t>(in))
    throw Error("16-bit linear: " + std::to_string(w_.size()) + " weights for " + std::to_string(out) + " x " + std::to_string(in));
  if (!bf16_) half_table();
}

void HalfLinear::rows(int r0, int n, float* out) const {
  const uint16_t* src = w_.data() + static_cast<size_t>(r0) * static_cast<size_t>(in_);
  const size_t count = static_cast<size_t>(n) * static_cast<size_t>(in_);
  if (bf16_) return bf16_to_f32(src, out, count);
  const float* t = half_table();
  for (size_t i = 0; i < count; ++i) out[i] = t[src[i]];
}

void HalfLinear::row(int r, float* out) const { rows(r, 1, out); }

void HalfLinear::run(const float* x, int m, const float* bias, float* y) const {
  if (m <= 0) return;
  const int blocks = (out_ + kBlockRows - 1) / kBlockRows;
  vec::for_range(blocks, 2, [&](int64_t lo, int64_t hi) {
    thread_local std::vector<float> buf;
    buf.resize(static_cast<size_t>(kBlockRows) * static_cast<size_t>(in_));
    for (int64_t b = lo; b < hi; ++b) {
      const int r0 = static_cast<int>(b) * kBlockRows, n = std::min(kBlockRows, out_ - r0);
      rows(r0, n, buf.data());
      ops::gemm(Device::kCpu, false, true, m, n, in_, 1.0f, x, in_, buf.data(), in_, 0.0f, y + r0, out_);
    }
  });
  if (bias)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < out_; ++j) y[static_cast<size_t>(i) * static_cast<size_t>(out_) + static_cast<size_t>(j)] += bias[j];
}

}  // namespace loom::rt

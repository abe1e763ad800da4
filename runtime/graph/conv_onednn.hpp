// conv_onednn.hpp — Conv on oneDNN's convolution primitives, where the build has oneDNN.
#pragma once

#include <cstdint>

#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt::graph {

// A 2-D convolution's shape: input N x C x H x W, M maps of kh x kw in `groups` groups, strides,
// dilations (1: none), pads top, left, bottom, right, and the output oh x ow.
struct ConvShape {
  int64_t n, c, h, w, m, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, oh, ow, groups, relu;
};

// y (N x M x oh x ow, allocated) = conv(x, w) + bias, Relu'd when c.relu, on float32 NCHW.
// False when the build has no oneDNN or oneDNN has no primitive for the shape (the caller runs its own).
bool conv_onednn(const ConvShape& c, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y);

}  // namespace loom::rt::graph

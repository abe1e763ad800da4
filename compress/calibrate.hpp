// calibrate.hpp — post-training quantization's calibration: the float model runs over
// calibration images and an observer turns each Linear's input values into a range, then the
// uint8 affine parameters of that range (int8::affine_from_range):
//   minmax      the smallest and largest value seen
//   percentile  the 0.01th and 99.99th percentiles (outliers clipped)
//   entropy     TensorRT's KL calibration: the clipping threshold on |x| (2048 bins) whose
//               quantized distribution diverges least from the original (Migacz, GTC 2017)
#pragma once

#include <string>
#include <vector>

#include "loom/rt/nn/mlp.hpp"
#include "loom/rt/tensor/int8.hpp"

namespace loom::compress {

// The threshold TensorRT's entropy calibration picks from a histogram of |x| over
// [0, bin_width * hist.size()), for `levels` quantization levels.
double kl_threshold(const std::vector<double>& hist, double bin_width, int levels);

// Each layer's input quantization for `m` over `x` [N, in] (rows in chunks). Throws rt::Error for
// an unknown observer or calibration data of the wrong width.
std::vector<rt::int8::QParams> calibrate(rt::Mlp& m, const rt::Tensor& x, const std::string& observer);

}  // namespace loom::compress

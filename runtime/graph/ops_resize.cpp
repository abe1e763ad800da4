// ops_resize.cpp — Resize (opsets 13-20): nearest, n-linear and cubic interpolation over any axes,
// every coordinate transformation ONNX defines, from scales or sizes. Each axis is a table of
// (source index, weight) pairs per output coordinate, as ONNX's reference computes them, and an
// output element is the sum over the product of its axes' pairs. And GridSample (opset 16): 2-D
// sampling at a grid's points, nearest, bilinear or bicubic, with zeros, border or reflection
// padding, as PyTorch's grid_sample and ONNX Runtime compute it.
#include <cmath>
#include <algorithm>
#include <cstring>

#include "ops.hpp"

namespace loom::rt::graph {
namespace {

struct Taps {
  int n = 1;                   // pairs per output coordinate
  std::vector<int64_t> index;  // [out * n + k], clamped into the input
  std::vector<float> weight;   // [out * n + k]
  std::vector<char> outside;   // [out]: tf_crop_and_resize past the input, the extrapolation value
};

struct Params {
  std::string mode, transform, nearest;
  double cubic_a = -0.75;
  bool exclude_outside = false;
};

std::vector<double> coeffs(const Params& p, double ratio) {
  if (p.mode == "linear") return {1 - ratio, ratio};
  if (p.mode == "cubic") {
    const double a = p.cubic_a, r = ratio, s = 1 - ratio;
    return {((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a, ((a + 2) * r - (a + 3)) * r * r + 1,
            ((a + 2) * s - (a + 3)) * s * s + 1, ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a};
  }
  if (ratio == 1) return {0, 1};  // an exact position (ratio is in (0, 1]: the left neighbour is preferred)
  const std::string& m = p.nearest;
  if (m == "round_prefer_floor") return {ratio <= 0.5 ? 1.0 : 0.0, ratio > 0.5 ? 1.0 : 0.0};
  if (m == "round_prefer_ceil") return {ratio < 0.5 ? 1.0 : 0.0, ratio >= 0.5 ? 1.0 : 0.0};
  if (m == "floor") return {1, 0};
  return {0, 1};  // ceil
}

// Where output coordinate x of an axis falls in the input (out_len: the scaled length, a fraction
// where scales gave it); false when tf_crop_and_resize puts it outside the input.
bool source_of(const Node& n, const Params& p, int64_t x, int64_t in_len, double scale, double lo, double hi, double* at) {
  const double out_len = scale * static_cast<double>(in_len), xi = static_cast<double>(x), len = static_cast<double>(in_len);
  const std::string& t = p.transform;
  if (t == "half_pixel") *at = (xi + 0.5) / scale - 0.5;
  else if (t == "pytorch_half_pixel") *at = out_len == 1 ? -0.5 : (xi + 0.5) / scale - 0.5;
  else if (t == "align_corners") *at = out_len == 1 ? 0 : xi * (len - 1) / (out_len - 1);
  else if (t == "asymmetric") *at = xi / scale;
  else if (t == "tf_crop_and_resize") {
    *at = (out_len == 1 ? (hi - lo) * (len - 1) / 2 : xi * (hi - lo) * (len - 1) / (out_len - 1)) + lo * (len - 1);
    return *at >= 0 && *at <= len - 1;
  } else op_error(n, "coordinate_transformation_mode '" + t + "' is not supported");
  return true;
}

Taps taps_of(const Node& n, const Params& p, int64_t in_len, int64_t out_len, double scale, double lo, double hi) {
  Taps t;
  t.n = p.mode == "cubic" ? 4 : 2;
  t.index.resize(static_cast<size_t>(out_len * t.n));
  t.weight.resize(t.index.size());
  t.outside.assign(static_cast<size_t>(out_len), 0);
  for (int64_t x = 0; x < out_len; ++x) {
    double at = 0;
    if (!source_of(n, p, x, in_len, scale, lo, hi, &at)) {
      t.outside[static_cast<size_t>(x)] = 1;
      continue;
    }
    const double fl = std::floor(at), ratio = at == fl ? 1.0 : at - fl;
    const int64_t base = static_cast<int64_t>(ratio == 1.0 ? fl - 1 : fl) - t.n / 2 + 1;
    std::vector<double> w = coeffs(p, ratio);
    double sum = 0;
    for (int k = 0; k < t.n; ++k) {
      const int64_t i = base + k;
      if (p.exclude_outside && (i < 0 || i >= in_len)) w[static_cast<size_t>(k)] = 0;
      sum += w[static_cast<size_t>(k)];
    }
    for (int k = 0; k < t.n; ++k) {
      const size_t j = static_cast<size_t>(x * t.n + k);
      t.index[j] = std::min(std::max<int64_t>(base + k, 0), in_len - 1);
      t.weight[j] = static_cast<float>(p.exclude_outside && sum != 0 ? w[static_cast<size_t>(k)] / sum : w[static_cast<size_t>(k)]);
    }
  }
  return t;
}

// The output's shape and each axis' scale, from scales or sizes over `axes` (opset 18's attribute).
void out_shape(const Node& n, const std::vector<const Tensor*>& in, const Shape& xs, Shape* ys, std::vector<double>* scale) {
  const int r = static_cast<int>(xs.size());
  std::vector<int64_t> axes = attr_ints(n, "axes");
  if (axes.empty())
    for (int d = 0; d < r; ++d) axes.push_back(d);
  const Tensor* scales = in.size() > 2 && in[2] && in[2]->numel() ? in[2] : nullptr;
  const Tensor* sizes = in.size() > 3 && in[3] && in[3]->numel() ? in[3] : nullptr;
  if (!scales == !sizes) op_error(n, "exactly one of scales and sizes must be given");
  if (attr_s(n, "keep_aspect_ratio_policy", "stretch") != "stretch")
    op_error(n, "keep_aspect_ratio_policy '" + attr_s(n, "keep_aspect_ratio_policy", "") + "' is not supported");
  if (attr_i(n, "antialias", 0)) op_error(n, "antialias is not supported");
  const int64_t given = (scales ? scales : sizes)->numel();
  if (given != static_cast<int64_t>(axes.size())) op_error(n, "scales or sizes must have one value per axis resized");
  if (scales && scales->dtype() != DType::kF32) op_error(n, "scales must be float32");
  const std::vector<int64_t> sz = sizes ? ints_of(n, *sizes) : std::vector<int64_t>{};
  *ys = xs;
  scale->assign(static_cast<size_t>(r), 1.0);
  for (size_t i = 0; i < axes.size(); ++i) {
    const auto a = static_cast<size_t>(norm_axis(n, axes[i], r));
    const double in_len = static_cast<double>(xs[a]);
    if (scales) {
      const double s = scales->f32()[i];
      if (!(s > 0) || !std::isfinite(s)) op_error(n, "a scale must be positive and finite");
      (*scale)[a] = s, (*ys)[a] = static_cast<int64_t>(s * in_len);
    } else {
      if (sz[i] < 0) op_error(n, "a negative size");
      (*ys)[a] = sz[i], (*scale)[a] = in_len > 0 ? static_cast<double>(sz[i]) / in_len : 1.0;
    }
  }
}

struct Plan {
  std::vector<Taps> axes;
  std::vector<int64_t> in_strides;
  float extrapolation = 0;
};

// The output element at `pos`: the sum over each axis' taps, axis by axis from `axis` on, of the
// input at `offset` plus the taps' positions.
float gather(const Plan& pl, const float* x, const std::vector<int64_t>& pos, size_t axis, int64_t offset) {
  const Taps& t = pl.axes[axis];
  const int64_t o = pos[axis];
  if (t.outside[static_cast<size_t>(o)]) return pl.extrapolation;
  float acc = 0;
  for (int k = 0; k < t.n; ++k) {
    const size_t j = static_cast<size_t>(o * t.n + k);
    if (t.weight[j] == 0) continue;
    const int64_t off = offset + t.index[j] * pl.in_strides[axis];
    acc += t.weight[j] * (axis + 1 == pl.axes.size() ? x[off] : gather(pl, x, pos, axis + 1, off));
  }
  return acc;
}

// GridSample's sampler over one H x W image.
struct Sampler {
  const float* img;
  int64_t h, w;
  std::string pad;
  float lo_x, hi_x, lo_y, hi_y;  // the image's extent in pixel coordinates (align_corners decides)

  static float reflect(float v, float lo, float hi) {
    const float range = hi - lo;
    if (range <= 0) return lo;
    if (v < lo || v > hi) {
      const float d = v < lo ? lo - v : v - hi;
      const auto k = static_cast<int64_t>(d / range);
      const float r = d - static_cast<float>(k) * range;
      return (v < lo) == (k % 2 == 0) ? lo + r : hi - r;
    }
    return v;
  }
  float at(int64_t r, int64_t c) const {
    if (pad == "zeros") return r >= 0 && r < h && c >= 0 && c < w ? img[r * w + c] : 0.0f;
    if (pad == "border") return img[std::min(std::max<int64_t>(r, 0), h - 1) * w + std::min(std::max<int64_t>(c, 0), w - 1)];
    r = static_cast<int64_t>(reflect(static_cast<float>(r), lo_y, hi_y));
    c = static_cast<int64_t>(reflect(static_cast<float>(c), lo_x, hi_x));
    return img[std::min(std::max<int64_t>(r, 0), h - 1) * w + std::min(std::max<int64_t>(c, 0), w - 1)];
  }
  static void cubic(float t, float* k) {
    const float a = -0.75f;
    t = std::fabs(t);
    k[0] = ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a;
    k[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
    k[2] = ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1;
    k[3] = ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a;
  }
  float sample(const std::string& mode, float x, float y) const {
    if (mode == "nearest") x = std::nearbyint(x), y = std::nearbyint(y);
    if (x < lo_x || x > hi_x || y < lo_y || y > hi_y) {
      if (pad == "border") x = std::min(std::max(x, 0.0f), static_cast<float>(w - 1)), y = std::min(std::max(y, 0.0f), static_cast<float>(h - 1));
      if (pad == "reflection") x = reflect(x, lo_x, hi_x), y = reflect(y, lo_y, hi_y);
    }
    if (mode == "nearest") return at(static_cast<int64_t>(y), static_cast<int64_t>(x));
    const float fx = std::floor(x), fy = std::floor(y);
    const auto x1 = static_cast<int64_t>(fx), y1 = static_cast<int64_t>(fy);
    if (mode == "bilinear") {
      const float dx = x - fx, dy = y - fy;
      return (1 - dy) * ((1 - dx) * at(y1, x1) + dx * at(y1, x1 + 1)) + dy * ((1 - dx) * at(y1 + 1, x1) + dx * at(y1 + 1, x1 + 1));
    }
    float kx[4], ky[4], acc = 0;
    cubic(x - fx, kx), cubic(y - fy, ky);
    for (int i = 0; i < 4; ++i) {
      float row = 0;
      for (int j = 0; j < 4; ++j) row += kx[j] * at(y1 - 1 + i, x1 - 1 + j);
      acc += ky[i] * row;
    }
    return acc;
  }
};

}  // namespace

void op_grid_sample(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor &x = need(n, in, 0), &grid = need(n, in, 1);
  if (x.dtype() != DType::kF32 || grid.dtype() != DType::kF32 || x.ndim() != 4 || grid.ndim() != 4 || grid.dim(3) != 2 ||
      grid.dim(0) != x.dim(0))
    op_error(n, "it takes float32 X [N, C, H, W] and grid [N, H_out, W_out, 2]");
  std::string mode = attr_s(n, "mode", "bilinear");
  if (mode == "linear" || mode == "cubic") mode = "bi" + mode;  // opset 20's names
  const std::string pad = attr_s(n, "padding_mode", "zeros");
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic") op_error(n, "mode '" + mode + "' is not supported");
  if (pad != "zeros" && pad != "border" && pad != "reflection") op_error(n, "padding_mode '" + pad + "' is not supported");
  const bool align = attr_i(n, "align_corners", 0) != 0;
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), HO = grid.dim(1), WO = grid.dim(2);
  Tensor y = Tensor::empty({N, C, HO, WO});
  out[0] = y;
  if (y.numel() == 0) return;
  if (x.numel() == 0) op_error(n, "an empty image has nothing to sample");
  auto pixel = [align](float g, int64_t len) { return align ? (g + 1) / 2 * static_cast<float>(len - 1) : ((g + 1) * static_cast<float>(len) - 1) / 2; };
  for (int64_t b = 0; b < N; ++b)
    for (int64_t c = 0; c < C; ++c) {
      const float lo = align ? 0.0f : -0.5f;
      const Sampler s{x.f32() + (b * C + c) * H * W, H, W, pad, lo, align ? W - 1.0f : W - 0.5f, lo, align ? H - 1.0f : H - 0.5f};
      for (int64_t p = 0; p < HO * WO; ++p) {
        const float* g = grid.f32() + (b * HO * WO + p) * 2;
        y.f32()[(b * C + c) * HO * WO + p] = s.sample(mode, pixel(g[0], W), pixel(g[1], H));
      }
    }
}

void op_resize(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  Params p;
  p.mode = attr_s(n, "mode", "nearest");
  p.transform = attr_s(n, "coordinate_transformation_mode", "half_pixel");
  p.nearest = attr_s(n, "nearest_mode", "round_prefer_floor");
  p.cubic_a = attr_f(n, "cubic_coeff_a", -0.75f);
  p.exclude_outside = attr_i(n, "exclude_outside", 0) != 0;
  if (p.mode != "nearest" && p.mode != "linear" && p.mode != "cubic") op_error(n, "mode '" + p.mode + "' is not supported");
  if (p.nearest != "round_prefer_floor" && p.nearest != "round_prefer_ceil" && p.nearest != "floor" && p.nearest != "ceil")
    op_error(n, "nearest_mode '" + p.nearest + "' is not supported");
  if (x.dtype() != DType::kF32) op_error(n, std::string("Resize of ") + dtype_name(x.dtype()) + " is not supported (it runs on float32)");
  Shape ys;
  std::vector<double> scale;
  out_shape(n, in, x.shape(), &ys, &scale);
  const int r = x.ndim();
  std::vector<float> roi;
  if (p.transform == "tf_crop_and_resize") {
    if (in.size() < 2 || !in[1] || in[1]->numel() != 2 * r || in[1]->dtype() != DType::kF32)
      op_error(n, "tf_crop_and_resize needs a float32 roi of 2 x rank values");
    roi.assign(in[1]->f32(), in[1]->f32() + 2 * r);
  }
  Tensor y = Tensor::empty(ys);  // first: the size is checked against the run's budget before the tables
  out[0] = y;
  if (y.numel() == 0) return;
  if (x.numel() == 0) op_error(n, "an empty input has nothing to resize from");
  Plan pl;
  pl.extrapolation = attr_f(n, "extrapolation_value", 0);
  pl.in_strides = strides_of(x.shape());
  for (int d = 0; d < r; ++d) {
    const auto u = static_cast<size_t>(d);
    pl.axes.push_back(taps_of(n, p, x.dim(d), ys[u], scale[u], roi.empty() ? 0 : roi[u], roi.empty() ? 1 : roi[u + static_cast<size_t>(r)]));
  }
  float* py = y.f32();
  std::vector<int64_t> pos(static_cast<size_t>(r), 0);
  for (int64_t i = 0; i < y.numel(); ++i) {
    py[i] = r == 0 ? x.f32()[0] : gather(pl, x.f32(), pos, 0, 0);
    for (int d = r; d-- > 0;) {
      if (++pos[static_cast<size_t>(d)] < ys[static_cast<size_t>(d)]) break;
      pos[static_cast<size_t>(d)] = 0;
    }
  }
}

}  // namespace loom::rt::graph

// ops_conv.cpp — 1-D and 2-D convolution (groups, strides, pads, dilations) on oneDNN (conv_onednn.cpp),
// or as im2col + the runtime's GEMM in a build without it, inference BatchNormalization, Max/AveragePool and GlobalAveragePool, on NCHW float32.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "conv_onednn.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/vec.hpp"
#include "ops.hpp"
#include "quant.hpp"

namespace loom::rt::graph {
namespace {

struct Window {
  int64_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  int64_t out_h, out_w;
};

// The kernel window of a Conv or pool node over an H x W input (auto_pad NOTSET, VALID or
// SAME_UPPER / SAME_LOWER; ceil_mode for pools).
Window window_of(const Node& n, int64_t h, int64_t w, int64_t kh, int64_t kw) {
  Window o{};
  const auto st = attr_ints(n, "strides", {1, 1}), dl = attr_ints(n, "dilations", {1, 1});
  auto pads = attr_ints(n, "pads", {0, 0, 0, 0});
  if (st.size() != 2 || dl.size() != 2 || pads.size() != 4) op_error(n, "only 2-D windows are supported");
  o.kh = kh, o.kw = kw, o.sh = st[0], o.sw = st[1], o.dh = dl[0], o.dw = dl[1];
  if (o.sh < 1 || o.sw < 1 || o.dh < 1 || o.dw < 1) op_error(n, "strides and dilations must be positive");
  const std::string ap = attr_s(n, "auto_pad", "NOTSET");
  const int64_t ekh = (kh - 1) * o.dh + 1, ekw = (kw - 1) * o.dw + 1;
  if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    const int64_t oh = (h + o.sh - 1) / o.sh, ow = (w + o.sw - 1) / o.sw;
    const int64_t ph = std::max<int64_t>(0, (oh - 1) * o.sh + ekh - h), pw = std::max<int64_t>(0, (ow - 1) * o.sw + ekw - w);
    const bool up = ap == "SAME_UPPER";
    pads = {up ? ph / 2 : ph - ph / 2, up ? pw / 2 : pw - pw / 2, up ? ph - ph / 2 : ph / 2, up ? pw - pw / 2 : pw / 2};
  } else if (ap == "VALID") {
    pads = {0, 0, 0, 0};
  } else if (ap != "NOTSET") {
    op_error(n, "auto_pad " + ap + " is not supported");
  }
  o.pt = pads[0], o.pl = pads[1], o.pb = pads[2], o.pr = pads[3];
  const bool ceil = attr_i(n, "ceil_mode", 0) != 0;
  auto out_dim = [&](int64_t in, int64_t pbeg, int64_t pend, int64_t ek, int64_t s) {
    const int64_t span = in + pbeg + pend - ek;
    if (span < 0) op_error(n, "the window is larger than the padded input");
    int64_t d = (ceil ? (span + s - 1) / s : span / s) + 1;
    if (ceil && (d - 1) * s >= in + pbeg) --d;  // the last window must start inside the input or its left pad
    return d;
  };
  o.out_h = out_dim(h, o.pt, o.pb, ekh, o.sh);
  o.out_w = out_dim(w, o.pl, o.pr, ekw, o.sw);
  return o;
}

// col[(c * kh + i) * kw + j][oy * ow + ox] = x[c][oy*sh - pt + i*dh][ox*sw - pl + j*dw] (0 outside).
// The outputs o in [0, n) whose input position o * stride + offset lies in [0, size).
struct Span {
  int64_t lo, hi;
};
Span inside(int64_t n, int64_t stride, int64_t offset, int64_t size) {
  int64_t lo = 0, hi = n;
  while (lo < hi && lo * stride + offset < 0) ++lo;
  while (hi > lo && (hi - 1) * stride + offset >= size) --hi;
  return {lo, hi};
}

// r[o] = src[o * stride] for o in `in`, `pad` elsewhere in [0, n): a row of im2col's columns or of
// a pool's frame. Plain loops, not memcpy and memset: rows of 16 values spent their time in the calls.
template <class T>
__attribute__((always_inline)) inline void strided_row(T* r, int64_t n, const T* src, int64_t stride, Span in, T pad) {
  for (int64_t o = 0; o < in.lo; ++o) r[o] = pad;
  if (stride == 1)
    for (int64_t o = in.lo; o < in.hi; ++o) r[o] = src[o];
  else
    for (int64_t o = in.lo; o < in.hi; ++o) r[o] = src[o * stride];
  for (int64_t o = std::max(in.lo, in.hi); o < n; ++o) r[o] = pad;
}

// `ld`: the floats from one row of `col` to the next (ohw for one image; N * ohw when the
// images of a batch lie side by side, one GEMM for all).
// `pad`: the value outside the image (0; a quantized input's zero point).
template <class T>
void im2col(const T* x, int64_t c, int64_t h, int64_t w, const Window& k, T* col, int64_t ld, T pad = T(0)) {
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t i = 0; i < k.kh; ++i)
      for (int64_t j = 0; j < k.kw; ++j) {
        T* row = col + ((ch * k.kh + i) * k.kw + j) * ld;
        // The outputs whose input column lies inside the image: [lo, hi); zeros either side.
        const Span cols = inside(k.out_w, k.sw, j * k.dw - k.pl, w);
        for (int64_t oy = 0; oy < k.out_h; ++oy) {
          const int64_t iy = oy * k.sh - k.pt + i * k.dh;
          const bool in_image = iy >= 0 && iy < h;
          strided_row(row + oy * k.out_w, k.out_w, x + (ch * h + (in_image ? iy : 0)) * w + j * k.dw - k.pl, k.sw, in_image ? cols : Span{0, 0}, pad);
        }
      }
}

// A scratch buffer left uninitialised: every value is written before it is read (a zeroed
// vector's memset was a seventh of a ResNet's batch).
std::unique_ptr<float[]> scratch(int64_t n) { return std::unique_ptr<float[]>(new float[static_cast<size_t>(std::max<int64_t>(n, 1))]); }

void need_nchw(const Node& n, const Tensor& x) {
  if (x.ndim() != 4 || x.dtype() != DType::kF32) {
    const std::string what = x.ndim() != 4 ? "rank " + std::to_string(x.ndim()) : std::string(dtype_name(x.dtype()));
    op_error(n, "a " + what + " tensor is not supported (it runs on float32 NCHW), got " + x.shape_str());
  }
}

// A 1-D window operator (Conv, MaxPool, AveragePool over [N, C, L]) as the 2-D one over
// [N, C, 1, L]: its window attributes lifted to two dimensions, its tensors viewed so. False for
// any other rank (the 2-D kernel then runs, or refuses it by name).
bool run_as_2d(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out, OpFn fn) {
  const Tensor& x = need(n, in, 0);
  if (x.ndim() != 3) return false;
  Node m = n;
  for (const char* k : {"strides", "dilations", "kernel_shape"})
    if (has_attr(n, k)) {
      const auto v = attr_ints(n, k);
      if (v.size() != 1) op_error(n, std::string(k) + " must have one value for a 1-D input");
      m.attrs[k] = Attr::of(std::vector<int64_t>{1, v[0]});
    }
  if (has_attr(n, "pads")) {
    const auto p = attr_ints(n, "pads");
    if (p.size() != 2) op_error(n, "pads must have two values for a 1-D input");
    m.attrs["pads"] = Attr::of(std::vector<int64_t>{0, p[0], 0, p[1]});
  }
  std::vector<Tensor> views;
  for (size_t i = 0; i < in.size() && i < 2; ++i)
    if (in[i]) {
      if (in[i]->ndim() != 3) op_error(n, "input " + std::to_string(i) + " must have rank 3 beside a 1-D input");
      views.push_back(in[i]->reshape({in[i]->dim(0), in[i]->dim(1), 1, in[i]->dim(2)}));
    }
  std::vector<const Tensor*> lifted(in);
  for (size_t i = 0; i < views.size(); ++i) lifted[i] = &views[i];
  fn(m, lifted, out);
  for (Tensor& t : out)
    if (t.defined() && t.ndim() == 4) t = t.reshape({t.dim(0), t.dim(1), t.dim(3)});
  return true;
}

}  // namespace

namespace {

// The columns of a whole batch in one GEMM are at most this many floats (64 MiB).
constexpr int64_t kBatchedColumns = int64_t{16} << 20;

// One GEMM for every image of the batch (groups 1): the images' columns side by side, then each
// image's maps moved into NCHW with the bias and the fused Relu. Small images made one small GEMM
// each: a ResNet's batch of 32 on 16 x 16 images ran three times slower than ONNX Runtime.
void conv_batched(const Tensor& x, const Tensor& wt, const Tensor* bias, const Window& k, bool relu, Tensor& y) {
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), M = wt.dim(0);
  const int64_t ohw = k.out_h * k.out_w, kk = C * k.kh * k.kw, cols = N * ohw;
  const auto col = scratch(kk * cols), prod = scratch(M * cols);
  vec::for_items(N, kk * ohw, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) im2col(x.f32() + b * C * H * W, C, H, W, k, col.get() + b * ohw, cols);
  });
  cpu::gemm(false, false, static_cast<int>(M), static_cast<int>(cols), static_cast<int>(kk), 1.0f, wt.f32(), static_cast<int>(kk),
            col.get(), static_cast<int>(cols), 0.0f, prod.get(), static_cast<int>(cols));
  vec::for_items(N, M * ohw, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b)
      for (int64_t m = 0; m < M; ++m) {
        const float* src = prod.get() + m * cols + b * ohw;
        float* dst = y.f32() + (b * M + m) * ohw;
        const float bv = bias ? bias->f32()[m] : 0.0f;
        for (int64_t p = 0; p < ohw; ++p) {
          const float v = src[p] + bv;
          dst[p] = relu && v < 0 ? 0.0f : v;
        }
      }
  });
}

}  // namespace

void op_conv(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  if (run_as_2d(n, in, out, op_conv)) return;
  const Tensor &x = need(n, in, 0), &wt = need(n, in, 1);
  const Tensor* bias = in.size() > 2 ? in[2] : nullptr;
  need_nchw(n, x);
  if (wt.ndim() != 4) op_error(n, "only 2-D convolution is supported (weight " + wt.shape_str() + ")");
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t M = wt.dim(0), g = attr_i(n, "group", 1);
  if (g < 1 || C % g || M % g || wt.dim(1) != C / g)
    op_error(n, "weight " + wt.shape_str() + " does not fit input " + x.shape_str() + " in " + std::to_string(g) + " groups");
  if (bias && bias->numel() != M) op_error(n, "bias has " + std::to_string(bias->numel()) + " values for " + std::to_string(M) + " maps");
  const Window k = window_of(n, H, W, wt.dim(2), wt.dim(3));
  const int64_t cg = C / g, mg = M / g, ohw = k.out_h * k.out_w, kk = cg * k.kh * k.kw;
  Tensor y = Tensor::empty({N, M, k.out_h, k.out_w});
  const bool relu = attr_i(n, "loom.relu", 0) != 0;
  const ConvShape shape{N, C, H, W, M, k.kh, k.kw, k.sh, k.sw, k.dh, k.dw, k.pt, k.pl, k.pb, k.pr, k.out_h, k.out_w, g, relu};
  if (bias && bias->dtype() != DType::kF32) op_error(n, "the bias must be float32");
  // oneDNN's primitives are cached by the weights' address: weights made for one call go around it.
  if (wt.dtype() == DType::kF32 && y.numel() > 0 && attr_i(n, "loom.transient_weights", 0) == 0 && conv_onednn(shape, x, wt, bias, y)) {
    out[0] = y;
    return;
  }
  const bool direct = k.kh == 1 && k.kw == 1 && k.sh == 1 && k.sw == 1 && k.pt == 0 && k.pl == 0 && k.pb == 0 && k.pr == 0;
  if (g == 1 && N > 1 && kk * N * ohw <= kBatchedColumns) {
    conv_batched(x, wt, bias, k, relu, y);
    out[0] = y;
    return;
  }
  // Image by image and group by group, spread over the threads (each GEMM then runs on one).
  vec::for_items(N * g, mg * ohw + (direct ? 0 : kk * ohw), [&](int64_t lo, int64_t hi) {
    const auto col = scratch(direct ? 0 : kk * ohw);
    for (int64_t item = lo; item < hi; ++item) {
      const int64_t b = item / g, gi = item % g;
      const float* xg = x.f32() + (b * C + gi * cg) * H * W;
      const float* src = xg;
      if (!direct) {
        im2col(xg, cg, H, W, k, col.get(), ohw);
        src = col.get();
      }
      float* yg = y.f32() + (b * M + gi * mg) * ohw;
      cpu::gemm(false, false, static_cast<int>(mg), static_cast<int>(ohw), static_cast<int>(kk), 1.0f,
                wt.f32() + gi * mg * kk, static_cast<int>(kk), src, static_cast<int>(ohw), 0.0f, yg, static_cast<int>(ohw));
      if (bias)
        for (int64_t m = 0; m < mg; ++m) {
          const float bv = bias->f32()[gi * mg + m];
          for (int64_t p = 0; p < ohw; ++p) yg[m * ohw + p] += bv;
        }
      if (relu)
        for (int64_t p = 0; p < mg * ohw; ++p) yg[p] = yg[p] > 0 ? yg[p] : 0.0f;
    }
  });
  out[0] = y;
}

// The int32 sums of ConvInteger / QLinearConv (x - x_zero)(w - w_zero) on oneDNN's int8 GEMM:
// per image and group, w [M/g, C/g kh kw] (int8) times x's columns (a uint8 x moved into int8 by
// taking 128 away, and from x_zero: the difference stands); pads hold x_zero, so they add nothing.
// False where the int8 GEMM is not exact here or the operands are not of its kinds.
bool conv_integer_int8(const Node& n, const Tensor& x, int x_zero, const Tensor& w, int w_zero, Tensor* acc) {
  const bool u8 = x.dtype() == DType::kU8;
  if (!cpu::exact_int8_gemm() || x.ndim() != 4 || w.ndim() != 4 || (!u8 && x.dtype() != DType::kI8) || w.dtype() != DType::kI8) return false;
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), M = w.dim(0), g = attr_i(n, "group", 1);
  if (g < 1 || C % g || M % g || w.dim(1) != C / g)
    op_error(n, "weight " + w.shape_str() + " does not fit input " + x.shape_str() + " in " + std::to_string(g) + " groups");
  const Window k = window_of(n, H, W, w.dim(2), w.dim(3));
  const int64_t cg = C / g, mg = M / g, ohw = k.out_h * k.out_w, kk = cg * k.kh * k.kw;
  *acc = Tensor::empty({N, M, k.out_h, k.out_w}, DType::kI32);
  if (acc->numel() == 0 || kk == 0) return false;
  std::vector<int8_t> shifted(u8 ? static_cast<size_t>(x.numel()) : 0);
  for (size_t i = 0; i < shifted.size(); ++i) shifted[i] = static_cast<int8_t>(x.data<uint8_t>()[i] - 128);
  const int8_t* xs = u8 ? shifted.data() : x.data<int8_t>();
  const auto pad = static_cast<int8_t>(u8 ? x_zero - 128 : x_zero);
  const auto i32 = [](int64_t v) { return static_cast<int>(v); };
  if (g == 1 && N > 1 && kk * N * ohw <= kBatchedColumns) {  // the images side by side: one GEMM
    const int64_t cols = N * ohw;
    std::vector<int8_t> col(static_cast<size_t>(kk * cols));
    std::vector<int32_t> prod(static_cast<size_t>(M * cols));
    vec::for_items(N, kk * ohw, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) im2col(xs + b * C * H * W, C, H, W, k, col.data() + b * ohw, cols, pad);
    });
    if (!cpu::gemm_int8(i32(M), i32(cols), i32(kk), w.data<int8_t>(), true, w_zero, col.data(), pad, prod.data())) return false;
    for (int64_t b = 0; b < N; ++b)
      for (int64_t m = 0; m < M; ++m) std::copy_n(prod.data() + m * cols + b * ohw, ohw, acc->data<int32_t>() + (b * M + m) * ohw);
    return true;
  }
  std::vector<int8_t> col(static_cast<size_t>(kk * ohw));
  for (int64_t b = 0; b < N; ++b)
    for (int64_t gi = 0; gi < g; ++gi) {
      im2col(xs + (b * C + gi * cg) * H * W, cg, H, W, k, col.data(), ohw, pad);
      if (!cpu::gemm_int8(i32(mg), i32(ohw), i32(kk), w.data<int8_t>() + gi * mg * kk, true, w_zero, col.data(), pad,
                          acc->data<int32_t>() + (b * M + gi * mg) * ohw))
        return false;
    }
  return true;
}

void op_batch_norm(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  if (attr_i(n, "training_mode", 0)) op_error(n, "training_mode BatchNormalization is not supported (inference only)");
  if (x.ndim() < 2 || x.dtype() != DType::kF32) op_error(n, "expects float32 [N, C, ...]");
  const int64_t C = x.dim(1), inner = x.numel() / std::max<int64_t>(1, x.dim(0) * C);
  const float eps = attr_f(n, "epsilon", 1e-5f);
  for (size_t i = 1; i < 5; ++i)
    if (need(n, in, i).numel() != C) op_error(n, "scale, bias, mean and var need " + std::to_string(C) + " values");
  const float *s = in[1]->f32(), *b = in[2]->f32(), *mu = in[3]->f32(), *var = in[4]->f32();
  Tensor y = Tensor::empty(x.shape());
  for (int64_t i = 0; i < x.dim(0); ++i)
    for (int64_t c = 0; c < C; ++c) {
      const float a = s[c] / std::sqrt(var[c] + eps), sh = b[c] - mu[c] * a;
      const float* xr = x.f32() + (i * C + c) * inner;
      float* yr = y.f32() + (i * C + c) * inner;
      for (int64_t p = 0; p < inner; ++p) yr[p] = xr[p] * a + sh;
    }
  out[0] = y;
}

namespace {

// AveragePool's divisor of each output: its window's taps inside the image, or inside image +
// pads with count_include_pad (ceil_mode windows may reach past both), at least 1. Separable: a
// window's taps are its row's times its column's.
std::vector<float> average_divisors(const Window& k, int64_t H, int64_t W, bool include) {
  auto taps = [include](int64_t start, int64_t kn, int64_t dil, int64_t size, int64_t pad_lo, int64_t pad_hi) {
    int64_t inside = 0, padded = 0;
    for (int64_t i = 0; i < kn; ++i) {
      const int64_t at = start + i * dil;
      padded += at >= -pad_lo && at < size + pad_hi;
      inside += at >= 0 && at < size;
    }
    return include ? padded : inside;
  };
  std::vector<int64_t> cols;
  for (int64_t ox = 0; ox < k.out_w; ++ox) cols.push_back(taps(ox * k.sw - k.pl, k.kw, k.dw, W, k.pl, k.pr));
  std::vector<float> div;
  for (int64_t oy = 0; oy < k.out_h; ++oy) {
    const int64_t rows = taps(oy * k.sh - k.pt, k.kh, k.dh, H, k.pt, k.pb);
    for (int64_t c : cols) div.push_back(static_cast<float>(std::max<int64_t>(1, rows * c)));
  }
  return div;
}

// A plane copied into a frame as large as its windows reach (pads, ceil_mode's overhang), the
// outside filled with `fill` (-inf for MaxPool, 0 for AveragePool), so every window lies inside
// it, and split by the strides into sh x sw phases: phase (a, b) holds the frame's rows a, a + sh,
// ... and columns b, b + sw, ..., so that a strided window's taps are unstrided in their phases.
// Frame row r is the image's row r - pt, column c its column c - pl.
struct Frame {
  int64_t h, w;   // a phase's rows and columns
  int64_t phase;  // floats from one phase to the next
};

LOOM_VEC void frame_plane(const Frame& f, const Window& k, const float* xp, int64_t H, int64_t W, float fill, float* fp) {
  for (int64_t a = 0; a < k.sh; ++a)
    for (int64_t b = 0; b < k.sw; ++b) {
      const Span in = inside(f.w, k.sw, b - k.pl, W);
      for (int64_t r = 0; r < f.h; ++r) {
        const int64_t iy = r * k.sh + a - k.pt;
        const bool in_image = iy >= 0 && iy < H;
        strided_row(fp + (a * k.sw + b) * f.phase + r * f.w, f.w, xp + (in_image ? iy : 0) * W + b - k.pl, k.sw, in_image ? in : Span{0, 0}, fill);
      }
    }
}

// MaxPool (mx) or AveragePool over `planes` frames laid end to end, tap by tap over every window
// start of them all at once: z[p] is the window starting at position p of the phase (0, 0), and a
// plane's outputs are its part of z (windows that start in one frame and run into the next are
// computed and never read). One long loop a tap vectorises; loops along rows of six outputs, or
// along each window, spent their time in loop overhead. The taps in the order of the window's
// rows and columns. Each phase holds one frame more than `planes`, of `fill`, for the last
// windows' overrun; `z`: planes frames; `div`: AveragePool's divisor of each output.
LOOM_VEC void pool_frames(bool mx, const Window& k, const Frame& f, int64_t planes, const float* fp, const float* div, float* z, float* yp) {
  const int64_t len = planes * f.h * f.w;
  for (int64_t p = 0; p < len; ++p) z[p] = mx ? -INFINITY : 0.0f;
  for (int64_t i = 0; i < k.kh; ++i)
    for (int64_t j = 0; j < k.kw; ++j) {
      const int64_t r = i * k.dh, c = j * k.dw;
      const float* src = fp + (r % k.sh * k.sw + c % k.sw) * f.phase + r / k.sh * f.w + c / k.sw;
      if (mx)
        for (int64_t p = 0; p < len; ++p) z[p] = std::max(z[p], src[p]);
      else
        for (int64_t p = 0; p < len; ++p) z[p] += src[p];
    }
  for (int64_t q = 0; q < planes; ++q)
    for (int64_t oy = 0; oy < k.out_h; ++oy) {
      const float* zr = z + (q * f.h + oy) * f.w;
      float* y = yp + (q * k.out_h + oy) * k.out_w;
      if (mx)
        for (int64_t ox = 0; ox < k.out_w; ++ox) y[ox] = zr[ox];
      else
        for (int64_t ox = 0; ox < k.out_w; ++ox) y[ox] = zr[ox] / div[oy * k.out_w + ox];
    }
}

}  // namespace

void op_pool(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  if (run_as_2d(n, in, out, op_pool)) return;
  const Tensor& x = need(n, in, 0);
  if (n.op == "MaxPool" && (x.dtype() == DType::kU8 || x.dtype() == DType::kI8)) {  // the QOperator format's: exact in float
    const Tensor f = centred(n, x, nullptr, -1, "x");
    op_pool(n, {&f}, out);
    Tensor y = Tensor::empty(out[0].shape(), x.dtype());
    const float* v = out[0].f32();
    if (x.dtype() == DType::kU8)
      for (int64_t i = 0; i < y.numel(); ++i) y.data<uint8_t>()[i] = static_cast<uint8_t>(v[i]);
    else
      for (int64_t i = 0; i < y.numel(); ++i) y.data<int8_t>()[i] = static_cast<int8_t>(v[i]);
    out[0] = y;
    return;
  }
  need_nchw(n, x);
  const auto ks = attr_ints(n, "kernel_shape");
  if (ks.size() != 2) op_error(n, "only 2-D pooling is supported");
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const Window k = window_of(n, H, W, ks[0], ks[1]);
  const bool mx = n.op == "MaxPool", include = attr_i(n, "count_include_pad", 0) != 0;
  if (out.size() > 1) op_error(n, "MaxPool's Indices output is not supported");
  Tensor y = Tensor::empty({N, C, k.out_h, k.out_w});
  const std::vector<float> div = mx ? std::vector<float>{} : average_divisors(k, H, W, include);
  // A single output row or column has no stride: one phase there.
  Window kp = k;
  if (kp.out_h == 1) kp.sh = 1;
  if (kp.out_w == 1) kp.sw = 1;
  const int64_t fh = (kp.out_h - 1) * kp.sh + (kp.kh - 1) * kp.dh + 1, fw = (kp.out_w - 1) * kp.sw + (kp.kw - 1) * kp.dw + 1;
  if (static_cast<double>(fh) * static_cast<double>(fw) > std::max(16.0 * static_cast<double>(H * W), double{1 << 20}))
    op_error(n, "pads of " + std::to_string(fh) + " x " + std::to_string(fw) + " around a " + std::to_string(H) + " x " + std::to_string(W) +
                    " image are not supported");
  const int64_t fs = ((fh + kp.sh - 1) / kp.sh) * ((fw + kp.sw - 1) / kp.sw);
  const int64_t group = std::max<int64_t>(1, 4096 / fs);  // planes a run: 16 KiB of frames in each phase
  const Frame f{(fh + kp.sh - 1) / kp.sh, (fw + kp.sw - 1) / kp.sw, (group + 1) * fs};
  const float* xf = x.f32();
  float* yf = y.f32();
  const float fill = mx ? -INFINITY : 0.0f;
  vec::for_items(N * C, fs * kp.sh * kp.sw + fs * k.kh * k.kw, [&](int64_t lo, int64_t hi) {
    const auto frames = scratch(kp.sh * kp.sw * f.phase), z = scratch(group * fs);
    for (int64_t p = lo; p < hi; p += group) {
      const int64_t planes = std::min(group, hi - p);
      for (int64_t q = 0; q < planes; ++q) frame_plane(f, kp, xf + (p + q) * H * W, H, W, fill, frames.get() + q * fs);
      for (int64_t ph = 0; ph < kp.sh * kp.sw; ++ph) std::fill_n(frames.get() + ph * f.phase + planes * fs, fs, fill);
      pool_frames(mx, kp, f, planes, frames.get(), div.data(), z.get(), yf + p * k.out_h * k.out_w);
    }
  });
  out[0] = y;
}

// GlobalAveragePool and GlobalMaxPool.
void op_global_avg_pool(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  const Tensor& x = need(n, in, 0);
  if (x.ndim() < 3 || x.dtype() != DType::kF32) op_error(n, "expects float32 [N, C, spatial...]");
  const int64_t N = x.dim(0), C = x.dim(1), inner = x.numel() / std::max<int64_t>(1, N * C);
  Shape s = {N, C};
  for (int d = 2; d < x.ndim(); ++d) s.push_back(1);
  Tensor y = Tensor::empty(s);
  const bool max = n.op == "GlobalMaxPool";
  const float* xf = x.f32();
  float* yf = y.f32();
  vec::for_items(N * C, inner, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p)
      yf[p] = max ? vec::max(xf + p * inner, inner, -INFINITY) : vec::sum(xf + p * inner, inner) / static_cast<float>(std::max<int64_t>(1, inner));
  });
  out[0] = y;
}

}  // namespace loom::rt::graph

// calibrate.cpp — the observers: two passes over the calibration data (ranges, then histograms).
#include "calibrate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom::compress {

namespace {

constexpr int kBins = 2048;
constexpr int64_t kChunk = 500;

struct LayerStats {
  float lo = std::numeric_limits<float>::max(), hi = std::numeric_limits<float>::lowest();
  std::vector<double> signed_hist = std::vector<double>(kBins, 0.0);  // over [lo, hi]
  std::vector<double> abs_hist = std::vector<double>(kBins, 0.0);     // |x| over [0, max|x|]
  double amax() const { return std::max(std::fabs(lo), std::fabs(hi)); }
};

template <typename F>
void for_each_chunk(rt::Mlp& m, const rt::Tensor& x, F f) {
  for (int64_t b = 0; b < x.dim(0); b += kChunk) {
    m.forward(x.rows(b, std::min(x.dim(0), b + kChunk)));
    for (size_t l = 0; l + 1 < m.widths().size(); ++l) f(l, m.activations()[l]);
  }
}

void add_to_hist(const rt::Tensor& a, LayerStats& s) {
  const float* v = a.f32();
  const double span = std::max(static_cast<double>(s.hi) - s.lo, 1e-30), amax = std::max<double>(s.amax(), 1e-30);
  for (int64_t i = 0, n = a.numel(); i < n; ++i) {
    const int b = std::min(kBins - 1, static_cast<int>((v[i] - s.lo) / span * kBins));
    s.signed_hist[static_cast<size_t>(std::max(b, 0))] += 1;
    s.abs_hist[static_cast<size_t>(std::min(kBins - 1, static_cast<int>(std::fabs(v[i]) / amax * kBins)))] += 1;
  }
}

// The value below which a fraction q of the histogram's mass lies (linear within a bin).
double hist_quantile(const std::vector<double>& h, double lo, double hi, double q) {
  double total = 0;
  for (double c : h) total += c;
  double acc = 0;
  const double width = (hi - lo) / static_cast<double>(h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    if (acc + h[i] >= q * total && h[i] > 0) return lo + width * (static_cast<double>(i) + (q * total - acc) / h[i]);
    acc += h[i];
  }
  return hi;
}

double kl_divergence(const std::vector<double>& p, const std::vector<double>& q) {
  double sp = 0, sq = 0;
  for (size_t i = 0; i < p.size(); ++i) sp += p[i], sq += q[i];
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] > 0) kl += p[i] / sp * std::log((p[i] / sp) / std::max(q[i] / sq, 1e-12));
  return kl;
}

}  // namespace

double kl_threshold(const std::vector<double>& hist, double bin_width, int levels) {
  const int n = static_cast<int>(hist.size());
  if (n <= levels) return bin_width * n;
  double best = std::numeric_limits<double>::max();
  int best_i = n;
  for (int i = levels; i <= n; ++i) {
    std::vector<double> p(hist.begin(), hist.begin() + i);
    for (int j = i; j < n; ++j) p[static_cast<size_t>(i - 1)] += hist[static_cast<size_t>(j)];  // outliers clipped in
    std::vector<double> q(static_cast<size_t>(i), 0.0);
    const int merged = i / levels;
    for (int j = 0; j < levels; ++j) {  // the reference bins merged into `levels`, then expanded back
      const int start = j * merged, stop = j + 1 == levels ? i : start + merged;
      double total = 0;
      int nonzero = 0;
      for (int k = start; k < stop; ++k) total += hist[static_cast<size_t>(k)], nonzero += hist[static_cast<size_t>(k)] > 0;
      for (int k = start; k < stop; ++k)
        if (hist[static_cast<size_t>(k)] > 0) q[static_cast<size_t>(k)] = total / nonzero;
    }
    const double kl = kl_divergence(p, q);
    if (kl < best) best = kl, best_i = i;
  }
  return (best_i + 0.5) * bin_width;
}

std::vector<rt::int8::QParams> calibrate(rt::Mlp& m, const rt::Tensor& x, const std::string& observer) {
  if (observer != "minmax" && observer != "percentile" && observer != "entropy")
    throw rt::Error("--observer must be minmax, percentile or entropy, not '" + observer + "'");
  if (x.ndim() != 2 || x.dim(1) != m.widths().front())
    throw rt::Error("calibration data has " + std::to_string(x.ndim() == 2 ? x.dim(1) : x.numel()) +
                    " features per sample but the model takes " + std::to_string(m.widths().front()));
  if (x.dim(0) < 1) throw rt::Error("no calibration samples");
  std::vector<LayerStats> st(m.widths().size() - 1);
  for_each_chunk(m, x, [&](size_t l, const rt::Tensor& a) {
    const float* v = a.f32();
    for (int64_t i = 0, n = a.numel(); i < n; ++i) st[l].lo = std::min(st[l].lo, v[i]), st[l].hi = std::max(st[l].hi, v[i]);
  });
  if (observer != "minmax") for_each_chunk(m, x, [&](size_t l, const rt::Tensor& a) { add_to_hist(a, st[l]); });
  std::vector<rt::int8::QParams> out;
  for (const auto& s : st) {
    double lo = s.lo, hi = s.hi;
    if (observer == "percentile") {
      lo = s.lo < 0 ? hist_quantile(s.signed_hist, s.lo, s.hi, 0.0001) : s.lo;
      hi = hist_quantile(s.signed_hist, s.lo, s.hi, 0.9999);
    } else if (observer == "entropy") {
      // Non-negative inputs (the image, ReLU outputs) use every level on [0, t]; signed ones
      // split them over [-t, t].
      const int levels = s.lo >= 0 ? rt::int8::kActMax + 1 : (rt::int8::kActMax + 1) / 2;
      const double t = kl_threshold(s.abs_hist, std::max<double>(s.amax(), 1e-30) / kBins, levels);
      hi = std::min<double>(t, s.hi);
      lo = s.lo < 0 ? std::max<double>(-t, s.lo) : s.lo;
    }
    out.push_back(rt::int8::affine_from_range(static_cast<float>(lo), static_cast<float>(hi)));
  }
  return out;
}

}  // namespace loom::compress

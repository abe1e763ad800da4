// prune.cpp — scoring neurons and cutting rows and columns.
#include "prune.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace loom::compress {

namespace {

std::vector<int> keep_indices(const float* w, int rows, int cols, int keep, bool l1) {
  std::vector<double> score(static_cast<size_t>(rows), 0.0);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const double v = w[static_cast<int64_t>(r) * cols + c];
      score[static_cast<size_t>(r)] += l1 ? std::fabs(v) : v * v;
    }
  std::vector<int> idx(static_cast<size_t>(rows));
  std::iota(idx.begin(), idx.end(), 0);
  // The highest scores stay; ties keep the lower index, so the result does not depend on the sort.
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)]; });
  idx.resize(static_cast<size_t>(keep));
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace

PruneResult prune_mlp(const rt::Mlp& m, double sparsity, const std::string& criterion) {
  if (!(sparsity > 0 && sparsity < 1)) throw rt::Error("--sparsity must be in (0, 1), not " + std::to_string(sparsity));
  if (criterion != "l1" && criterion != "l2") throw rt::Error("--criterion must be l1 or l2, not '" + criterion + "'");
  const auto& w = m.widths();
  if (w.size() < 3) throw rt::Error("the model has no hidden layer to prune (layers " + std::to_string(w.size()) + ")");
  std::vector<std::vector<int>> kept(w.size());  // kept[i]: neurons of width i kept (all for input and output)
  for (size_t i = 0; i < w.size(); ++i) {
    if (i == 0 || i + 1 == w.size()) {
      kept[i].resize(static_cast<size_t>(w[i]));
      std::iota(kept[i].begin(), kept[i].end(), 0);
      continue;
    }
    const int keep = std::max(1, static_cast<int>(std::lround(w[i] * (1.0 - sparsity))));
    kept[i] = keep_indices(m.params()[2 * (i - 1)].value.f32(), w[i], w[i - 1], keep, criterion == "l1");
  }
  std::vector<int> widths;
  for (const auto& k : kept) widths.push_back(static_cast<int>(k.size()));
  rt::Mlp out(widths, 0);
  for (size_t l = 0; l + 1 < w.size(); ++l) {
    const float* src_w = m.params()[2 * l].value.f32();
    const float* src_b = m.params()[2 * l + 1].value.f32();
    float* dst_w = out.params()[2 * l].value.f32();
    float* dst_b = out.params()[2 * l + 1].value.f32();
    const auto& rows = kept[l + 1];
    const auto& cols = kept[l];
    for (size_t r = 0; r < rows.size(); ++r) {
      dst_b[r] = src_b[rows[r]];
      for (size_t c = 0; c < cols.size(); ++c)
        dst_w[r * cols.size() + c] = src_w[static_cast<int64_t>(rows[r]) * w[l] + cols[c]];
    }
  }
  return {std::move(out), std::vector<std::vector<int>>(kept.begin() + 1, kept.end() - 1)};
}

}  // namespace loom::compress

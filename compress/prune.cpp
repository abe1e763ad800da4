// prune.cpp — scoring neurons and cutting rows and columns.
#include "prune.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>

#include "loom/rt/io/text.hpp"

namespace loom::compress {

namespace {

// The indices of the `keep` largest scores, in order; ties keep the lower index, so the result
// does not depend on the sort.
std::vector<int> largest(const std::vector<double>& score, int keep) {
  std::vector<int> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)]; });
  idx.resize(static_cast<size_t>(keep));
  std::sort(idx.begin(), idx.end());
  return idx;
}

// The L1 (or squared L2) norm of each unit of w [rows, cols]: its row, or its group of `group`
// adjacent columns.
std::vector<double> norms(const float* w, int rows, int cols, bool by_row, int group, bool l1) {
  std::vector<double> score(static_cast<size_t>(by_row ? rows : cols / group), 0.0);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const double v = w[static_cast<int64_t>(r) * cols + c];
      score[static_cast<size_t>(by_row ? r : c / group)] += l1 ? std::fabs(v) : v * v;
    }
  return score;
}

std::vector<int> keep_indices(const float* w, int rows, int cols, int keep, bool l1) {
  return largest(norms(w, rows, cols, true, 1, l1), keep);
}

// The `keep` groups of `group` adjacent columns of w [rows, cols] with the largest norms, in order.
std::vector<int> keep_column_groups(const float* w, int rows, int cols, int group, int keep, bool l1) {
  return largest(norms(w, rows, cols, false, group, l1), keep);
}

void check_prune_args(double sparsity, const std::string& criterion) {
  if (!(sparsity > 0 && sparsity < 1)) throw rt::Error("--sparsity must be in (0, 1), not " + rt::number_text(sparsity));
  if (criterion != "l1" && criterion != "l2") throw rt::Error("--criterion must be l1 or l2, not '" + criterion + "'");
}

int kept_count(int n, double sparsity, const char* what) {
  const int keep = static_cast<int>(std::lround(n * (1.0 - sparsity)));
  if (keep < 1)
    throw rt::Error("--sparsity " + rt::number_text(sparsity) + " would remove all " + std::to_string(n) + " " + what +
                    " of each block (a block keeps at least one)");
  return keep;
}

// dst[r, :] = src[rows[r], cols] for the columns in `cols` (all when empty).
void copy_rows_cols(const rt::Tensor& src, const std::vector<int>& rows, const std::vector<int>& cols, rt::Tensor& dst) {
  const int64_t in_cols = src.dim(src.shape().size() - 1);
  const int64_t out_cols = cols.empty() ? in_cols : static_cast<int64_t>(cols.size());
  for (size_t r = 0; r < rows.size(); ++r)
    for (int64_t c = 0; c < out_cols; ++c)
      dst.f32()[static_cast<int64_t>(r) * out_cols + c] =
          src.f32()[static_cast<int64_t>(rows[r]) * in_cols + (cols.empty() ? c : cols[static_cast<size_t>(c)])];
}

std::vector<int> all(int64_t n) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

PruneResult prune_mlp(const rt::Mlp& m, double sparsity, const std::string& criterion) {
  check_prune_args(sparsity, criterion);
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

GptPruneResult prune_gpt(rt::Gpt& g, double sparsity, const std::string& criterion) {
  check_prune_args(sparsity, criterion);
  const rt::GptConfig& c = g.config();
  const int hs = c.hs(), A = c.attn(), F = c.ff();
  rt::GptConfig out_c = c;
  out_c.heads = kept_count(c.heads, sparsity, "heads");
  out_c.inner = kept_count(F, sparsity, "MLP neurons");
  out_c.head_size = hs;
  GptPruneResult r{rt::Gpt(out_c, 0), {}, {}};
  std::map<std::string, const rt::Tensor*> src;
  for (const auto& p : g.params()) src[p.name] = &p.value;
  const bool l1 = criterion == "l1";
  std::map<std::string, std::pair<std::vector<int>, std::vector<int>>> cut;  // name -> (rows, cols) kept
  for (int l = 0; l < c.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    const rt::Tensor& proj = *src.at(h + "attn.c_proj.weight");
    const std::vector<int> heads = keep_column_groups(proj.f32(), c.embd, A, hs, out_c.heads, l1);
    const rt::Tensor& mproj = *src.at(h + "mlp.c_proj.weight");
    const std::vector<int> neurons = keep_column_groups(mproj.f32(), c.embd, F, 1, out_c.inner, l1);
    std::vector<int> head_cols, qkv_rows;
    for (int part = 0; part < 3; ++part)  // q, k, v: each [A] rows of c_attn, heads in order
      for (int k : heads)
        for (int d = 0; d < hs; ++d) qkv_rows.push_back(part * A + k * hs + d);
    for (int k : heads)
      for (int d = 0; d < hs; ++d) head_cols.push_back(k * hs + d);
    cut[h + "attn.c_attn.weight"] = {qkv_rows, {}};
    cut[h + "attn.c_attn.bias"] = {qkv_rows, {}};
    cut[h + "attn.c_proj.weight"] = {all(c.embd), head_cols};
    cut[h + "mlp.c_fc.weight"] = {neurons, {}};
    cut[h + "mlp.c_fc.bias"] = {neurons, {}};
    cut[h + "mlp.c_proj.weight"] = {all(c.embd), neurons};
    r.heads_kept.push_back(heads);
    r.neurons_kept.push_back(neurons);
  }
  for (auto& p : r.model.params()) {
    const rt::Tensor& from = *src.at(p.name);
    auto it = cut.find(p.name);
    if (it == cut.end()) {
      std::copy_n(from.f32(), from.numel(), p.value.f32());
      continue;
    }
    if (from.shape().size() == 1) {  // a bias: rows of a [n, 1] view
      for (size_t i = 0; i < it->second.first.size(); ++i) p.value.f32()[i] = from.f32()[it->second.first[i]];
      continue;
    }
    copy_rows_cols(from, it->second.first, it->second.second, p.value);
  }
  return r;
}

}  // namespace loom::compress

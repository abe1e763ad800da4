// ring.cpp — ring search. Rings compare by (bottleneck bandwidth, total bandwidth, then the
// lexicographically smallest GPU order) so that results are deterministic.
#include "loom/topo/ring.hpp"

#include <algorithm>
#include <numeric>

namespace loom::topo {

namespace {

constexpr int kExactLimit = 8;           // exhaustive ring search up to this many GPUs
constexpr double kSubsetBudget = 300000;  // subsets x permutations we are willing to enumerate

struct Scorer {
  const Topology& t;
  std::vector<std::vector<double>> bw;  // by GPU position

  explicit Scorer(const Topology& topo) : t(topo) {
    const size_t n = t.gpus.size();
    bw.assign(n, std::vector<double>(n, 0.0));
    for (size_t a = 0; a < n; ++a)
      for (size_t b = 0; b < n; ++b) bw[a][b] = t.gpu_gbps(static_cast<int>(a), static_cast<int>(b));
  }

  // pos: GPU positions in ring order.
  Ring score(const std::vector<int>& pos) const {
    Ring r;
    for (int p : pos) r.gpus.push_back(t.gpus[p].index);
    if (pos.size() < 2) return r;
    r.bottleneck_gbps = 1e300;
    int links = 1 << 30;
    for (size_t i = 0; i < pos.size(); ++i) {
      int a = pos[i], b = pos[(i + 1) % pos.size()];
      double g = bw[a][b];
      r.total_gbps += g;
      r.bottleneck_gbps = std::min(r.bottleneck_gbps, g);
      const Path& p = t.gpu_paths[a][b];
      links = std::min(links, p.kind == PathKind::kNVLink ? p.nvlinks : 0);
    }
    if (pos.size() == 2) r.total_gbps /= 2;  // a two-GPU ring is one link used both ways
    r.bottleneck_links = links;
    return r;
  }
};

bool better(const Ring& a, const Ring& b) {
  const double eps = 1e-9;
  if (a.bottleneck_gbps > b.bottleneck_gbps + eps) return true;
  if (a.bottleneck_gbps < b.bottleneck_gbps - eps) return false;
  if (a.total_gbps > b.total_gbps + eps) return true;
  if (a.total_gbps < b.total_gbps - eps) return false;
  return a.gpus < b.gpus;
}

Ring exact_ring(const Scorer& s, std::vector<int> pos) {
  std::sort(pos.begin(), pos.end());
  Ring best = s.score(pos);
  if (pos.size() <= 3) return best;  // every order of 3 is the same ring
  do {
    Ring r = s.score(pos);
    if (better(r, best)) best = r;
  } while (std::next_permutation(pos.begin() + 1, pos.end()));
  return best;
}

Ring heuristic_ring(const Scorer& s, const std::vector<int>& pos) {
  Ring best;
  bool have = false;
  const size_t n = pos.size();
  for (size_t start = 0; start < n; ++start) {
    // Greedy: always step to the best remaining neighbour.
    std::vector<int> order{pos[start]};
    std::vector<bool> used(n, false);
    used[start] = true;
    for (size_t k = 1; k < n; ++k) {
      size_t pick = n;
      for (size_t j = 0; j < n; ++j)
        if (!used[j] && (pick == n || s.bw[order.back()][pos[j]] > s.bw[order.back()][pos[pick]])) pick = j;
      used[pick] = true;
      order.push_back(pos[pick]);
    }
    // 2-opt: reverse segments while that improves the ring.
    Ring cur = s.score(order);
    for (bool improved = true; improved;) {
      improved = false;
      for (size_t i = 1; i + 1 < n && !improved; ++i)
        for (size_t j = i + 1; j < n && !improved; ++j) {
          std::vector<int> cand(order);
          std::reverse(cand.begin() + static_cast<long>(i), cand.begin() + static_cast<long>(j) + 1);
          Ring r = s.score(cand);
          if (better(r, cur)) {  // a strict order, so this terminates
            order.swap(cand);
            cur = r;
            improved = true;
          }
        }
    }
    if (!have || better(cur, best)) best = cur, have = true;
  }
  return best;
}

std::vector<int> positions(const Topology& t, const std::vector<int>& indices) {
  std::vector<int> pos;
  for (int idx : indices) {
    int p = t.gpu_pos(idx);
    if (p < 0) throw Error("GPU " + std::to_string(idx) + " is not on this node");
    if (std::find(pos.begin(), pos.end(), p) != pos.end()) throw Error("GPU " + std::to_string(idx) + " given twice");
    pos.push_back(p);
  }
  return pos;
}

Ring ring_of_positions(const Scorer& s, const std::vector<int>& pos) {
  return pos.size() <= static_cast<size_t>(kExactLimit) ? exact_ring(s, pos) : heuristic_ring(s, pos);
}

double factorial(int n) { return n <= 1 ? 1.0 : n * factorial(n - 1); }

double choose(int n, int k) {
  double r = 1;
  for (int i = 1; i <= k; ++i) r = r * (n - k + i) / i;
  return r;
}

}  // namespace

Ring best_ring(const Topology& t, const std::vector<int>& gpu_indices) {
  Scorer s(t);
  return ring_of_positions(s, positions(t, gpu_indices));
}

Ring best_ring_of_k(const Topology& t, const std::vector<int>& allowed, int k) {
  Scorer s(t);
  std::vector<int> pos = positions(t, allowed);
  std::sort(pos.begin(), pos.end());
  const int n = static_cast<int>(pos.size());
  if (k <= 0 || k > n) throw Error("cannot choose " + std::to_string(k) + " of " + std::to_string(n) + " GPUs");
  if (k == n) return ring_of_positions(s, pos);
  if (k <= kExactLimit && choose(n, k) * factorial(k - 1) <= kSubsetBudget) {
    Ring best;
    bool have = false;
    std::vector<bool> mask(n, false);
    std::fill(mask.begin(), mask.begin() + k, true);
    do {
      std::vector<int> sub;
      for (int i = 0; i < n; ++i)
        if (mask[i]) sub.push_back(pos[i]);
      Ring r = exact_ring(s, sub);
      if (!have || better(r, best)) best = r, have = true;
    } while (std::prev_permutation(mask.begin(), mask.end()));
    return best;
  }
  // Large sets: grow a group from each seed by the best bottleneck to the group, then ring it.
  Ring best;
  bool have = false;
  for (int seed = 0; seed < n; ++seed) {
    std::vector<int> group{pos[seed]};
    std::vector<bool> in(n, false);
    in[seed] = true;
    while (static_cast<int>(group.size()) < k) {
      int pick = -1;
      double pick_score = -1;
      for (int j = 0; j < n; ++j) {
        if (in[j]) continue;
        double sum = 0;
        for (int g : group) sum += s.bw[g][pos[j]];
        if (sum > pick_score) pick_score = sum, pick = j;
      }
      in[pick] = true;
      group.push_back(pos[pick]);
    }
    Ring r = ring_of_positions(s, group);
    if (!have || better(r, best)) best = r, have = true;
  }
  return best;
}

}  // namespace loom::topo

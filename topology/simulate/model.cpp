// model.cpp — the allreduce model, the two placement policies and the compute model of
// `loom-topo simulate` (simulate.hpp; the constants and their sources: doc/simulate.md).
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "loom/topo/ring.hpp"
#include "simulate.hpp"

namespace loom::topo::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// NCCL's achievable bandwidth inside one node for the job's GPUs there, GB/s one direction:
// with every ring hop on NVLink, NCCL's channels use all of a GPU's NVLinks to the others (the
// GPU with the fewest bounds it); with a PCIe or SMP hop in the best ring, that hop bounds it.
double intra_gbps(const Topology& t, const std::vector<int>& gpus, const Model& m) {
  if (gpus.size() < 2) return kInf;
  const Ring r = best_ring(t, gpus);
  if (r.bottleneck_links == 0) return m.pcie_efficiency * r.bottleneck_gbps;
  double worst = kInf;
  for (int g : gpus) {
    const int a = t.gpu_pos(g);
    double links = 0;
    for (int h : gpus) {
      if (h == g) continue;
      const int b = t.gpu_pos(h);
      const Path& p = t.gpu_paths[static_cast<size_t>(a)][static_cast<size_t>(b)];
      if (p.kind == PathKind::kNVLink) links = t.is_nvswitch() ? p.nvlinks : links + p.nvlinks;
    }
    worst = std::min(worst, links * t.nvlink_gbps(a, t.gpu_pos(gpus[0] == g ? gpus[1] : gpus[0])));
  }
  return m.nvlink_efficiency * worst;
}

// The NICs NCCL uses for these GPUs: each GPU's nearest NIC among the node's first `nics`.
int nics_used(const NodeType& nt, const std::vector<int>& gpus) {
  std::set<int> used;
  const Topology& t = nt.topo;
  const int n = std::min<int>(nt.nics, static_cast<int>(t.nics.size()));
  if (n <= 0) return 0;
  for (int g : gpus) {
    const auto& row = t.gpu_nic_paths[static_cast<size_t>(t.gpu_pos(g))];
    int best = 0;
    for (int i = 1; i < n; ++i)
      if (static_cast<int>(row[static_cast<size_t>(i)].kind) < static_cast<int>(row[static_cast<size_t>(best)].kind)) best = i;
    used.insert(best);
  }
  return static_cast<int>(used.size());
}

}  // namespace

int Cluster::gpus() const {
  int n = 0;
  for (int node = 0; node < nodes(); ++node) n += static_cast<int>(topo(node).gpus.size());
  return n;
}

Comm allreduce(const Cluster& c, const Allocation& a, double bytes, const Model& m, const std::string& algo) {
  Comm r;
  int ranks = 0, most_local = 0;
  double intra = kInf, inter = kInf;
  std::set<int> leaves;
  for (const auto& ng : a) {
    ranks += static_cast<int>(ng.gpus.size());
    most_local = std::max(most_local, static_cast<int>(ng.gpus.size()));
    intra = std::min(intra, intra_gbps(c.topo(ng.node), ng.gpus, m));
    leaves.insert(c.leaf_of(ng.node));
  }
  r.crosses_leaves = leaves.size() > 1;
  const int nodes = static_cast<int>(a.size());
  if (nodes > 1) {
    for (const auto& ng : a) {
      const NodeType& nt = c.type(ng.node);
      double gbps = std::max(1, nics_used(nt, ng.gpus)) * nt.nic_gbps / 8 * m.net_efficiency;
      if (r.crosses_leaves) gbps /= c.oversubscription;  // the spine is shared at full load
      inter = std::min(inter, gbps);
    }
  }
  if (ranks < 2) {
    r.algo = "none";
    return r;
  }
  const double bw = std::min(intra, inter);  // GB/s of the slowest hop kind
  const double P = ranks;
  const double alpha = nodes > 1 ? m.alpha_net_s : m.alpha_intra_s;
  const double ring = 2 * (P - 1) / P * bytes / (bw * 1e9) + 2 * (P - 1) * alpha;
  // NCCL's tree (across nodes only): a chain inside each node, a double binary tree between
  // nodes, latency growing with log2(nodes). On two nodes each node's NICs carry the message once
  // each way, fewer bytes than the ring's (NCCL issue 812; nccl-tests issue 22: twice the ring's
  // speed). On more, a node is inner in one tree and a leaf in the other and its NICs carry it
  // twice: NCCL's own tuner takes the tree's algorithm bandwidth as 0.92 x 0.5 of the link's.
  double tree = kInf;
  if (nodes > 1) {
    const double tree_bw = nodes == 2 ? bw : m.tree_efficiency * 0.5 * bw;
    tree = bytes / (tree_bw * 1e9) + 2 * std::ceil(std::log2(nodes)) * m.alpha_net_s + 2 * (most_local - 1) * m.alpha_intra_s;
  }
  const bool use_tree = algo == "tree" ? nodes > 1 : algo == "ring" ? false : tree < ring;
  r.algo = use_tree ? "tree" : "ring";
  r.allreduce_s = use_tree ? tree : ring;
  if (algo == "flat" || algo == "hier") {
    // Loom's own MPI collectives (runtime/comm/comm): a flat ring over every rank in node order,
    // whose node crossings are one flow on one link each way; or hierarchical, a ring inside
    // each node, then k rings of bytes/k across the nodes at once, then a ring inside again.
    const double one_link = nodes > 1 ? std::min(inter, c.type(a.front().node).nic_gbps / 8 * m.net_efficiency) : kInf;
    const double k = most_local, N = nodes;
    r.algo = algo;
    if (algo == "flat" || nodes < 2 || k < 2)
      r.allreduce_s = 2 * (P - 1) / P * bytes / (std::min(intra, one_link) * 1e9) + 2 * (P - 1) * alpha;
    else
      r.allreduce_s = 2 * (k - 1) / k * bytes / (intra * 1e9) + 2 * (N - 1) / N * bytes / (inter * 1e9) +
                      2 * (k - 1) * m.alpha_intra_s + 2 * (N - 1) * m.alpha_net_s;
  }
  r.algbw_gbps = bytes / r.allreduce_s / 1e9;
  r.busbw_gbps = r.algbw_gbps * 2 * (P - 1) / P;
  r.intra_gbps = std::isinf(intra) ? 0 : intra;
  r.inter_gbps = std::isinf(inter) ? 0 : inter;
  return r;
}

Policy slurm_policy() { return {"slurm", false, false, false}; }
Policy loom_policy() { return {"loom", true, true, true}; }

namespace {

std::vector<int> free_gpus(const std::vector<bool>& f) {
  std::vector<int> out;
  for (size_t i = 0; i < f.size(); ++i)
    if (f[i]) out.push_back(static_cast<int>(i));
  return out;
}

// k GPUs of a node: the lowest free indices (cons_tres without Links=), or the free GPUs with
// the best ring (Links= lets cons_tres prefer NVLink-connected GPUs; the plugin orders them).
std::vector<int> take(const Cluster& c, int node, std::vector<bool>& f, int k, bool links) {
  std::vector<int> avail = free_gpus(f), got;
  if (links && k > 1) {
    got = best_ring_of_k(c.topo(node), avail, k).gpus;
  } else {
    got.assign(avail.begin(), avail.begin() + k);
  }
  for (int g : got) f[static_cast<size_t>(g)] = false;
  return got;
}

int count_free(const std::vector<bool>& f) { return static_cast<int>(std::count(f.begin(), f.end(), true)); }

}  // namespace

Allocation allocate(const Cluster& c, std::vector<std::vector<bool>>& free, int n, const Policy& p) {
  std::vector<int> order;  // the nodes to try, in the order the policy tries them
  const int leaves = c.leaf_nodes > 0 ? (c.nodes() + c.leaf_nodes - 1) / c.leaf_nodes : 1;
  int total = 0;
  for (int node = 0; node < c.nodes(); ++node) total += count_free(free[static_cast<size_t>(node)]);
  if (total < n) return {};
  auto free_of = [&](int node) { return count_free(free[static_cast<size_t>(node)]); };
  if (!p.topology_conf) {
    // cons_tres without topology.conf: the first node that fits the job, else the lowest nodes.
    for (int node = 0; node < c.nodes(); ++node)
      if (free_of(node) >= n) {
        order = {node};
        break;
      }
    if (order.empty())
      for (int node = 0; node < c.nodes(); ++node) order.push_back(node);
  } else {
    // topology/tree: the leaf with the fewest free GPUs that still fits the job (best fit); in it
    // the best-fitting single node, else the nodes with the most free GPUs first (fewest nodes).
    int best_leaf = -1, best_free = 0;
    for (int l = 0; l < leaves; ++l) {
      int f = 0;
      for (int node = l * std::max(1, c.leaf_nodes); node < std::min(c.nodes(), (l + 1) * std::max(1, c.leaf_nodes)); ++node)
        f += free_of(node);
      if (c.leaf_nodes == 0) f = total;
      if (f >= n && (best_leaf < 0 || f < best_free)) best_leaf = l, best_free = f;
    }
    for (int node = 0; node < c.nodes(); ++node)
      if (best_leaf < 0 || c.leaf_of(node) == best_leaf) order.push_back(node);
    int fit = -1;
    for (int node : order)
      if (free_of(node) >= n && (fit < 0 || free_of(node) < free_of(fit))) fit = node;
    if (fit >= 0) {
      order = {fit};
    } else {
      std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return free_of(x) > free_of(y); });
    }
  }
  Allocation a;
  int left = n;
  for (int node : order) {
    const int k = std::min(left, free_of(node));
    if (k <= 0) continue;
    a.push_back({node, take(c, node, free[static_cast<size_t>(node)], k, p.links)});
    left -= k;
    if (left == 0) break;
  }
  return a;
}

double compute_seconds(const Cluster& c, const Allocation& a, double compute_s, bool balanced) {
  const double ref = device_weight("a100");
  double slowest = 0, speed = 0;
  int gpus = 0;
  for (const auto& ng : a) {
    const Topology& t = c.topo(ng.node);
    for (int g : ng.gpus) {
      const double w = device_weight(t.gpu_by_index(g)->cls);
      slowest = std::max(slowest, compute_s * ref / w);
      speed += w;
      ++gpus;
    }
  }
  return balanced ? compute_s * ref * gpus / speed : slowest;
}

}  // namespace loom::topo::sim

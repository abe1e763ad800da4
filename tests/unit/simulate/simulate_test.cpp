// simulate_test.cpp — `loom-topo simulate`'s model against published nccl-tests figures
// (doc/simulate.md cites each), its invariants, and the two placement policies.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "loom/topo/topology.hpp"
#include "simulate/simulate.hpp"

using namespace loom::topo;
using namespace loom::topo::sim;

namespace {

Cluster cluster_of(const std::string& shape, int nodes, int nics, double nic_gbps, int leaf_nodes = 0, double over = 1) {
  Cluster c;
  NodeType t;
  t.shape = shape;
  t.topo = builtin_shape(shape);
  t.nics = nics;
  t.nic_gbps = nic_gbps;
  c.types.push_back(t);
  c.node_type.assign(static_cast<size_t>(nodes), 0);
  c.leaf_nodes = leaf_nodes;
  c.oversubscription = over;
  return c;
}

Allocation whole_nodes(const Cluster& c, int first, int nodes) {
  Allocation a;
  for (int n = first; n < first + nodes; ++n) {
    NodeGpus ng{n, {}};
    for (const auto& g : c.topo(n).gpus) ng.gpus.push_back(g.index);
    a.push_back(ng);
  }
  return a;
}

double busbw(const Cluster& c, const Allocation& a) { return allreduce(c, a, 1 << 30, Model{}, "ring").busbw_gbps; }

void expect_within(double got, double published, double tolerance, const char* what) {
  EXPECT_NEAR(got, published, tolerance * published) << what << ": model " << got << " GB/s, published " << published;
  std::printf("anchor %-44s model %6.1f GB/s, published %6.1f GB/s (%+.0f%%)\n", what, got, published,
              100 * (got / published - 1));
}

std::vector<std::vector<bool>> all_free(const Cluster& c) {
  std::vector<std::vector<bool>> f(static_cast<size_t>(c.nodes()));
  for (int n = 0; n < c.nodes(); ++n) f[static_cast<size_t>(n)].assign(c.topo(n).gpus.size(), true);
  return f;
}

}  // namespace

TEST(SimulateAnchors, PublishedNcclTestsFiguresWithin30Percent) {
  const Cluster a100 = cluster_of("dgxa100", 2, 8, 200), h100 = cluster_of("hgxh100", 1, 8, 400);
  expect_within(busbw(a100, whole_nodes(a100, 0, 1)), 230, 0.3, "DGX A100, 8 GPUs, one node");
  expect_within(busbw(h100, whole_nodes(h100, 0, 1)), 370, 0.3, "HGX H100, 8 GPUs, one node (ring)");
  expect_within(busbw(a100, whole_nodes(a100, 0, 2)), 188, 0.3, "DGX A100 x2, 8x HDR 200 Gb/s");
  const Cluster a100_4 = cluster_of("dgxa100", 2, 4, 200);
  expect_within(busbw(a100_4, whole_nodes(a100_4, 0, 2)), 91, 0.3, "DGX A100 x2, 4x HDR 200 Gb/s");
  const Cluster v100 = cluster_of("dgx1v", 2, 4, 100);
  expect_within(busbw(v100, whole_nodes(v100, 0, 2)), 47, 0.3, "DGX-1V x2, 4x EDR 100 Gb/s");
}

// NCCL chooses itself (--algo auto): on 3 or more nodes neither algorithm may beat the network's
// line rate. Each figure is cited in doc/simulate.md; a 1 GiB allreduce over whole nodes.
TEST(SimulateAnchors, MultiNodeFiguresWithNcclsOwnChoiceWithin30Percent) {
  auto auto_busbw = [](const Cluster& c, int nodes) { return allreduce(c, whole_nodes(c, 0, nodes), 1 << 30, Model{}).busbw_gbps; };
  const Cluster a100 = cluster_of("dgxa100", 16, 8, 200);
  for (int nodes : {4, 8, 16}) {
    const std::string what = "DGX A100 x" + std::to_string(nodes) + ", 8x HDR (auto)";
    expect_within(auto_busbw(a100, nodes), 192, 0.3, what.c_str());
  }
  const Cluster a100_4 = cluster_of("dgxa100", 3, 4, 200);
  expect_within(auto_busbw(a100_4, 3), 90, 0.3, "A100 x3, 4x HDR (auto)");
  const Cluster v100 = cluster_of("dgx1v", 8, 4, 100), v100_1 = cluster_of("dgx1v", 8, 1, 100);
  for (int nodes : {4, 8}) {
    expect_within(auto_busbw(v100, nodes), 48, 0.3, ("DGX-1V x" + std::to_string(nodes) + ", 4x EDR (auto)").c_str());
    expect_within(auto_busbw(v100_1, nodes), 12.2, 0.3, ("DGX-1V x" + std::to_string(nodes) + ", 1x EDR (auto)").c_str());
  }
  expect_within(busbw(v100_1, whole_nodes(v100_1, 0, 2)), 12.2, 0.3, "DGX-1V x2, 1x EDR 100 Gb/s");
  const Cluster a800 = cluster_of("dgxa100", 12, 1, 200);  // A800s: the A100's NVLink board, one HDR NIC
  expect_within(auto_busbw(a800, 12), 24, 0.3, "A800 x12, 1x HDR (auto)");
  // On two nodes the tree moves fewer bytes than the ring and NCCL takes it: about twice the ring.
  const Comm two = allreduce(a100, whole_nodes(a100, 0, 2), 1 << 30, Model{});
  EXPECT_EQ(two.algo, "tree");
  EXPECT_NEAR(two.busbw_gbps / busbw(a100, whole_nodes(a100, 0, 2)), 1.875, 0.1);
}

TEST(SimulateInvariants, MoreBandwidthIsNeverSlower) {
  double last = 1e30;
  for (double gbps : {25.0, 50.0, 100.0, 200.0, 400.0, 800.0}) {
    const Cluster c = cluster_of("dgx1v", 4, 4, gbps);
    const double t = allreduce(c, whole_nodes(c, 0, 4), 256e6, Model{}).allreduce_s;
    EXPECT_LE(t, last) << gbps;
    last = t;
  }
}

TEST(SimulateInvariants, ARingThroughAPcieHopIsBoundByIt) {
  const Cluster c = cluster_of("dgx1v", 1, 4, 100);
  // GPUs 3 and 4 of a DGX-1 share no NVLink: their ring crosses the SMP interconnect.
  const Comm r = allreduce(c, {{0, {3, 4}}}, 1 << 30, Model{});
  EXPECT_LE(r.busbw_gbps, path_gbps(Path{PathKind::kSYS, 0}, 25));
  const Comm nv = allreduce(c, {{0, {0, 3}}}, 1 << 30, Model{});  // NV2
  EXPECT_GT(nv.busbw_gbps, 5 * r.busbw_gbps);
}

TEST(SimulateInvariants, AJobInsideOneLeafNeverPaysTheOversubscription) {
  const Cluster flat = cluster_of("dgxa100", 4, 8, 200, 2, 1), over = cluster_of("dgxa100", 4, 8, 200, 2, 4);
  const Allocation inside = whole_nodes(flat, 0, 2), across = whole_nodes(flat, 1, 2);
  EXPECT_DOUBLE_EQ(allreduce(flat, inside, 1e9, Model{}).allreduce_s, allreduce(over, inside, 1e9, Model{}).allreduce_s);
  EXPECT_GT(allreduce(over, across, 1e9, Model{}).allreduce_s, allreduce(flat, across, 1e9, Model{}).allreduce_s);
  EXPECT_TRUE(allreduce(over, across, 1e9, Model{}).crosses_leaves);
}

TEST(SimulatePolicies, LinksPickAnNvlinkPairWhereTheLowestIndicesDoNot) {
  const Cluster c = cluster_of("dgx1v", 1, 4, 100);
  auto f = all_free(c);
  for (int g : {0, 1, 2}) f[0][static_cast<size_t>(g)] = false;  // GPUs 3..7 free
  auto g = f;
  const Allocation slurm = allocate(c, f, 2, slurm_policy()), loom = allocate(c, g, 2, loom_policy());
  ASSERT_EQ(slurm.size(), 1u);
  EXPECT_EQ(slurm[0].gpus, (std::vector<int>{3, 4}));  // the SMP interconnect between them
  const Comm s = allreduce(c, slurm, 1e8, Model{}), l = allreduce(c, loom, 1e8, Model{});
  EXPECT_GT(l.busbw_gbps, 5 * s.busbw_gbps);
}

TEST(SimulatePolicies, TopologyConfPacksAJobUnderOneLeaf) {
  const Cluster c = cluster_of("dgxa100", 8, 8, 200, 4, 2);
  auto f = all_free(c);
  for (int n : {0, 1, 2}) f[static_cast<size_t>(n)].assign(8, false);  // leaf 0 has one free node
  auto g = f;
  const Allocation slurm = allocate(c, f, 16, slurm_policy()), loom = allocate(c, g, 16, loom_policy());
  EXPECT_TRUE(allreduce(c, slurm, 1e9, Model{}).crosses_leaves);  // nodes 3 and 4
  EXPECT_FALSE(allreduce(c, loom, 1e9, Model{}).crosses_leaves);
}

TEST(SimulatePolicies, BalancedSharesFollowTheSlowestGpuOnlyWhenEqual) {
  Cluster c = cluster_of("dgxa100", 1, 8, 200);
  NodeType v = c.types[0];
  v.shape = "dgx1v";
  v.topo = builtin_shape("dgx1v");
  c.types.push_back(v);
  c.node_type.push_back(1);
  const Allocation a = whole_nodes(c, 0, 2);
  const double equal = compute_seconds(c, a, 1.0, false), balanced = compute_seconds(c, a, 1.0, true);
  EXPECT_NEAR(equal, device_weight("a100") / device_weight("v100"), 1e-9);  // the V100s set the pace
  EXPECT_LT(balanced, equal);
  EXPECT_GT(balanced, 1.0);  // still slower than A100s alone
}

TEST(SimulateWorkload, IsDeterministicAndLoomIsNotSlower) {
  Cluster c = cluster_of("dgx1v", 8, 4, 100, 4, 2);
  Workload w;
  w.seed = 7;
  w.jobs = {{30, 2, 100e6, 0.05}, {20, 4, 200e6, 0.1}, {10, 16, 400e6, 0.2}};
  const PolicyResult s1 = run_workload(c, w, slurm_policy(), Model{}), s2 = run_workload(c, w, slurm_policy(), Model{});
  EXPECT_EQ(s1.mean_step_s, s2.mean_step_s);
  EXPECT_EQ(s1.jobs, 60);
  const PolicyResult l = run_workload(c, w, loom_policy(), Model{});
  EXPECT_LE(l.mean_step_s, s1.mean_step_s);
  EXPECT_LE(l.cross_leaf, s1.cross_leaf);
  w.jobs.push_back({1, 100, 1e6, 0});
  EXPECT_THROW(run_workload(c, w, slurm_policy(), Model{}), Error);  // 100 GPUs on a 64-GPU cluster
}

TEST(SimulateShapes, BuiltInShapesReadAsTheirNodes) {
  EXPECT_TRUE(builtin_shape("dgxa100").is_nvswitch());
  EXPECT_EQ(builtin_shape("hgxh200").gpus[0].cls, "h200");
  EXPECT_EQ(builtin_shape("dgx1v").nics.size(), 4u);
  EXPECT_EQ(builtin_shape("pcie8").gpu_paths[0][1].kind, PathKind::kPIX);
  EXPECT_THROW(builtin_shape("dgx2"), Error);
}

TEST(SimulateLoomCollectives, HierarchicalBeatsFlatWhenTheNetworkBinds) {
  // 2 nodes x 2 GPUs behind one 1 Gbit/s link each: the flat ring crosses each link with
  // 2(P-1)/P = 1.5 messages, the hierarchical one with 2(N-1)/N = 1.
  const Cluster c = cluster_of("dgxa100", 2, 1, 1);
  const Allocation a = {{0, {0, 1}}, {1, {0, 1}}};
  const double flat = allreduce(c, a, 16e6, Model{}, "flat").allreduce_s, hier = allreduce(c, a, 16e6, Model{}, "hier").allreduce_s;
  EXPECT_GT(flat / hier, 1.3);
  EXPECT_LT(flat / hier, 1.6);
  EXPECT_EQ(allreduce(c, a, 16e6, Model{}, "hier").algo, "hier");
}

namespace {

// 8 A100-40GB and 8 V100-32GB, the seed's first case.
Cluster mixed16() {
  Cluster c = cluster_of("dgxa100", 1, 8, 200);
  c.types[0].gpu_memory_gb = 40;
  NodeType v;
  v.shape = "dgx1v";
  v.topo = builtin_shape("dgx1v");
  v.nics = 4;
  v.nic_gbps = 100;
  v.gpu_memory_gb = 32;
  c.types.push_back(v);
  c.node_type.push_back(1);
  return c;
}

double states(const PlanClass& k) { return k.param_bytes + k.grad_bytes + k.optimizer_bytes; }

}  // namespace

// ZeRO's accounting for mixed-precision Adam: 16 bytes a parameter unsharded; ZeRO-1 shards the
// 12 optimizer bytes, ZeRO-2 the gradients too, ZeRO-3 everything (the issue's ~62 GB for 13B at
// ZeRO-1 on 16 GPUs).
TEST(Plan, ZeroLevelsShardTheModelStatesAsZeroSays) {
  const Cluster c = mixed16();
  PlanModel m;
  m.params = 13e9;
  m.global_batch = 16;
  const double psi = m.params;
  EXPECT_NEAR(states(plan_option(c, m, Model{}, 0, false, false).classes[0]), 16 * psi, 1);
  EXPECT_NEAR(states(plan_option(c, m, Model{}, 1, false, false).classes[0]), 4 * psi + 12 * psi / 16, 1);
  EXPECT_NEAR(states(plan_option(c, m, Model{}, 1, false, false).classes[0]) / 1e9, 61.75, 0.01);
  EXPECT_NEAR(states(plan_option(c, m, Model{}, 2, false, false).classes[1]), 2 * psi + 14 * psi / 16, 1);
  EXPECT_NEAR(states(plan_option(c, m, Model{}, 3, false, false).classes[1]), psi, 1);  // 16 psi / 16
  const PlanOption off = plan_option(c, m, Model{}, 3, false, true);
  EXPECT_EQ(off.classes[0].optimizer_bytes, 0);
  EXPECT_NEAR(off.classes[0].host_bytes, 12 * psi / 16, 1);
  EXPECT_GT(off.step_s, plan_option(c, m, Model{}, 3, false, false).step_s);  // the PCIe and the host's Adam cost time
  // Twice the GPUs: half the ZeRO-3 states.
  EXPECT_NEAR(states(plan_option(c, m, Model{}, 3, false, false, 2).classes[0]), psi / 2, 1);
}

// fp32 training (loom-train on CPUs, --precision fp32): 4 bytes of parameters, 4 of gradients and
// 8 of moments (the weights their own masters), twice the 16-bit activations; the reserve is the
// caller's.
TEST(Plan, Fp32AccountingAndTheReserve) {
  const Cluster c = mixed16();
  PlanModel m;
  m.layers = 4, m.embd = 512, m.heads = 8, m.context = 256, m.vocab = 1000, m.global_batch = 64;
  m.params = 12.0 * 4 * 512 * 512;
  const double psi = m.params;
  const PlanOption mixed = plan_option(c, m, Model{}, 0, false, false);
  m.fp32 = true;
  const PlanOption fp32 = plan_option(c, m, Model{}, 0, false, false);
  EXPECT_NEAR(states(fp32.classes[0]), 16 * psi, 1);
  EXPECT_NEAR(fp32.classes[0].param_bytes, 4 * psi, 1);
  EXPECT_NEAR(states(plan_option(c, m, Model{}, 3, false, false).classes[0]), psi + 2 * 4 * 12.0 * 512 * 512, 1);
  const double logits = 8.0 * 256 * 1000 * std::ceil(mixed.classes[0].share * 64);
  EXPECT_NEAR(fp32.classes[0].activation_bytes - logits, 2 * (mixed.classes[0].activation_bytes - logits), 1);
  m.reserve_gb = 0;
  const PlanClass bare = plan_option(c, m, Model{}, 0, false, false).classes[0];
  EXPECT_NEAR(bare.memory_bytes, states(bare) + bare.activation_bytes, 1);
  EXPECT_NEAR(fp32.classes[0].memory_bytes - bare.memory_bytes, 1073741824.0, 1);  // the default: 1 GiB
}

// Shares by speed (one GPU of each class gets its weight's part), the balanced step no slower
// than equal shares, and recompute trading activations for time.
TEST(Plan, SharesFollowSpeedAndRecomputeTradesMemoryForTime) {
  const Cluster c = mixed16();
  PlanModel m;
  m.layers = 4, m.embd = 512, m.heads = 8, m.context = 256, m.vocab = 1000, m.global_batch = 64;
  m.params = 12.0 * 4 * 512 * 512;
  const PlanOption o = plan_option(c, m, Model{}, 0, false, false);
  ASSERT_EQ(o.classes.size(), 2u);
  EXPECT_EQ(o.classes[0].cls, "a100");
  EXPECT_NEAR(8 * o.classes[0].share + 8 * o.classes[1].share, 1.0, 1e-12);
  EXPECT_NEAR(o.classes[0].share / o.classes[1].share, device_weight("a100") / device_weight("v100"), 1e-9);
  EXPECT_LT(o.step_s, o.step_s_equal);
  const PlanOption r = plan_option(c, m, Model{}, 0, true, false);
  EXPECT_LT(r.classes[0].activation_bytes, o.classes[0].activation_bytes);
  EXPECT_GT(r.compute_s, o.compute_s);
  EXPECT_NEAR(r.compute_s / o.compute_s, 8.0 / 6.0, 1e-9);
  EXPECT_EQ(plan(c, m, Model{}).size(), 16u);  // every ZeRO level x recompute x offload
}

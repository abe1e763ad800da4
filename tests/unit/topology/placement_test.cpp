// placement_test.cpp — ring search and task placement on the fixture machines and on random
// machines: NVLink rings are found, CPUs are shared fairly inside the allowed set, NICs are
// near and spread, and impossible requests are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <set>

#include "fixtures.hpp"
#include "loom/topo/emit.hpp"
#include "loom/topo/placement.hpp"

namespace loom::topo {
namespace {

using test::xml_fixture;

PlaceRequest req(int n, BindMode mode = BindMode::kRing) {
  PlaceRequest r;
  r.ntasks = n;
  r.mode = mode;
  return r;
}

std::set<int> gpus_of(const Placement& p) {
  std::set<int> s;
  for (const auto& t : p.tasks) s.insert(t.gpus.begin(), t.gpus.end());
  return s;
}

bool all_nvlink_ring(const Topology& t, const std::vector<int>& ring) {
  for (size_t i = 0; i < ring.size(); ++i) {
    int a = t.gpu_pos(ring[i]), b = t.gpu_pos(ring[(i + 1) % ring.size()]);
    if (t.gpu_paths[a][b].kind != PathKind::kNVLink) return false;
  }
  return true;
}

// The 8 four-GPU sets of a DGX-1 whose GPUs can be ringed over NVLink alone: the two quads
// and the six "faces" {i, j, i+4, j+4}.
std::set<std::set<int>> dgx1_nvlink_quads() {
  std::set<std::set<int>> s{{0, 1, 2, 3}, {4, 5, 6, 7}};
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) s.insert({i, j, i + 4, j + 4});
  return s;
}

TEST(Dgx1, FourTasksAlwaysGetAnAllNvlinkQuad) {
  Topology t = xml_fixture("dgx1-v100");
  const auto quads = dgx1_nvlink_quads();
  ASSERT_EQ(quads.size(), 8u);
  // Every allowed GPU set of 4 or more GPUs that contains such a quad.
  int checked = 0;
  for (int mask = 0; mask < 256; ++mask) {
    std::vector<int> allowed;
    for (int g = 0; g < 8; ++g)
      if (mask & (1 << g)) allowed.push_back(g);
    if (allowed.size() < 4) continue;
    bool has = std::any_of(quads.begin(), quads.end(), [&](const std::set<int>& q) {
      return std::includes(allowed.begin(), allowed.end(), q.begin(), q.end());
    });
    if (!has) continue;
    PlaceRequest r = req(4);
    r.gpus = allowed;
    r.gpus_given = true;
    Placement p = place(t, r);
    EXPECT_TRUE(quads.count(gpus_of(p))) << "mask " << mask;
    EXPECT_TRUE(all_nvlink_ring(t, p.ring.gpus)) << "mask " << mask;
    EXPECT_EQ(p.ring.bottleneck_links, 1);
    ++checked;
  }
  EXPECT_EQ(checked, 77);  // allowed sets of 4+ GPUs that contain such a quad
}

TEST(Dgx1, EightTasksRingOverDoubleLinks) {
  Topology t = xml_fixture("dgx1-v100");
  Placement p = place(t, req(8));
  ASSERT_EQ(p.ring.gpus.size(), 8u);
  EXPECT_EQ(p.ring.bottleneck_links, 2);
  for (size_t i = 0; i < 8; ++i) {
    int a = p.ring.gpus[i], b = p.ring.gpus[(i + 1) % 8];
    EXPECT_EQ(path_word(t.gpu_paths[a][b]), "NV2") << a << "->" << b;
  }
  // Ranks follow the ring; each rank has its own GPU and 10 CPUs of its GPU's socket.
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(p.tasks[i].gpus, std::vector<int>{p.ring.gpus[i]});
    EXPECT_EQ(p.tasks[i].cpus.size(), 10u);
    for (int c : p.tasks[i].cpus) EXPECT_EQ(t.numa_of_cpu(c), t.gpu_by_index(p.tasks[i].gpus[0])->numa);
  }
}

TEST(DgxA100, EachGpuGetsItsOwnNearNic) {
  Topology t = xml_fixture("dgx-a100");
  Placement p = place(t, req(8));
  std::set<std::string> nics;
  for (const auto& task : p.tasks) {
    EXPECT_EQ(task.nic_path, "PXB") << "task " << task.local_rank;
    nics.insert(task.nic);
  }
  EXPECT_EQ(nics.size(), 8u);
  EXPECT_EQ(p.ring.bottleneck_links, 12);
}

TEST(Mixed, GpusCpusAndNicsPairByLocality) {
  Topology t = xml_fixture("mixed-a100-v100");
  Placement p = place(t, req(4));
  for (const auto& task : p.tasks) {
    const Gpu* g = t.gpu_by_index(task.gpus[0]);
    EXPECT_EQ(task.numa, g->numa);
    EXPECT_EQ(task.nic, g->numa == 0 ? "mlx5_0" : "mlx5_1");
    EXPECT_EQ(task.nic_path, "PIX");
    EXPECT_EQ(task.cpus.size(), 16u);
    for (int c : task.cpus) EXPECT_EQ(t.numa_of_cpu(c), g->numa);
  }
  // The two A100s and the two V100s are adjacent in the ring (the NVLink pairs).
  const auto& r = p.ring.gpus;
  auto pos = [&](int g) { return std::find(r.begin(), r.end(), g) - r.begin(); };
  EXPECT_EQ(std::abs(pos(0) - pos(1)) % 2, 1);
  EXPECT_EQ(std::abs(pos(2) - pos(3)) % 2, 1);
  // Hyperthread siblings stay together.
  for (const auto& task : p.tasks)
    for (int c : task.cpus) {
      int sibling = c < 32 ? c + 32 : c - 32;
      EXPECT_TRUE(std::count(task.cpus.begin(), task.cpus.end(), sibling)) << c;
    }
}

TEST(Placement, StaysInsideTheAllowedCpus) {
  Topology t = xml_fixture("mixed-a100-v100");
  PlaceRequest r = req(2);
  r.gpus = {0, 2};
  r.gpus_given = true;
  r.cpus = {1, 2, 3, 40, 20, 21};
  r.cpus_given = true;
  Placement p = place(t, r);
  std::set<int> seen;
  for (const auto& task : p.tasks)
    for (int c : task.cpus) {
      EXPECT_TRUE(std::count(r.cpus.begin(), r.cpus.end(), c)) << c;
      EXPECT_TRUE(seen.insert(c).second) << "CPU " << c << " given twice";
    }
  EXPECT_EQ(seen.size(), r.cpus.size());
}

TEST(Placement, TaskWhoseNodeHasNoAllowedCpuGetsSpareOnes) {
  Topology t = xml_fixture("mixed-a100-v100");
  PlaceRequest r = req(2);
  r.gpus = {0, 2};
  r.gpus_given = true;
  r.cpus = {0, 1, 2, 3};  // all on NUMA 0
  r.cpus_given = true;
  Placement p = place(t, r);
  EXPECT_FALSE(p.tasks[0].cpus.empty());
  EXPECT_FALSE(p.tasks[1].cpus.empty());
  for (const auto& task : p.tasks)
    for (int c : task.cpus) EXPECT_LT(c, 4);
}

TEST(Placement, MoreTasksThanGpusShareGpusInRingOrder) {
  Topology t = xml_fixture("local-mixed");
  PlaceRequest r = req(8);
  r.oversubscribe = true;
  Placement p = place(t, r);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(p.tasks[i].gpus[0], p.ring.gpus[i / 2]);
}

TEST(Placement, OversubscribedTasksShareCpus) {
  Topology t = xml_fixture("local-mixed");  // CPU 0 on NUMA 0 (A100s), CPU 1 on NUMA 1 (V100s)
  PlaceRequest r = req(4);
  r.oversubscribe = true;
  Placement p = place(t, r);
  for (const auto& task : p.tasks) {
    ASSERT_EQ(task.cpus.size(), 1u);
    EXPECT_EQ(task.cpus[0], t.gpu_by_index(task.gpus[0])->numa);
  }
}

TEST(Placement, NumaModeBindsWholeNodes) {
  Topology t = xml_fixture("mixed-a100-v100");
  Placement p = place(t, req(2, BindMode::kNuma));
  EXPECT_EQ(p.tasks[0].cpus.size(), 32u);
  EXPECT_EQ(p.tasks[0].gpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(p.tasks[1].gpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(p.tasks[1].nic, "mlx5_1");
  Topology cpu = xml_fixture("cpu-only");
  Placement q = place(cpu, req(2, BindMode::kNuma));
  EXPECT_EQ(q.tasks[1].cpus.size(), 16u);
}

TEST(Placement, GpuModeKeepsIndexOrder) {
  Topology t = xml_fixture("dgx1-v100");
  Placement p = place(t, req(4, BindMode::kGpu));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(p.tasks[i].gpus[0], i);
}

TEST(Placement, NicChoice) {
  Topology t = xml_fixture("mixed-a100-v100");
  PlaceRequest r = req(4);
  r.nic = "none";
  for (const auto& task : place(t, r).tasks) EXPECT_EQ(task.nic, "");
  r.nic = "mlx5_1";
  for (const auto& task : place(t, r).tasks) EXPECT_EQ(task.nic, "mlx5_1");
}

std::string error_of(const Topology& t, const PlaceRequest& r) {
  try {
    place(t, r);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Placement, RefusesImpossibleRequests) {
  Topology t = xml_fixture("local-mixed");
  PlaceRequest r = req(4);
  EXPECT_NE(error_of(t, r).find("more tasks (4) than allowed CPUs (2)"), std::string::npos);
  EXPECT_NE(error_of(t, req(0)).find("positive"), std::string::npos);
  r = req(1);
  r.cpus_given = true;
  EXPECT_NE(error_of(t, r).find("allowed CPU set is empty"), std::string::npos);
  r = req(1);
  r.cpus = {7};
  r.cpus_given = true;
  EXPECT_NE(error_of(t, r).find("CPU 7 is not on this node"), std::string::npos);
  r = req(1);
  r.gpus = {9};
  r.gpus_given = true;
  EXPECT_NE(error_of(t, r).find("GPU 9 is not on this node"), std::string::npos);
  r = req(1);
  r.gpus_given = true;
  EXPECT_NE(error_of(t, r).find("allowed GPU set is empty"), std::string::npos);
  r = req(1);
  r.nic = "mlx5_9";
  EXPECT_NE(error_of(t, r).find("NIC 'mlx5_9'"), std::string::npos);
  EXPECT_NE(error_of(xml_fixture("cpu-only"), req(1)).find("no GPUs"), std::string::npos);
  EXPECT_NE(error_of(t, req(1)), "x");  // a valid request does not throw
  EXPECT_EQ(error_of(t, req(1)), "");
}

TEST(BindMode, ParsesAndNamesAllowedValues) {
  EXPECT_EQ(parse_bind_mode("numa"), BindMode::kNuma);
  try {
    parse_bind_mode("bogus");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ring, gpu, numa"), std::string::npos);
  }
}

// A random node: G GPUs on two NUMA nodes with random NVLink counts and NICs.
Topology random_node(std::mt19937& rng, int g) {
  std::string text;
  int nnic = static_cast<int>(rng() % 3);
  for (int i = 0; i < g; ++i) text += "\tGPU" + std::to_string(i);
  for (int k = 0; k < nnic; ++k) text += "\tNIC" + std::to_string(k);
  text += "\tCPU Affinity\tNUMA Affinity\n";
  std::vector<std::vector<std::string>> m(g, std::vector<std::string>(g));
  for (int i = 0; i < g; ++i)
    for (int j = i; j < g; ++j) {
      std::string w = "X";
      if (i != j) {
        int r = static_cast<int>(rng() % 6);
        w = r < 3 ? "NV" + std::to_string(1 + rng() % 4) : (i < g / 2) == (j < g / 2) ? "NODE" : "SYS";
      }
      m[i][j] = m[j][i] = w;
    }
  std::vector<std::vector<std::string>> n(g, std::vector<std::string>(nnic));
  for (int i = 0; i < g; ++i)
    for (int k = 0; k < nnic; ++k) n[i][k] = (k % 2 == (i < g / 2 ? 0 : 1)) ? "PIX" : "SYS";
  for (int i = 0; i < g; ++i) {
    text += "GPU" + std::to_string(i);
    for (int j = 0; j < g; ++j) text += "\t" + m[i][j];
    for (int k = 0; k < nnic; ++k) text += "\t" + n[i][k];
    text += i < g / 2 ? "\t0-7\t0\n" : "\t8-15\t1\n";
  }
  for (int k = 0; k < nnic; ++k) {
    text += "NIC" + std::to_string(k);
    for (int i = 0; i < g; ++i) text += "\t" + n[i][k];
    for (int l = 0; l < nnic; ++l) text += l == k ? "\tX" : "\tSYS";
    text += "\n";
  }
  return parse_nvidia_smi(text, "random");
}

// Exhaustive reference for the best bottleneck over all k-subsets and orders (small g only).
double brute_best_bottleneck(const Topology& t, int k) {
  const int g = static_cast<int>(t.gpus.size());
  double best = -1;
  std::vector<int> idx(g);
  for (int i = 0; i < g; ++i) idx[i] = i;
  do {
    double b = 1e300;
    for (int i = 0; i < k; ++i) b = std::min(b, t.gpu_gbps(idx[i], idx[(i + 1) % k]));
    if (k == 1) b = 0;
    best = std::max(best, b);
  } while (std::next_permutation(idx.begin(), idx.end()));
  return best;
}

TEST(RandomNodes, PlacementInvariantsAndOptimalRings) {
  std::mt19937 rng(20261129);
  for (int trial = 0; trial < 60; ++trial) {
    int g = 2 + trial % 6;  // 2..7 GPUs
    Topology t = random_node(rng, g);
    int k = 1 + static_cast<int>(rng() % g);
    Placement p = place(t, req(k));
    ASSERT_EQ(p.tasks.size(), static_cast<size_t>(k));
    EXPECT_EQ(gpus_of(p).size(), static_cast<size_t>(k)) << "trial " << trial;
    std::set<int> cpus;
    for (const auto& task : p.tasks) {
      ASSERT_FALSE(task.cpus.empty());
      for (int c : task.cpus) EXPECT_TRUE(cpus.insert(c).second) << "CPU shared without oversubscription";
    }
    if (k >= 2) {
      EXPECT_DOUBLE_EQ(p.ring.bottleneck_gbps, brute_best_bottleneck(t, k)) << "trial " << trial;
    }
  }
}

TEST(RandomNodes, LargeNodesUseTheHeuristicAndStayValid) {
  std::mt19937 rng(7);
  Topology t = random_node(rng, 16);
  Placement p = place(t, req(16));
  EXPECT_EQ(gpus_of(p).size(), 16u);
  Placement q = place(t, req(10));
  EXPECT_EQ(gpus_of(q).size(), 10u);
}

TEST(Speed, EightGpuPlacementIsFast) {
  // A sanity bound far above the measured figure (tests/bench/topo-place.sh measures it).
  Topology t = xml_fixture("dgx1-v100");
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) place(t, req(4));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / 10;
  RecordProperty("place_ms", std::to_string(ms));
  EXPECT_LT(ms, 200.0);
}

}  // namespace
}  // namespace loom::topo

// spank_test.cpp — the plugin's pure parts: strict option and plugstack parsing, Slurm's
// abstract core ids to OS CPUs, and the per-task plan (CPU sets and Contract 2 environment).
#include <chrono>
#include <gtest/gtest.h>

#include <map>

#include "config.hpp"
#include "loom/topo/readers.hpp"
#include "step_plan.hpp"

namespace loom::spank {
namespace {

using loom::topo::Topology;

Topology fixture(const std::string& m) {
  return loom::topo::read_hwloc_xml_file(std::string(LOOM_TOPO_FIXTURES) + "/" + m + ".xml");
}

std::map<std::string, std::string> env_of(const TaskPlan& t) { return {t.env.begin(), t.env.end()}; }

TEST(Options, BindValues) {
  Bind b = Bind::kUnset;
  bool help = false;
  EXPECT_EQ(parse_bind("ring", &b, &help), "");
  EXPECT_EQ(b, Bind::kRing);
  EXPECT_EQ(parse_bind("none", &b, &help), "");
  EXPECT_EQ(b, Bind::kNone);
  EXPECT_EQ(parse_bind("help", &b, &help), "");
  EXPECT_TRUE(help);
  std::string err = parse_bind("bogus", &b, &help);
  EXPECT_NE(err.find("--loom-bind: unknown value 'bogus' (allowed: ring, gpu, numa, none, help)"), std::string::npos);
  EXPECT_NE(parse_bind("", &b, &help), "");
  // Idempotent: the same value twice gives the same state.
  EXPECT_EQ(parse_bind("gpu", &b, &help), "");
  EXPECT_EQ(parse_bind("gpu", &b, &help), "");
  EXPECT_EQ(b, Bind::kGpu);
}

TEST(Options, NicValues) {
  std::string nic;
  EXPECT_EQ(parse_nic("mlx5_0", &nic), "");
  EXPECT_EQ(nic, "mlx5_0");
  for (const char* bad : {"", "a b", "../../etc", "x;rm", "$(id)", "0123456789012345678901234567890123"})
    EXPECT_NE(parse_nic(bad, &nic), "") << bad;
}

TEST(Plugstack, ParsesStrictly) {
  PluginConfig c;
  EXPECT_EQ(parse_plugstack_args({"topology=/etc/loom/t.xml", "default_bind=ring", "strict=1", "export=0",
                                  "export_dir=/var/tmp"},
                                 &c),
            "");
  EXPECT_EQ(c.topology, "/etc/loom/t.xml");
  EXPECT_EQ(c.default_bind, Bind::kRing);
  EXPECT_TRUE(c.strict);
  EXPECT_FALSE(c.export_files);
  EXPECT_EQ(c.export_dir, "/var/tmp");
  PluginConfig d;
  EXPECT_EQ(parse_plugstack_args({}, &d), "");
  EXPECT_EQ(d.default_bind, Bind::kNone);
  EXPECT_FALSE(d.strict);
  EXPECT_TRUE(d.export_files);
  struct Bad {
    const char* arg;
    const char* expect;
  } bad[] = {{"colour=blue", "unknown key 'colour'"},  {"strict=yes", "strict=yes: expected 0 or 1"},
             {"default_bind=fast", "default_bind=fast"}, {"topology=relative.xml", "expected an absolute path"},
             {"export_dir=/a/../b", "absolute path"},    {"novalue", "not key=value"},
             {"default_bind=help", "default_bind=help"}};
  for (const auto& b : bad) {
    PluginConfig x;
    std::string err = parse_plugstack_args({b.arg}, &x);
    EXPECT_NE(err.find(b.expect), std::string::npos) << b.arg << ": " << err;
  }
}

TEST(CpuIds, SlurmCoresAreNotOsCpus) {
  Topology mixed = fixture("mixed-a100-v100");  // core k has PUs k and k+32
  EXPECT_EQ(slurm_cores_to_cpus(mixed, "0-1"), (std::vector<int>{0, 1, 32, 33}));
  EXPECT_EQ(slurm_cores_to_cpus(mixed, "16"), (std::vector<int>{16, 48}));
  Topology a100 = fixture("dgx-a100");  // core 20 is on NUMA 1: PUs 20 and 148
  EXPECT_EQ(slurm_cores_to_cpus(a100, "20"), (std::vector<int>{20, 148}));
  EXPECT_THROW(slurm_cores_to_cpus(mixed, "64"), loom::topo::Error);
  EXPECT_THROW(slurm_cores_to_cpus(mixed, "0-x"), loom::topo::Error);
}

TEST(Plan, FourTasksOnTheMixedTwoCpuNode) {
  Topology t = fixture("local-mixed");
  StepInfo s;
  s.local_tasks = 4;
  s.step_gpus = {0, 1, 2, 3};
  s.cuda_ids = {"0", "1", "2", "3"};
  s.alloc_cores = "0-1";
  s.bind = Bind::kRing;
  StepPlan p = plan_step(t, s);
  ASSERT_EQ(p.tasks.size(), 4u);
  std::map<std::string, int> gpus;
  for (const auto& task : p.tasks) {
    auto env = env_of(task);
    ++gpus[env["LOOM_GPU"]];
    EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"].substr(0, 1), env["LOOM_GPU"]);  // own GPU first
    EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"].size(), 7u);                      // and all 4 visible
    int g = std::stoi(env["LOOM_GPU"]);
    EXPECT_EQ(env["LOOM_GPU_CLASS"], g < 2 ? "a100" : "v100");
    EXPECT_EQ(env["LOOM_DEVICE_WEIGHT"], g < 2 ? "312" : "125");
    EXPECT_EQ(env["LOOM_DEVICE_MEMORY"], g < 2 ? "42949672960" : "34359738368");  // 40 and 32 GiB
    EXPECT_EQ(env["LOOM_NIC"], g < 2 ? "mlx5_0" : "mlx5_1");
    EXPECT_EQ(env["NCCL_IB_HCA"], "=" + env["LOOM_NIC"]);
    EXPECT_EQ(env["UCX_NET_DEVICES"], env["LOOM_NIC"] + ":1");
    EXPECT_EQ(task.cpus, std::vector<int>{g < 2 ? 0 : 1});  // the CPU of its GPU's NUMA node
    EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(env["OMP_PLACES"], "{" + std::to_string(task.cpus[0]) + "}");
    EXPECT_EQ(env["LOOM_BIND"], "ring");
    EXPECT_EQ(env["LOOM_RING"], "0,1,2,3");
  }
  EXPECT_EQ(gpus.size(), 4u);
}

TEST(Plan, RingNeighboursFollowTheOwnGpu) {
  Topology t = fixture("dgx1-v100");
  StepInfo s;
  s.local_tasks = 8;
  for (int g = 0; g < 8; ++g) s.step_gpus.push_back(g), s.cuda_ids.push_back(std::to_string(g));
  s.alloc_cores = "0-39";
  StepPlan p = plan_step(t, s);
  auto e = env_of(p.tasks[0]);
  EXPECT_EQ(e["LOOM_RING"], "0,3,2,1,5,6,7,4");
  EXPECT_EQ(e["CUDA_VISIBLE_DEVICES"], "0,3,2,1,5,6,7,4");
  auto e2 = env_of(p.tasks[2]);  // rank 2 has GPU 2: then 1, 5, ... around the ring
  EXPECT_EQ(e2["CUDA_VISIBLE_DEVICES"], "2,1,5,6,7,4,0,3");
  EXPECT_EQ(p.tasks[0].cpus.size(), 10u);  // 5 cores x 2 threads of GPU 0's socket
}

TEST(Plan, ConstrainedDevicesKeepCudaIds) {
  Topology t = fixture("local-mixed");
  StepInfo s;
  s.local_tasks = 2;
  s.step_gpus = {2, 3};
  s.cuda_ids = {"0", "1"};  // ConstrainDevices=yes renumbers what the task sees
  s.alloc_cores = "1";
  StepPlan p = plan_step(t, s);
  auto e = env_of(p.tasks[1]);
  EXPECT_EQ(e["LOOM_GPU"], "3");
  EXPECT_EQ(e["CUDA_VISIBLE_DEVICES"], "1,0");
}

TEST(Plan, NoGpusFallsBackToNuma) {
  Topology t = fixture("local-mixed");
  StepInfo s;
  s.local_tasks = 2;
  s.alloc_cores = "0-1";
  StepPlan p = plan_step(t, s);
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_NE(p.notes[0].find("no GPUs"), std::string::npos);
  EXPECT_EQ(env_of(p.tasks[0])["LOOM_BIND"], "numa");
  EXPECT_EQ(env_of(p.tasks[0])["LOOM_DEVICE_WEIGHT"], "1");
  EXPECT_EQ(env_of(p.tasks[0]).count("CUDA_VISIBLE_DEVICES"), 0u);
}

TEST(Plan, NoneSetsNothingAndBadInputIsRefused) {
  Topology t = fixture("local-mixed");
  StepInfo s;
  s.local_tasks = 2;
  s.bind = Bind::kNone;
  EXPECT_TRUE(plan_step(t, s).tasks.empty());
  s.bind = Bind::kRing;
  s.step_gpus = {7};
  EXPECT_THROW(plan_step(t, s), loom::topo::Error);
  s.step_gpus = {0};
  s.alloc_cores = "9";
  EXPECT_THROW(plan_step(t, s), loom::topo::Error);
  EXPECT_THROW(parse_index_list("1,a", "SLURM_STEP_GPUS"), loom::topo::Error);
}

// The job's environment is the user's to forge: a few KB of ranges must not expand to millions
// of entries inside root's slurmstepd, and what it names must be this node's GPUs.
TEST(Plan, ForgedGpuListsAreBoundedAndChecked) {
  std::string ranges;
  for (int i = 0; ranges.size() < 4000; ++i) ranges += (i ? "," : "") + std::to_string(i * 70000) + "-" + std::to_string(i * 70000 + 65535);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(parse_index_list(ranges, "SLURM_STEP_GPUS"), loom::topo::Error);
  std::string repeats;
  while (repeats.size() < 4000) repeats += "0-1023,";
  repeats += "0";
  EXPECT_THROW(parse_index_list(repeats, "SLURM_STEP_GPUS"), loom::topo::Error);  // repeats count too
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  Topology t = fixture("local-mixed");
  StepInfo s;
  s.local_tasks = 1;
  s.bind = Bind::kRing;
  s.step_gpus = {0, 1, 2, 3, 0};  // more GPUs than the node has
  EXPECT_THROW(plan_step(t, s), loom::topo::Error);
  s.step_gpus = {0};
  s.cuda_ids = {"0", "1", "2"};  // more CUDA ids than step GPUs
  EXPECT_THROW(plan_step(t, s), loom::topo::Error);
}

}  // namespace
}  // namespace loom::spank

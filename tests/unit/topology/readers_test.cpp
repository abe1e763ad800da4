// readers_test.cpp — the hwloc XML and nvidia-smi readers: both describe each fixture machine
// the same way, and every malformed input is refused with an error that names the problem.
#include <gtest/gtest.h>

#include <cstdio>
#include <algorithm>
#include <fstream>
#include <functional>

#include "fixtures.hpp"
#include "loom/topo/emit.hpp"

namespace loom::topo {
namespace {

using test::fixture;
using test::nvsmi_fixture;
using test::xml_fixture;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PathWords, RoundTripAndRejectUnknown) {
  for (const char* w : {"X", "NV1", "NV12", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"})
    EXPECT_EQ(path_word(parse_path_word(w)), w);
  EXPECT_EQ(path_word(parse_path_word("SOC")), "SYS");
  for (const char* bad : {"NV", "NV0", "NVX", "FOO", "", "nv2", "NV99999"})
    EXPECT_NE(error_of([&] { parse_path_word(bad); }), "") << bad;
}

TEST(CpuLists, ParseAndFormat) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(format_cpu_list({11, 0, 1, 2, 3, 8, 10, 3}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({}), "");
  for (const char* bad : {"", "a", "3-1", "1,,2", "1-", "-1", "0-99999999", "1,"})
    EXPECT_NE(error_of([&] { parse_cpu_list(bad); }), "") << bad;
}

TEST(GpuClass, FromMarketingNames) {
  EXPECT_EQ(gpu_class_from_name("NVIDIA A100-SXM4-40GB"), "a100");
  EXPECT_EQ(gpu_class_from_name("Tesla V100-SXM2-32GB"), "v100");
  EXPECT_EQ(gpu_class_from_name("NVIDIA H100 80GB HBM3"), "h100");
  EXPECT_EQ(gpu_class_from_name("NVIDIA H200"), "h200");
  EXPECT_EQ(gpu_class_from_name("Tesla P100-PCIE-16GB"), "p100");
  EXPECT_EQ(gpu_class_from_name("NVIDIA GeForce RTX 3090"), "rtx3090");
  EXPECT_EQ(gpu_class_from_name(""), "gpu");
}

class BothReaders : public ::testing::TestWithParam<std::string> {};

// The XML is generated from a machine description; the nvidia-smi text was written by hand.
TEST_P(BothReaders, DescribeTheSameMachine) {
  Topology x = xml_fixture(GetParam());
  Topology n = nvsmi_fixture(GetParam());
  ASSERT_EQ(x.gpus.size(), n.gpus.size());
  ASSERT_EQ(x.nics.size(), n.nics.size());
  for (size_t i = 0; i < x.gpus.size(); ++i) {
    EXPECT_EQ(x.gpus[i].numa, n.gpus[i].numa) << "GPU" << i;
    EXPECT_EQ(x.gpus[i].cpus, n.gpus[i].cpus) << "GPU" << i;
    for (size_t j = 0; j < x.gpus.size(); ++j)
      EXPECT_EQ(path_word(x.gpu_paths[i][j]), path_word(n.gpu_paths[i][j])) << "GPU" << i << "-GPU" << j;
    for (size_t k = 0; k < x.nics.size(); ++k)
      EXPECT_EQ(path_word(x.gpu_nic_paths[i][k]), path_word(n.gpu_nic_paths[i][k])) << "GPU" << i << "-NIC" << k;
  }
  for (size_t k = 0; k < x.nics.size(); ++k) {
    EXPECT_EQ(x.nics[k].name, n.nics[k].name);
    EXPECT_EQ(x.nics[k].numa, n.nics[k].numa);
  }
  // nvidia-smi only knows the NUMA nodes that hold GPUs; those must agree.
  for (const auto& node : n.numa_nodes) {
    auto it = std::find_if(x.numa_nodes.begin(), x.numa_nodes.end(), [&](const NumaNode& o) { return o.id == node.id; });
    ASSERT_NE(it, x.numa_nodes.end()) << "NUMA " << node.id;
    EXPECT_EQ(it->cpus, node.cpus) << "NUMA " << node.id;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BothReaders, ::testing::Values("dgx1-v100", "dgx-a100", "mixed-a100-v100"));

TEST(HwlocXml, ModelOfTheMixedNode) {
  Topology t = xml_fixture("mixed-a100-v100");
  EXPECT_EQ(t.host, "mixed01");
  ASSERT_EQ(t.gpus.size(), 4u);
  EXPECT_EQ(t.gpus[0].cls, "a100");
  EXPECT_EQ(t.gpus[0].name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(t.gpus[0].memory_mb, 40960u);
  EXPECT_EQ(t.gpus[2].cls, "v100");
  EXPECT_EQ(t.gpus[2].numa, 1);
  EXPECT_FALSE(t.gpus[0].pci.empty());
  EXPECT_EQ(t.sockets, 2);
  EXPECT_EQ(t.threads_per_core, 2);
  EXPECT_EQ(t.total_cpus(), 64);
  ASSERT_EQ(t.numa_nodes.size(), 2u);
  EXPECT_EQ(t.numa_nodes[0].cores.size(), 16u);
  EXPECT_EQ(t.numa_nodes[0].cores[0].pus, (std::vector<int>{0, 32}));
}

TEST(HwlocXml, CpuOnlyNodeHasNoGpus) {
  Topology t = xml_fixture("cpu-only");
  EXPECT_TRUE(t.gpus.empty());
  EXPECT_EQ(t.nics.size(), 1u);
  EXPECT_EQ(t.total_cpus(), 16);
}

TEST(HwlocXml, ExportReadsBackTheSame) {
  for (const char* m : {"dgx1-v100", "dgx-a100", "local-mixed"}) {
    Topology a = xml_fixture(m);
    Topology b = read_hwloc_xml_buffer(export_hwloc_xml(a), "exported");
    EXPECT_EQ(emit_show(a), emit_show(b)) << m;
  }
}

TEST(NvidiaSmi, ShowOutputReadsBack) {
  for (const char* m : {"dgx1-v100", "dgx-a100", "mixed-a100-v100", "local-mixed"}) {
    Topology a = xml_fixture(m);
    Topology b = parse_nvidia_smi(emit_show(a), "show");
    // nvidia-smi text carries no PCI ids and only the NUMA nodes that hold GPUs.
    auto matrix = [](const Topology& t) { std::string s = emit_show(t); return s.substr(0, s.find("\nGPU 0:")); };
    EXPECT_EQ(matrix(a), matrix(b)) << m;
    ASSERT_EQ(a.gpus.size(), b.gpus.size());
    for (size_t i = 0; i < a.gpus.size(); ++i) {
      EXPECT_EQ(a.gpus[i].name, b.gpus[i].name);
      EXPECT_EQ(a.gpus[i].cls, b.gpus[i].cls);
    }
  }
}

TEST(NvidiaSmi, NamesFromDashL) {
  Topology t = nvsmi_fixture("mixed-a100-v100");
  EXPECT_EQ(t.gpus[0].name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(t.gpus[3].cls, "v100");
  Topology d = nvsmi_fixture("dgx-a100");  // no -L lines: class unknown
  EXPECT_EQ(d.gpus[0].cls, "gpu");
}

struct BadText {
  const char* what;
  const char* text;
  const char* expect;  // a piece of the error message
};

TEST(NvidiaSmi, RefusesMalformedText) {
  const BadText cases[] = {
      {"empty", "", "no 'nvidia-smi topo -m' matrix"},
      {"no GPUs", "\tNIC0\tCPU Affinity\nNIC0\t X \t\n", "no 'nvidia-smi topo -m' matrix"},
      {"unknown word", "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV2\t0-1\nGPU1\tFOO\t X \t0-1\n", "unknown path word 'FOO'"},
      {"asymmetric", "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV2\t0-1\nGPU1\tNV1\t X \t0-1\n", "inconsistent matrix"},
      {"short row", "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \nGPU1\tNV1\t X \t0-1\n", "has 1 entries for 2 columns"},
      {"missing row", "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV1\t0-1\n", "no row for GPU1"},
      {"duplicate row", "\tGPU0\tCPU Affinity\nGPU0\t X \t0\nGPU0\t X \t0\n", "appears twice"},
      {"X off diagonal", "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \t X \t0\nGPU1\t X \t X \t0\n", "diagonal"},
      {"GPU order", "\tGPU0\tGPU2\tCPU Affinity\nGPU0\t X \tNV1\t0\nGPU2\tNV1\t X \t0\n", "in order"},
      {"no CPU column", "\tGPU0\tGPU1\nGPU0\t X \tNV1\nGPU1\tNV1\t X \n", "CPU Affinity"},
      {"bad affinity", "\tGPU0\tCPU Affinity\nGPU0\t X \t0-z\n", "bad CPU"},
      {"unknown row", "\tGPU0\tCPU Affinity\nGPU0\t X \t0\nGPU7\t X \t0\n", "names no column"},
      {"NVLink to NIC", "\tGPU0\tNIC0\tCPU Affinity\nGPU0\t X \tNV1\t0\nNIC0\tNV1\t X \n", "NIC"},
  };
  for (const auto& c : cases) {
    std::string err = error_of([&] { parse_nvidia_smi(c.text, "t.txt"); });
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.what << ": got '" << err << "'";
    EXPECT_EQ(err.find('\n'), std::string::npos) << c.what << ": error is not one line";
  }
}

TEST(HwlocXml, RefusesMalformedXml) {
  std::string good = read_small_file(fixture("dgx1-v100.xml"));
  EXPECT_NE(error_of([&] { read_hwloc_xml_buffer("<topology><object", "bad"); }).find("not valid hwloc XML"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_hwloc_xml_buffer(good.substr(0, good.size() / 2), "half"); }).find("half"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_hwloc_xml_buffer("", "empty"); }).find("empty"), std::string::npos);
  EXPECT_NE(error_of([&] { read_hwloc_xml_buffer("not xml at all", "text"); }), "");
  EXPECT_NE(error_of([&] { read_hwloc_xml_file("/nonexistent/topology.xml"); }).find("No such file"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_hwloc_xml_file("/"); }).find("not a regular file"), std::string::npos);
  EXPECT_NE(error_of([&] { read_topology_file("/nonexistent"); }), "");
}

// Inputs that crash hwloc 2.9's own parser: refused with an error, the process survives.
TEST(HwlocXml, SurvivesInputsThatCrashHwloc) {
  for (const char* f : {"crashers/hwloc-2.9-segv-doctype.xml", "crashers/hwloc-2.9-segv-bitmap.xml"}) {
    std::string err = error_of([&] { read_hwloc_xml_file(fixture(f)); });
    EXPECT_NE(err.find("not valid hwloc XML"), std::string::npos) << f << ": " << err;
  }
}

TEST(ReadTopologyFile, TellsFormatsApart) {
  EXPECT_EQ(read_topology_file(fixture("mixed-a100-v100.xml")).source.rfind("hwloc-xml:", 0), 0u);
  EXPECT_EQ(read_topology_file(fixture("mixed-a100-v100.nvsmi.txt")).source.rfind("nvidia-smi:", 0), 0u);
}

TEST(Live, DiscoversThisNode) {
  std::string notes;
  Topology t = discover(&notes);
  EXPECT_GE(t.total_cpus(), 1);
  EXPECT_FALSE(t.numa_nodes.empty());
  if (t.gpus.empty()) {
    EXPECT_NE(notes, "") << "no GPUs and no note saying why";
  }
  Topology again = read_hwloc_xml_buffer(export_hwloc_xml(t), "live-export");
  EXPECT_EQ(again.all_cpus(), t.all_cpus());
  EXPECT_EQ(again.gpus.size(), t.gpus.size());
}

TEST(CpuList, ExpansionIsBounded) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("0-65535").size(), 65536u);
  EXPECT_THROW(parse_cpu_list("0-65536"), Error);
  EXPECT_THROW(parse_cpu_list("0-40000,40001-80000"), Error);
  EXPECT_THROW(parse_cpu_list("0-40000,0-40000"), Error);  // repeats count as they expand
}

TEST(NvidiaSmi, HyperthreadSiblingsAreOneCore) {
  Topology t = read_nvidia_smi_file(std::string(LOOM_TOPO_FIXTURES) + "/dgx1-v100.nvsmi.txt");
  EXPECT_EQ(t.threads_per_core, 2);
  ASSERT_EQ(t.numa_nodes.size(), 2u);
  ASSERT_EQ(t.numa_nodes[1].cores.size(), 20u);
  EXPECT_EQ(t.numa_nodes[1].cores[0].logical, 20);  // Slurm's core 20: CPUs 20 and 60
  EXPECT_EQ(t.numa_nodes[1].cores[0].pus, (std::vector<int>{20, 60}));
}

// The JSON of `export --as json` reads back into the same topology (the plugin's cache can be
// JSON when the node's topology came from nvidia-smi text), and a bad file is one Error.
TEST(JsonReader, ExportReadsBackToTheSameTopology) {
  for (const char* m : {"dgx1-v100.xml", "dgx-a100.xml", "mixed-a100-v100.nvsmi.txt", "cpu-only.xml"}) {
    const Topology t = read_topology_file(std::string(LOOM_TOPO_FIXTURES) + "/" + m);
    const std::string once = emit_json(t);
    const Topology back = parse_topology_json(once, m);
    std::string twice = emit_json(back);
    // The source names the reader; everything else is the same.
    const auto src = [](const std::string& s) { return s.substr(0, s.find("\"source\"")) + s.substr(s.find(",\"sockets\"")); };
    EXPECT_EQ(src(once), src(twice)) << m;
    ASSERT_EQ(back.numa_nodes.size(), t.numa_nodes.size());
    EXPECT_EQ(back.numa_nodes[0].cores.size(), t.numa_nodes[0].cores.size()) << m;
  }
}

TEST(JsonReader, RefusesBadFilesWithOneError) {
  const std::string good = emit_json(read_topology_file(std::string(LOOM_TOPO_FIXTURES) + "/dgx1-v100.xml"));
  auto broken = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const auto pos = s.find(from);
    EXPECT_NE(pos, std::string::npos) << from;
    return s.replace(pos, from.size(), to);
  };
  for (const std::string& bad :
       {std::string("{\"gpus\": [1, 2"), std::string("[]"), std::string("{}"), broken("\"NV1\"", "\"NV9X\""),
        broken("\"gpu_paths\":[[", "\"gpu_paths\":[[\"X\","), broken("\"index\":0", "\"index\":\"zero\""),
        broken("\"nics\":[", "\"nics\":[7,")}) {
    EXPECT_THROW(parse_topology_json(bad, "bad.json"), Error) << bad.substr(0, 80);
  }
}

}  // namespace
}  // namespace loom::topo


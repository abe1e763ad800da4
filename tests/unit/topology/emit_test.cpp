// emit_test.cpp — gres.conf, slurm.conf, NCCL XML and JSON output of the fixture machines.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fixtures.hpp"
#include "loom/topo/emit.hpp"

namespace loom::topo {
namespace {

using test::nvsmi_fixture;
using test::xml_fixture;

TEST(Gres, MixedNode) {
  Topology t = xml_fixture("mixed-a100-v100");
  std::string g = emit_gres(t, "/dev");
  EXPECT_NE(g.find("Name=gpu Type=a100 File=/dev/nvidia0 Cores=0-15 Links=-1,12,0,0\n"), std::string::npos) << g;
  EXPECT_NE(g.find("Name=gpu Type=v100 File=/dev/nvidia3 Cores=16-31 Links=0,0,2,-1\n"), std::string::npos) << g;
  EXPECT_THROW(emit_gres(xml_fixture("cpu-only"), "/dev"), Error);
}

TEST(Gres, JsonIsValid) {
  auto j = nlohmann::json::parse(emit_gres_json(xml_fixture("dgx1-v100"), "/tmp/dev"));
  ASSERT_EQ(j["gres"].size(), 8u);
  EXPECT_EQ(j["gres"][7]["file"], "/tmp/dev/nvidia7");
  EXPECT_EQ(j["gres"][0]["links"], "-1,1,1,2,2,0,0,0");
}

TEST(NodeConf, MixedNodeShowsBothClasses) {
  std::string line = emit_node_conf(xml_fixture("mixed-a100-v100"), "mixed01");
  EXPECT_NE(line.find("Gres=gpu:a100:2,gpu:v100:2"), std::string::npos) << line;
  EXPECT_NE(line.find("CPUs=64 Boards=1 SocketsPerBoard=2 CoresPerSocket=16 ThreadsPerCore=2"), std::string::npos);
  EXPECT_NE(line.find("Features=a100,v100,nvlink,rdma"), std::string::npos);
  std::string dgx = emit_node_conf(xml_fixture("dgx-a100"), "dgx");
  EXPECT_NE(dgx.find("Features=a100,nvlink,nvswitch,rdma"), std::string::npos) << dgx;
  std::string cpu = emit_node_conf(xml_fixture("cpu-only"), "c");
  EXPECT_EQ(cpu.find("Gres="), std::string::npos);
  auto j = nlohmann::json::parse(emit_node_conf_json(xml_fixture("mixed-a100-v100"), "m"));
  EXPECT_EQ(j["gres"], "gpu:a100:2,gpu:v100:2");
}

TEST(Json, ExportHasTheContractFields) {
  auto j = nlohmann::json::parse(emit_json(xml_fixture("dgx-a100")));
  for (const char* k : {"host", "numa_nodes", "gpus", "nics", "gpu_paths", "nvlinks", "gpu_nic_paths"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["gpus"][0]["class"], "a100");
  EXPECT_EQ(j["gpus"][0]["numa"], 3);
  EXPECT_EQ(j["gpu_paths"][0][1], "NV12");
  EXPECT_EQ(j["nvlinks"][0][1], 12);
  EXPECT_EQ(j["gpu_nic_paths"][0][0], "PXB");
  for (const char* k : {"index", "name", "class", "pci", "numa", "cpus", "memory_mb"})
    EXPECT_TRUE(j["gpus"][0].contains(k)) << k;
}

TEST(Json, PlacementHasTheContractFields) {
  PlaceRequest r;
  r.ntasks = 2;
  auto j = nlohmann::json::parse(emit_placement_json(place(xml_fixture("mixed-a100-v100"), r)));
  EXPECT_TRUE(j["ring"].is_array());
  EXPECT_TRUE(j["ring_bottleneck_links"].is_number_integer());
  EXPECT_TRUE(j["ring_bottleneck_gbps"].is_number());
  EXPECT_EQ(j["tasks"][0]["nic_path"], "PIX");
  EXPECT_EQ(j["tasks"][0]["local_rank"], 0);
}

// A hostname and a GPU name that are not UTF-8, with quotes and control bytes: every JSON output
// still parses, the bad bytes replaced and the rest kept.
TEST(Json, NamesThatAreNotUtf8StayValidJson) {
  Topology t = xml_fixture("mixed-a100-v100");
  t.host = std::string("n\xff\xfe\"1\n");
  t.gpus[0].name = std::string("A100 \xc3\x28\x01");
  auto j = nlohmann::json::parse(emit_json(t));
  EXPECT_EQ(j["host"], "n\xef\xbf\xbd\xef\xbf\xbd\"1\n");
  EXPECT_EQ(j["gpus"][0]["name"].get<std::string>().substr(0, 5), "A100 ");
  auto c = nlohmann::json::parse(emit_node_conf_json(t, std::string("h\x80")));
  EXPECT_EQ(c["node_name"], "h\xef\xbf\xbd");
  EXPECT_NO_THROW(nlohmann::json::parse(emit_gres_json(t, "/dev")));
}

TEST(NcclXml, NamesGpusLinksAndNics) {
  std::string x = emit_nccl_xml(xml_fixture("dgx1-v100"));
  EXPECT_NE(x.find("<system version=\"1\">"), std::string::npos);
  EXPECT_NE(x.find("sm=\"70\""), std::string::npos);
  EXPECT_NE(x.find("<nvlink target=\"0000:04:00.0\" count=\"1\""), std::string::npos) << x;
  EXPECT_NE(x.find("<net name=\"mlx5_3\" dev=\"3\""), std::string::npos);
  EXPECT_NE(x.find("affinity=\"0fffff00,000fffff\""), std::string::npos) << x;
  EXPECT_THROW(emit_nccl_xml(nvsmi_fixture("dgx1-v100")), Error);  // no PCI ids in nvidia-smi text
}

}  // namespace
}  // namespace loom::topo

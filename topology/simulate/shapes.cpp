// shapes.cpp — the built-in node shapes of `loom-topo simulate`, written as the
// `nvidia-smi topo -m` (+ `-L`) text such a node prints and read by the same reader as a real one.
#include <functional>
#include <string>

#include "loom/topo/readers.hpp"
#include "simulate.hpp"

namespace loom::topo::sim {
namespace {

struct ShapeText {
  int gpus = 8, nics = 0;
  std::string gpu_name;
  std::function<std::string(int, int)> gpu_path;  // word between GPUs i != j
  std::function<std::string(int, int)> nic_path;  // word between GPU g and NIC n
  std::function<std::string(int)> affinity;       // CPU list of GPU g
};

std::string render(const ShapeText& s) {
  std::string t;
  for (int g = 0; g < s.gpus; ++g) t += "\tGPU" + std::to_string(g);
  for (int n = 0; n < s.nics; ++n) t += "\tmlx5_" + std::to_string(n);
  t += "\tCPU Affinity\n";
  for (int g = 0; g < s.gpus; ++g) {
    t += "GPU" + std::to_string(g);
    for (int h = 0; h < s.gpus; ++h) t += "\t" + (g == h ? std::string(" X ") : s.gpu_path(g, h));
    for (int n = 0; n < s.nics; ++n) t += "\t" + s.nic_path(g, n);
    t += "\t" + s.affinity(g) + "\n";
  }
  for (int n = 0; n < s.nics; ++n) {
    t += "mlx5_" + std::to_string(n);
    for (int g = 0; g < s.gpus; ++g) t += "\t" + s.nic_path(g, n);
    for (int m = 0; m < s.nics; ++m)  // NICs of one socket meet at NODE, the others at SYS
      t += "\t" + std::string(m == n ? " X " : m * 2 / s.nics == n * 2 / s.nics ? "NODE" : "SYS");
    t += "\n";
  }
  t += "\n";
  for (int g = 0; g < s.gpus; ++g) t += "GPU " + std::to_string(g) + ": " + s.gpu_name + " (UUID: GPU-" + std::to_string(g) + ")\n";
  return t;
}

// Two sockets of four GPUs; `same` for GPUs of one socket.
std::string socket_word(int g, int h, const char* same) { return g / 4 == h / 4 ? same : "SYS"; }
std::string half_affinity(int g, int cpus) {
  const int a = g / 4 * cpus;
  return std::to_string(a) + "-" + std::to_string(a + cpus - 1);
}

// DGX-1 with V100: the hybrid cube-mesh of NVLink2 (six links a GPU), four EDR NICs, each on the
// PCIe switch of two GPUs.
const char* kDgx1v[8][8] = {
    {" X ", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"}, {"NV1", " X ", "NV2", "NV1", "SYS", "NV2", "SYS", "SYS"},
    {"NV1", "NV2", " X ", "NV2", "SYS", "SYS", "NV1", "SYS"}, {"NV2", "NV1", "NV2", " X ", "SYS", "SYS", "SYS", "NV1"},
    {"NV2", "SYS", "SYS", "SYS", " X ", "NV1", "NV1", "NV2"}, {"SYS", "NV2", "SYS", "SYS", "NV1", " X ", "NV2", "NV1"},
    {"SYS", "SYS", "NV1", "SYS", "NV1", "NV2", " X ", "NV2"}, {"SYS", "SYS", "SYS", "NV1", "NV2", "NV1", "NV2", " X "}};

ShapeText shape_text(const std::string& name) {
  ShapeText s;
  if (name == "dgx1v") {
    s.nics = 4;
    s.gpu_name = "Tesla V100-SXM2-32GB";
    s.gpu_path = [](int g, int h) { return std::string(kDgx1v[g][h]); };
    s.nic_path = [](int g, int n) { return g / 2 == n ? "PIX" : g / 4 == n / 2 ? "NODE" : "SYS"; };
    s.affinity = [](int g) { return half_affinity(g, 20); };
  } else if (name == "dgxa100" || name == "hgxh100" || name == "hgxh200") {
    // NVSwitch: every GPU pair NV12 (A100, NVLink3) or NV18 (H100/H200, NVLink4); one NIC per GPU.
    const std::string nv = name == "dgxa100" ? "NV12" : "NV18";
    s.nics = 8;
    s.gpu_name = name == "dgxa100" ? "NVIDIA A100-SXM4-80GB" : name == "hgxh100" ? "NVIDIA H100 80GB HBM3" : "NVIDIA H200";
    s.gpu_path = [nv](int, int) { return nv; };
    s.nic_path = [](int g, int n) { return g == n ? "PXB" : socket_word(g, n, "NODE"); };
    s.affinity = [](int g) { return half_affinity(g, 32); };
  } else if (name == "pcie8") {
    // Eight PCIe A100s, pairs behind PCIe switches, two sockets, two NICs (one per socket).
    s.nics = 2;
    s.gpu_name = "NVIDIA A100-PCIE-40GB";
    s.gpu_path = [](int g, int h) { return g / 2 == h / 2 ? "PIX" : socket_word(g, h, "NODE"); };
    s.nic_path = [](int g, int n) { return g / 2 == n * 2 ? "PIX" : g / 4 == n ? "NODE" : "SYS"; };
    s.affinity = [](int g) { return half_affinity(g, 16); };
  } else {
    throw Error("unknown node shape '" + name + "' (dgx1v, dgxa100, hgxh100, hgxh200, pcie8, or a topology file)");
  }
  return s;
}

}  // namespace

Topology builtin_shape(const std::string& name) { return parse_nvidia_smi(render(shape_text(name)), "shape " + name); }

}  // namespace loom::topo::sim

// loom_topo_main.cpp — the `loom-topo` admin tool: reads a topology (live, hwloc XML or
// nvidia-smi text), then prints it, exports it, or emits Slurm and NCCL configuration.
#include "config.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "loom/topo/emit.hpp"
#include "loom/topo/placement.hpp"
#include "loom/topo/readers.hpp"
#include "emit_svg.hpp"
#ifdef LOOM_TOPO_SIMULATE
#include "simulate/simulate.hpp"
#endif

namespace {

using namespace loom::topo;

constexpr const char* kUsage =
    "usage: loom-topo [--xml FILE | --nvidia-smi FILE | --topology FILE] [--host NAME] COMMAND [options]\n"
    "                 [--format text|json]\n"
    "\n"
    "commands:\n"
    "  show                      GPU/NIC matrix like `nvidia-smi topo -m`, with CPU and NUMA affinity\n"
    "  export [--as json|xml]    the node's topology as JSON, or hwloc XML for the plugin's cache\n"
    "  gres [--dev-dir DIR]      gres.conf lines (Type, File=DIR/nvidiaN, Cores, Links)\n"
    "  node-conf                 the slurm.conf NodeName line\n"
    "  place --ntasks N [--gpus LIST] [--cpus LIST] [--mode ring|gpu|numa]\n"
    "        [--nic auto|none|NAME] [--oversubscribe]\n"
    "                            the per-task placement the SPANK plugin would apply\n"
    "  nccl-xml                  an NCCL_TOPO_FILE for this node\n"
    "  draw [place's options]    the node as an SVG picture, with the placement over it given --ntasks\n"
    "  simulate --cluster CLUSTER.yaml (--job-gpus N --bytes B | --workload WORKLOAD.yaml)\n"
    "        [--placement slurm|loom|both] [--algo auto|ring|tree|flat|hier]\n"
    "                            what placement is worth on a cluster (doc/simulate.md)\n"
    "  plan --cluster CLUSTER.yaml (--params N | --n-layer L --n-embd E [--n-head H --context T --vocab V])\n"
    "       --global-batch B [--mfu F] [--precision mixed|fp32] [--reserve-gb G] [--format text|json]\n"
    "                            whether a model's training fits a mix of GPUs, per ZeRO level (doc/plan.md)\n"
    "  topology-conf --cluster CLUSTER.yaml [--node-prefix P]\n"
    "                            Slurm's topology.conf (topology/tree) for that cluster\n"
    "\n"
    "Without --xml or --nvidia-smi the node is discovered live (hwloc, and NVML when a driver is\n"
    "present). --nvidia-smi reads `nvidia-smi topo -m` output, optionally followed by `nvidia-smi -L`;\n"
    "--topology reads any of the three and the JSON of `export` (the forms the plugin's topology= takes).\n"
    "Exit status: 0 ok, 1 bad input or failure, 2 usage.\n";

using loom::UsageError;

struct Options {
  std::string xml, nvsmi, any, host, command, format = "text", as = "json", dev_dir = "/dev";
  std::string mode = "ring", nic = "auto";
  std::string ntasks, gpus, cpus;
  bool have_gpus = false, have_cpus = false, oversubscribe = false;
};

int parse_int(const std::string& flag, const std::string& v) {
  if (v.empty() || v.size() > 9 || v.find_first_not_of("-0123456789") != std::string::npos)
    throw UsageError{flag + " needs an integer, not '" + v + "'"};
  try {
    return std::stoi(v);
  } catch (...) {
    throw UsageError{flag + " needs an integer, not '" + v + "'"};
  }
}

std::vector<int> parse_int_list(const std::string& flag, const std::string& v) {
  if (v.empty()) return {};
  try {
    return parse_cpu_list(v);
  } catch (const Error& e) {
    throw UsageError{flag + ": " + e.what()};
  }
}

Options parse_args(int argc, char** argv) {
  Options o;
  static const std::map<std::string, std::vector<std::string>> kCommandFlags = {
      {"show", {}}, {"export", {"--as"}}, {"gres", {"--dev-dir"}}, {"node-conf", {}},
      {"place", {"--ntasks", "--gpus", "--cpus", "--mode", "--nic", "--oversubscribe"}}, {"nccl-xml", {}},
      {"draw", {"--ntasks", "--gpus", "--cpus", "--mode", "--nic", "--oversubscribe"}}};
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], val;
    bool has_val = false;
    auto eq = a.find('=');
    if (a.compare(0, 2, "--") == 0 && eq != std::string::npos) {
      val = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_val = true;
    }
    auto value = [&]() -> std::string {
      if (has_val) return val;
      if (i + 1 >= args.size()) throw UsageError{a + " needs a value"};
      return args[++i];
    };
    if (a == "-h" || a == "--help") {
      o.command = "help";
      return o;
    }
    if (a == "--version") {
      o.command = "version";
      return o;
    }
    if (a.compare(0, 1, "-") != 0) {
      if (!o.command.empty()) throw UsageError{"unexpected argument '" + a + "'"};
      if (!kCommandFlags.count(a)) throw UsageError{"unknown command '" + a + "'"};
      o.command = a;
      continue;
    }
    if (a == "--xml") o.xml = value();
    else if (a == "--nvidia-smi") o.nvsmi = value();
    else if (a == "--topology") o.any = value();
    else if (a == "--host") o.host = value();
    else if (a == "--format") o.format = value();
    else if (a == "--as") o.as = value();
    else if (a == "--dev-dir") o.dev_dir = value();
    else if (a == "--ntasks") o.ntasks = value();
    else if (a == "--gpus") o.gpus = value(), o.have_gpus = true;
    else if (a == "--cpus") o.cpus = value(), o.have_cpus = true;
    else if (a == "--mode") o.mode = value();
    else if (a == "--nic") o.nic = value();
    else if (a == "--oversubscribe" && !has_val) o.oversubscribe = true;
    else throw UsageError{"unknown option '" + args[i] + "'"};
    bool global = a == "--xml" || a == "--nvidia-smi" || a == "--topology" || a == "--host" || a == "--format";
    if (!global) {
      if (o.command.empty()) throw UsageError{a + " must follow its command"};
      const auto& allowed = kCommandFlags.at(o.command);
      if (std::find(allowed.begin(), allowed.end(), a) == allowed.end())
        throw UsageError{a + " is not an option of '" + o.command + "'"};
    }
  }
  if (o.command.empty()) throw UsageError{"no command given"};
  if (!o.xml.empty() + !o.nvsmi.empty() + !o.any.empty() > 1)
    throw UsageError{"--xml, --nvidia-smi and --topology exclude each other"};
  if (o.format != "text" && o.format != "json") throw UsageError{"--format must be text or json, not '" + o.format + "'"};
  if (o.as != "json" && o.as != "xml") throw UsageError{"--as must be json or xml, not '" + o.as + "'"};
  if (o.command == "place" || (o.command == "draw" && !o.ntasks.empty())) {
    if (o.ntasks.empty()) throw UsageError{"place needs --ntasks N"};
    if (o.mode != "ring" && o.mode != "gpu" && o.mode != "numa")
      throw UsageError{"--mode must be ring, gpu or numa, not '" + o.mode + "'"};
  }
  if (o.dev_dir.empty() || o.dev_dir[0] != '/') throw UsageError{"--dev-dir must be an absolute path"};
  return o;
}

std::string local_host() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  std::string h(buf);
  return h.substr(0, h.find('.'));
}

std::string run(const Options& o, std::string* notes) {
  Topology t = !o.any.empty() ? read_topology_file(o.any)
               : !o.xml.empty() ? read_hwloc_xml_file(o.xml)
               : !o.nvsmi.empty() ? read_nvidia_smi_file(o.nvsmi)
                                  : discover(notes);
  std::string host = !o.host.empty() ? o.host : !t.host.empty() ? t.host : local_host();
  t.host = host;
  const bool json = o.format == "json";
  if (o.command == "show") return json ? emit_json(t) : emit_show(t);
  if (o.command == "export") return o.as == "xml" ? export_hwloc_xml(t) : emit_json(t);
  if (o.command == "gres") return json ? emit_gres_json(t, o.dev_dir) : emit_gres(t, o.dev_dir);
  if (o.command == "node-conf") return json ? emit_node_conf_json(t, host) : emit_node_conf(t, host);
  if (o.command == "nccl-xml") return emit_nccl_xml(t);
  if (o.command == "draw" && o.ntasks.empty()) return emit_svg(t, nullptr);
  PlaceRequest req;
  req.ntasks = parse_int("--ntasks", o.ntasks);
  req.gpus = parse_int_list("--gpus", o.gpus);
  req.gpus_given = o.have_gpus;
  req.cpus = parse_int_list("--cpus", o.cpus);
  req.cpus_given = o.have_cpus;
  req.mode = parse_bind_mode(o.mode);
  req.nic = o.nic;
  req.oversubscribe = o.oversubscribe;
  Placement p = place(t, req);
  if (o.command == "draw") return emit_svg(t, &p);
  return json ? emit_placement_json(p) : emit_placement_text(t, p);
}

}  // namespace

int main(int argc, char** argv) {
  // hwloc's built-in XML parser: faster than its libxml2 one here, and it refuses the inputs
  // that crash the libxml2 path (tests/fixtures/topology/crashers). An admin's setting wins.
  setenv("HWLOC_LIBXML_IMPORT", "0", 0);
  if (argc > 1 && (std::strcmp(argv[1], "simulate") == 0 || std::strcmp(argv[1], "topology-conf") == 0 ||
                   std::strcmp(argv[1], "plan") == 0)) {
    // A cluster, not a node: commands with their own options.
#ifdef LOOM_TOPO_SIMULATE
    const std::vector<std::string> rest(argv + 2, argv + argc);
    if (std::strcmp(argv[1], "plan") == 0) return loom::topo::sim::plan_main(rest);
    return std::strcmp(argv[1], "simulate") == 0 ? loom::topo::sim::simulate_main(rest)
                                                 : loom::topo::sim::topology_conf_main(rest);
#else
    std::fprintf(stderr, "loom-topo: %s needs a build with yaml-cpp and nlohmann-json\n", argv[1]);
    return 1;
#endif
  }
  Options o;
  try {
    o = parse_args(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "loom-topo: %s\n%s", e.what(), "Try 'loom-topo --help'.\n");
    return 2;
  }
  if (o.command == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (o.command == "version") {
    std::printf("loom-topo (Loom) %s\n", PACKAGE_VERSION);
    return 0;
  }
  try {
    std::string notes;
    std::string out = run(o, &notes);
    if (!notes.empty()) std::fprintf(stderr, "loom-topo: note: %s\n", notes.c_str());
    std::fwrite(out.data(), 1, out.size(), stdout);
    if (std::fflush(stdout) != 0) {
      std::fprintf(stderr, "loom-topo: cannot write output: %s\n", std::strerror(errno));
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {  // a UsageError exits 2, anything else 1
    return loom::report("loom-topo", e);
  }
}

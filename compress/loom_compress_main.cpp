// loom_compress_main.cpp — `loom-compress prune|quantize|distill|eval|convert` (Contract 7):
// options parsed with Boost.Program_options per subcommand; fine-tuning and distillation run
// loom-train's training loop (rt::train) in this process.
#include <boost/program_options.hpp>

#include "config.h"

#include <cstdio>
#include <iostream>
#include <string>

#include "commands.hpp"
#include "loom/rt/error.hpp"
#include "loom/rt/tensor/kernels.hpp"

namespace po = boost::program_options;
using loom::compress::Usage;

namespace {

const char* kUsage =
    "usage: loom-compress COMMAND [options]   (loom-compress COMMAND --help for its options)\n"
    "  prune IN.h5 -o OUT.h5 --sparsity F [--criterion l1|l2] [--finetune-epochs N]\n"
    "  quantize IN.h5 -o OUT.h5 [--calibration fashion-mnist[:DIR]] [--calib-samples N]\n"
    "           [--observer minmax|percentile|entropy] [--weights-only]\n"
    "  distill --teacher T.h5 --student-layers W,... -o OUT.h5 [--temperature T] [--alpha A]\n"
    "  eval MODEL [--data fashion-mnist[:DIR]] [--format text|json]\n"
    "  convert IN OUT   (.h5 <-> .onnx)\n"
    "Exit status: 0 done, 1 error (nothing written), 2 bad usage.\n";

}  // namespace

int main(int argc, char** argv) {
  loom::rt::cpu::settle_library_env(argv);  // OpenMP waits that do not starve a busy node; OpenBLAS kernels for this CPU
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("loom-compress (Loom) %s\n", PACKAGE_VERSION);
    return 0;
  }
  try {
    if (cmd == "prune") return loom::compress::cmd_prune(argc - 1, argv + 1);
    if (cmd == "quantize") return loom::compress::cmd_quantize(argc - 1, argv + 1);
    if (cmd == "distill") return loom::compress::cmd_distill(argc - 1, argv + 1);
    if (cmd == "eval") return loom::compress::cmd_eval(argc - 1, argv + 1);
    if (cmd == "convert") return loom::compress::cmd_convert(argc - 1, argv + 1);
    throw Usage{"unknown command '" + cmd + "' (prune, quantize, distill, eval or convert)"};
  } catch (const po::error& e) {
    return loom::report("loom-compress", loom::UsageError(e.what()));
  } catch (const std::exception& e) {  // a Usage exits 2, anything else 1
    return loom::report("loom-compress", e);
  }
}

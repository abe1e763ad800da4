// loom_sweep_main.cpp — `loom-sweep --spec SWEEP.yaml --dir DIR [--format text|json]
// [--executor slurm|local]` (Contract 11): Bayesian optimisation (or random search) whose trials
// run as one Slurm array job. Exit status: 0 the sweep finished (failed trials are reported),
// 1 it stopped early (too many failed trials, the array job gone, interrupted), 2 bad usage or spec.
#include <boost/program_options.hpp>

#include "config.h"

#include <csignal>
#include <cstdio>
#include <iostream>

#include "sweep.hpp"

namespace po = boost::program_options;

namespace {

std::atomic<bool> g_interrupted{false};
void on_signal(int) { g_interrupted = true; }
const loom::Logger g_log("loom-sweep");

}  // namespace

int main(int argc, char** argv) {
  std::string spec_path, format = "text", executor = "slurm";
  loom::sweep::SweepOptions opts;
  po::options_description desc(
      "usage: loom-sweep --spec SWEEP.yaml --dir DIR [--format text|json] [--executor slurm|local]\n"
      "                  [--tensorboard DIR]\n"
      "Runs the spec's trials as one Slurm array job (sbatch --array, 'parallel' at a time), proposes each\n"
      "next trial by Bayesian optimisation, and prints every trial and the best. See loom-sweep(1).\n"
      "Exit status: 0 finished, 1 stopped early (resume with the same --dir), 2 bad usage or spec.\n"
      "Options");
  desc.add_options()("help,h", "this help")("version", "print the version")(
      "spec", po::value(&spec_path), "the sweep spec (YAML)")(
      "dir", po::value(&opts.dir), "the sweep's folder: trials, logs and state; an existing one is resumed")(
      "format", po::value(&format)->default_value("text"), "text | json (every trial and the best, on stdout)")(
      "executor", po::value(&executor)->default_value("slurm"), "slurm (one sbatch --array job) | local (processes here)")(
      "tensorboard", po::value(&opts.tensorboard), "DIR: one TensorBoard run per trial (its hyperparameters in the HParams plugin, its metric)");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return loom::report("loom-sweep", loom::UsageError(e.what()));
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (vm.count("version")) {
    std::printf("loom-sweep (Loom) %s\n", PACKAGE_VERSION);
    return 0;
  }
  if (spec_path.empty() || opts.dir.empty() || (format != "text" && format != "json") ||
      (executor != "slurm" && executor != "local")) {
    return loom::report("loom-sweep", loom::UsageError("needs --spec and --dir; --format text|json; --executor slurm|local"));
  }
  opts.local = executor == "local";
  opts.interrupted = &g_interrupted;
  opts.log = &g_log;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  try {
    const auto spec = loom::sweep::load_spec(spec_path);
    const auto result = loom::sweep::run_sweep(spec, opts);
    loom::sweep::write_file_atomic(opts.dir + "/results.json", loom::sweep::result_json(spec, result));
    if (format == "json") std::fputs(loom::sweep::result_json(spec, result).c_str(), stdout);
    else std::fputs(loom::sweep::result_text(spec, result).c_str(), stdout);
    if (!result.complete) {
      g_log.write(loom::LogLevel::kError, "stopped: " + result.error);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {  // a SpecError exits 2, anything else 1
    return loom::report("loom-sweep", e);
  }
}

// spec.hpp — the sweep spec (Contract 11): a YAML file naming the trial command, the metric
// and its goal, the parameters, the trial budget, the parallelism and the method.
#pragma once

#include "loom/rt/proc/process.hpp"

#include <string>
#include <vector>

#include "space.hpp"

namespace loom::sweep {

struct Spec {
  std::string command;  // a shell command line with {param} and {metrics_file} placeholders
  std::string metric;
  bool maximise = false;  // goal: max (default min)
  bool bayes = true;      // method: bayes | random
  std::vector<Param> params;
  int trials = 20;
  int parallel = 1;
  int init_trials = 0;   // random trials before the Gaussian process (0: max(parallel, 2*dims+1))
  int max_failures = 0;  // the sweep stops at this many failed trials (0: max(3, trials/4))
  unsigned long seed = 0;
  std::vector<std::string> sbatch_args;  // extra sbatch options for the array job
  std::string text;                      // the file as read (stored in the sweep folder)
};

// Reads and checks a spec; every problem is a SpecError naming the key.
Spec load_spec(const std::string& path);
Spec parse_spec(const std::string& yaml_text);

// The command with every {param} and {metrics_file} replaced (values shell-quoted where needed).
std::string expand_command(const Spec& spec, const Space& space, const Point& values,
                           const std::string& metrics_file);

using loom::rt::comment_text;  // loom/rt/proc/process.hpp
using loom::rt::shell_quote;

}  // namespace loom::sweep

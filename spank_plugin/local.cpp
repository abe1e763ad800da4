// local.cpp — the srun side: before the step starts, tell the user which binding wins when
// --loom-bind meets --cpu-bind or --gpu-bind.
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "context.hpp"

namespace loom::spank {

namespace {

// srun's own arguments (the SPANK API gives plugins the job's argv, not srun's).
std::vector<std::string> own_args() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  std::string cur;
  for (char c : all) {
    if (c == '\0') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return out;
}

std::string given(const std::vector<std::string>& args, const char* opt, const char* env) {
  const std::string o(opt), alt = std::string(opt).replace(o.find('-', 2), 1, "_");
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    for (const std::string& name : {o, alt}) {
      if (a.compare(0, name.size() + 1, name + "=") == 0) return a.substr(name.size() + 1);
      if (a == name && i + 1 < args.size()) return args[i + 1];
    }
  }
  const char* v = std::getenv(env);
  return v ? v : "";
}

}  // namespace

int local_init_post_opt(spank_t) {
  UserOptions user = ctx().user;
  if (user.bind == Bind::kUnset)
    if (const char* v = std::getenv(kBindEnv)) {
      std::string err = parse_bind(v, &user.bind, nullptr);
      if (!err.empty()) return 0;  // slurmstepd reports it to the tasks (strict decides)
    }
  Bind bind = effective_bind(user, ctx().config);
  if (bind == Bind::kNone || bind == Bind::kUnset) return 0;
  auto args = own_args();
  for (const auto& [opt, env] : {std::pair<const char*, const char*>{"--cpu-bind", "SLURM_CPU_BIND"},
                                 std::pair<const char*, const char*>{"--gpu-bind", "SLURM_GPU_BIND"}}) {
    std::string v = given(args, opt, env);
    if (v.empty() || v == "none" || v == "quiet" || v == "verbose") continue;
    slurm_info("spank_loom: --loom-bind=%s wins over %s=%s: Loom applies its placement last, in each task "
               "just before exec, after task/affinity and gres binding; use --loom-bind=none to keep %s",
               bind_word(bind), opt, v.c_str(), opt);
  }
  return 0;
}

}  // namespace loom::spank

// spank_loom.cpp — the SPANK entry points of spank_loom.so. This file only registers the
// options and dispatches on spank_context(); the work is in local.cpp and remote.cpp. No C++
// exception ever leaves this file: each entry point turns one into an error code and a log line.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "context.hpp"

extern "C" {
#include <slurm/slurm_version.h>
}

// SPANK_PLUGIN(loom, 1) spelled out: in C++ a namespace-scope const has internal linkage, so
// the symbols Slurm looks up must be declared extern "C" explicitly.
extern "C" {
extern const char plugin_name[];
extern const char plugin_type[];
extern const unsigned int plugin_version;
extern const unsigned int spank_plugin_version;
const char plugin_name[] = "loom";
const char plugin_type[] = "spank";
const unsigned int plugin_version = SLURM_VERSION_NUMBER;
const unsigned int spank_plugin_version = 1;
}

namespace loom::spank {

namespace {

Context g_ctx;

int opt_bind(int, const char* optarg, int remote) {
  Bind b = Bind::kUnset;
  bool help = false;
  std::string err = parse_bind(optarg ? optarg : "", &b, &help);
  if (!err.empty()) {
    slurm_error("spank_loom: %s", err.c_str());
    return -1;
  }
  if (help) {
    if (remote) return 0;
    std::fputs(kBindHelp, stderr);
    std::exit(0);  // like --cpu-bind=help; only ever in srun, sbatch or salloc
  }
  g_ctx.user.bind = b;  // idempotent: Slurm may call this twice with the same value
  return 0;
}

int opt_verbose(int, const char*, int) {
  g_ctx.user.verbose = true;
  return 0;
}

int opt_nic(int, const char* optarg, int) {
  std::string err = parse_nic(optarg ? optarg : "", &g_ctx.user.nic);
  if (!err.empty()) {
    slurm_error("spank_loom: %s", err.c_str());
    return -1;
  }
  return 0;
}

struct spank_option kOptions[] = {
    {const_cast<char*>("loom-bind"), const_cast<char*>("MODE"),
     const_cast<char*>("Loom task placement: ring|gpu|numa|none|help (GPU, CPU cores, NIC from the topology)"), 1, 0,
     opt_bind},
    {const_cast<char*>("loom-verbose"), nullptr, const_cast<char*>("Print each task's Loom placement on stderr"), 0, 0,
     opt_verbose},
    {const_cast<char*>("loom-nic"), const_cast<char*>("NIC"),
     const_cast<char*>("NIC for each task: auto (nearest), none, or a device name"), 1, 0, opt_nic},
};

template <typename F>
int guarded(const char* hook, F fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    slurm_error("spank_loom: %s: %s", hook, e.what());
  } catch (...) {
    slurm_error("spank_loom: %s: unknown error", hook);
  }
  return ctx().config.strict ? -1 : 0;
}

}  // namespace

Context& ctx() { return g_ctx; }

void reset_context() {
  if (g_ctx.export_fd >= 0) ::close(g_ctx.export_fd);
  if (g_ctx.export_parent_fd >= 0) ::close(g_ctx.export_parent_fd);
  g_ctx.topo.reset();
  g_ctx = Context();
}

}  // namespace loom::spank

using namespace loom::spank;

extern "C" int slurm_spank_init(spank_t sp, int ac, char** av) {
  return guarded("init", [&] {
    std::vector<std::string> args(av, av + ac);
    std::string err = parse_plugstack_args(args, &ctx().config);
    if (!err.empty()) {
      slurm_error("spank_loom: %s", err.c_str());
      return -1;
    }
    spank_context_t c = spank_context();
    if (c != S_CTX_LOCAL && c != S_CTX_REMOTE && c != S_CTX_ALLOCATOR) return 0;
    for (auto& opt : kOptions) {
      if (spank_option_register(sp, &opt) != ESPANK_SUCCESS) {
        slurm_error("spank_loom: cannot register --%s", opt.name);
        return -1;
      }
    }
    return 0;
  });
}

extern "C" int slurm_spank_init_post_opt(spank_t sp, int, char**) {
  return guarded("init_post_opt", [&] {
    switch (spank_context()) {
      case S_CTX_LOCAL: return local_init_post_opt(sp);
      case S_CTX_REMOTE: return remote_init_post_opt(sp);
      default: return 0;
    }
  });
}

extern "C" int slurm_spank_user_init(spank_t sp, int, char**) {
  return guarded("user_init", [&] { return spank_remote(sp) ? remote_user_init(sp) : 0; });
}

extern "C" int slurm_spank_task_init(spank_t sp, int, char**) {
  return guarded("task_init", [&] { return spank_remote(sp) ? remote_task_init(sp) : 0; });
}

extern "C" int slurm_spank_exit(spank_t sp, int, char**) {
  int rc = guarded("exit", [&] { return spank_remote(sp) ? remote_exit(sp) : 0; });
  reset_context();
  return rc;
}

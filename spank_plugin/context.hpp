// context.hpp — the plugin's one piece of state, per process (srun, sbatch, salloc, or one
// slurmstepd). Explicit initial values; slurm_spank_exit resets it. Shared by the context files.
#pragma once

#include <memory>
#include <string>

#include "config.hpp"
#include "loom/topo/topology.hpp"
#include "step_plan.hpp"

extern "C" {
#include <slurm/spank.h>
}

namespace loom::spank {

struct Context {
  PluginConfig config;
  UserOptions user;
  // slurmstepd only
  bool active = false;           // a plan was computed for this step
  bool failed = false;           // strict=1 and placement failed: tasks must fail
  std::string problem;           // why placement failed (shown to the user)
  StepPlan plan;
  std::unique_ptr<loom::topo::Topology> topo;
  int export_parent_fd = -1;     // export_dir, and the step's folder inside it
  int export_fd = -1;
  std::string export_name;
};

Context& ctx();
void reset_context();

// Context files (pyxis style): one per SPANK context.
int local_init_post_opt(spank_t sp);      // srun
int remote_init_post_opt(spank_t sp);     // slurmstepd: compute the placement once
int remote_user_init(spank_t sp);         // slurmstepd, as the user: export files
int remote_task_init(spank_t sp);         // slurmstepd, in each task: apply it
int remote_exit(spank_t sp);              // slurmstepd: remove exported files

}  // namespace loom::spank

// remote.cpp — the slurmstepd side. init_post_opt (root, once per step): read the topology,
// restrict it to what Slurm gave the step and compute every local task's placement.
// user_init (as the user): write the topology JSON and NCCL XML for the step. task_init (in each
// task, just before exec): set its CPU affinity and environment. exit: remove the files.
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

extern "C" {
#include <slurm/slurm.h>
}

#include "context.hpp"
#include "loom/topo/emit.hpp"
#include "loom/topo/readers.hpp"

namespace loom::spank {

namespace {

constexpr const char* kTopologyJson = "topology.json";
constexpr const char* kNcclXml = "nccl-topo.xml";

std::string env_of(spank_t sp, const char* name) {
  char buf[4096];
  if (spank_getenv(sp, name, buf, sizeof buf) != ESPANK_SUCCESS) return "";
  return buf;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ',') out.push_back(cur), cur.clear();
    else cur += c;
  }
  if (!s.empty()) out.push_back(cur);
  return out;
}

bool write_file_at(int dirfd, const char* name, const std::string& text) {
  int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return false;
    }
    off += static_cast<size_t>(n);
  }
  return close(fd) == 0;
}

void fail_or_warn(const std::string& why) {
  Context& c = ctx();
  c.problem = why;
  if (c.config.strict) {
    c.failed = true;
    slurm_error("spank_loom: %s (strict=1: the step fails)", why.c_str());
  } else {
    slurm_error("spank_loom: %s; tasks run without Loom's placement", why.c_str());
  }
}

}  // namespace

int remote_init_post_opt(spank_t sp) {
  Context& c = ctx();
  if (c.user.bind == Bind::kUnset) {
    std::string v = env_of(sp, kBindEnv);
    if (!v.empty()) {
      std::string err = parse_bind(v, &c.user.bind, nullptr);
      if (!err.empty()) {
        c.user.bind = Bind::kUnset;
        fail_or_warn(std::string(kBindEnv) + ": " + err);
        return 0;
      }
    }
  }
  Bind bind = effective_bind(c.user, c.config);
  if (bind == Bind::kNone || bind == Bind::kUnset) return 0;
  uint32_t step_id = 0;
  if (spank_get_item(sp, S_JOB_STEPID, &step_id) != ESPANK_SUCCESS) return 0;
  if (step_id == SLURM_BATCH_SCRIPT || step_id == SLURM_EXTERN_CONT || step_id == SLURM_INTERACTIVE_STEP) return 0;

  StepInfo step;
  step.bind = bind;
  step.nic = c.user.nic;
  uint32_t ntasks = 0;
  // Failures are reported to the user from each task (task_init): a failing init_post_opt
  // would only reach slurmd's log, and Slurm ignores it for an `optional` plugin.
  if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &ntasks) != ESPANK_SUCCESS) {
    fail_or_warn("cannot read the step's local task count");
    return 0;
  }
  step.local_tasks = static_cast<int>(ntasks);
  char* cores = nullptr;
  if (spank_get_item(sp, S_STEP_ALLOC_CORES, &cores) == ESPANK_SUCCESS && cores) step.alloc_cores = cores;
  try {
    step.step_gpus = parse_index_list(env_of(sp, "SLURM_STEP_GPUS"), "SLURM_STEP_GPUS");
    step.cuda_ids = split_commas(env_of(sp, "CUDA_VISIBLE_DEVICES"));
    std::string notes;
    c.topo = std::make_unique<loom::topo::Topology>(c.config.topology.empty()
                                                        ? loom::topo::discover(&notes)
                                                        : loom::topo::read_topology_file(c.config.topology));
    c.plan = plan_step(*c.topo, step);
    if (c.plan.tasks.size() != ntasks) throw loom::topo::Error("placement does not cover every local task");
    c.active = true;
  } catch (const loom::topo::Error& e) {
    std::string where = c.config.topology.empty() ? "live topology" : "topology " + c.config.topology;
    fail_or_warn(where + ": " + e.what());
    return 0;
  }
  return 0;
}

int remote_user_init(spank_t sp) {
  Context& c = ctx();
  if (!c.active || !c.config.export_files) return 0;
  uint32_t job = 0, step = 0;
  spank_get_item(sp, S_JOB_ID, &job);
  spank_get_item(sp, S_JOB_STEPID, &step);
  // Only numbers from Slurm make up the name; the folder comes from plugstack.conf.
  c.export_name = "loom-" + std::to_string(geteuid()) + "-" + std::to_string(job) + "." + std::to_string(step);
  c.export_parent_fd = open(c.config.export_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  bool ok = c.export_parent_fd >= 0;
  if (ok && mkdirat(c.export_parent_fd, c.export_name.c_str(), 0755) != 0 && errno != EEXIST) ok = false;
  if (ok) {
    c.export_fd = openat(c.export_parent_fd, c.export_name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    ok = c.export_fd >= 0 && fstat(c.export_fd, &st) == 0 && st.st_uid == geteuid();
  }
  std::string dir = c.config.export_dir + "/" + c.export_name;
  if (ok && write_file_at(c.export_fd, kTopologyJson, loom::topo::emit_json(*c.topo)))
    spank_setenv(sp, "LOOM_TOPOLOGY", (dir + "/" + kTopologyJson).c_str(), 1);
  else
    slurm_error("spank_loom: cannot write %s/%s: %s", dir.c_str(), kTopologyJson, std::strerror(errno));
  if (ok) {
    try {
      if (write_file_at(c.export_fd, kNcclXml, loom::topo::emit_nccl_xml(*c.topo)))
        spank_setenv(sp, "NCCL_TOPO_FILE", (dir + "/" + kNcclXml).c_str(), 1);
    } catch (const loom::topo::Error& e) {
      slurm_info("spank_loom: no NCCL topology file: %s", e.what());
    }
  }
  return 0;
}

int remote_task_init(spank_t sp) {
  Context& c = ctx();
  int local_id = 0;
  spank_get_item(sp, S_TASK_ID, &local_id);
  if (c.failed) {
    // This runs in the task's own process, just before exec. Slurm ignores a failing
    // task_init of an `optional` plugin, so strict=1 ends the task here, exactly as
    // slurmstepd does itself when a required plugin's task_init fails.
    std::fprintf(stderr, "spank_loom: error: %s (strict=1: the task does not run)\n", c.problem.c_str());
    std::fflush(stderr);
    _exit(1);
  }
  if (!c.active) {
    if (!c.problem.empty() && local_id == 0)
      std::fprintf(stderr, "spank_loom: warning: %s; tasks run without Loom's placement\n", c.problem.c_str());
    return 0;
  }
  if (local_id < 0 || static_cast<size_t>(local_id) >= c.plan.tasks.size()) {
    std::fprintf(stderr, "spank_loom: warning: no placement for local task %d\n", local_id);
    return c.config.strict ? -1 : 0;
  }
  const TaskPlan& task = c.plan.tasks[local_id];
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : task.cpus)
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    std::fprintf(stderr, "spank_loom: %s: cannot bind task %d to CPUs %s: %s\n",
                 c.config.strict ? "error" : "warning", local_id, loom::topo::format_cpu_list(task.cpus).c_str(),
                 std::strerror(errno));
    if (c.config.strict) return -1;
  }
  for (const auto& [k, v] : task.env) spank_setenv(sp, k.c_str(), v.c_str(), 1);
  if (local_id == 0)
    for (const auto& note : c.plan.notes) std::fprintf(stderr, "spank_loom: note: %s\n", note.c_str());
  if (c.user.verbose) {
    // In a heterogeneous step S_TASK_GLOBAL_ID counts within the component; the task's
    // SLURM_PROCID (set by slurmstepd) is its rank in the whole MPI world.
    uint32_t rank = 0;
    spank_get_item(sp, S_TASK_GLOBAL_ID, &rank);
    char procid[16] = {0};
    if (spank_getenv(sp, "SLURM_PROCID", procid, sizeof procid) == ESPANK_SUCCESS) {
      char* end = nullptr;
      unsigned long v = std::strtoul(procid, &end, 10);
      if (end != procid && *end == '\0' && v < (1ul << 31)) rank = static_cast<uint32_t>(v);
    }
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    std::fprintf(stderr, "spank_loom: rank %u (local %d) on %s: %s\n", rank, local_id, host, task.summary.c_str());
  }
  return 0;
}

int remote_exit(spank_t) {
  Context& c = ctx();
  if (c.export_fd >= 0) {
    unlinkat(c.export_fd, kTopologyJson, 0);  // removes links, never what they point to
    unlinkat(c.export_fd, kNcclXml, 0);
  }
  if (c.export_parent_fd >= 0 && !c.export_name.empty()) unlinkat(c.export_parent_fd, c.export_name.c_str(), AT_REMOVEDIR);
  return 0;
}

}  // namespace loom::spank

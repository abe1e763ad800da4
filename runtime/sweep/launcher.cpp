// launcher.cpp — the Slurm array and local launchers (launcher.hpp).
#include "launcher.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "loom/rt/error.hpp"
#include "loom/rt/proc/slurm.hpp"
#include "spec.hpp"
#include "trial.hpp"

namespace loom::sweep {
namespace {

bool has_rc(const std::string& dir, int id) { return ::access((trial_dir(dir, id) + "/rc").c_str(), F_OK) == 0; }

class SlurmLauncher : public Launcher {
 public:
  SlurmLauncher(std::string dir, std::vector<std::string> args, std::string job)
      : dir_(std::move(dir)), args_(std::move(args)), job_(std::move(job)) {}

  void start(const std::string& ids, int parallel) override {
    std::vector<std::string> options = {"--job-name=loom-sweep", "--array=" + ids + "%" + std::to_string(parallel),
                                        "--output=" + dir_ + "/logs/trial-%a.out"};
    options.insert(options.end(), args_.begin(), args_.end());
    job_ = rt::slurm::submit(options, dir_ + "/trial.sh", "run loom-sweep where Slurm's commands are, or --executor local");
  }
  void launched(int) override {}

  std::vector<int> lost(const std::vector<int>& started) override {
    if (started.empty()) return {};
    std::set<int> running;
    try {
      for (const auto& j : rt::slurm::query({"-j", job_, "-t", "RUNNING,COMPLETING,CONFIGURING"}))
        if (!j.array_task.empty() && j.array_task.find_first_not_of("0123456789") == std::string::npos)
          running.insert(std::stoi(j.array_task));
    } catch (const rt::Error&) {
      return {};  // the controller did not answer: decide next time
    }
    std::vector<int> gone;
    for (int id : started)
      if (!running.count(id) && !has_rc(dir_, id)) gone.push_back(id);
    return gone;
  }

  bool alive() override {
    // Queued or running only: a cancelled array stays in squeue while its tasks complete, and a
    // resume that attached to it would wait for tasks that never come.
    if (job_.empty()) return false;
    try {
      return !rt::slurm::query({"-j", job_, "-t", "PENDING,RUNNING,CONFIGURING,SUSPENDED"}).empty();
    } catch (const rt::Error&) {
      return false;
    }
  }
  void cancel() override {
    if (!job_.empty()) rt::slurm::cancel(job_);
  }
  std::string job() const override { return job_; }

 private:
  std::string dir_;
  std::vector<std::string> args_;
  std::string job_;
};

class LocalLauncher : public Launcher {
 public:
  explicit LocalLauncher(std::string dir) : dir_(std::move(dir)) {}
  ~LocalLauncher() override { cancel(); }
  void start(const std::string&, int) override {}

  void launched(int id) override {
    const std::string log = dir_ + "/logs/trial-" + std::to_string(id) + ".out";
    const std::string wrapper = dir_ + "/trial.sh";
    const std::string task = std::to_string(id);
    const pid_t pid = ::fork();
    if (pid < 0) throw loom::Error("fork failed for trial " + task, Kind::kIO);
    if (pid == 0) {
      ::setpgid(0, 0);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) ::dup2(fd, 1), ::dup2(fd, 2);
      ::setenv("SLURM_ARRAY_TASK_ID", task.c_str(), 1);
      ::execlp("bash", "bash", wrapper.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    pids_[id] = pid;
  }

  std::vector<int> lost(const std::vector<int>& started) override {
    std::vector<int> gone;
    for (auto it = pids_.begin(); it != pids_.end();) {
      int status = 0;
      if (::waitpid(it->second, &status, WNOHANG) == it->second) {
        if (!has_rc(dir_, it->first)) gone.push_back(it->first);
        it = pids_.erase(it);
      } else {
        ++it;
      }
    }
    (void)started;
    return gone;
  }
  bool alive() override { return false; }  // local trials end with the process that ran them
  void cancel() override {
    for (auto& [id, pid] : pids_) ::kill(-pid, SIGTERM);
    for (auto& [id, pid] : pids_) ::waitpid(pid, nullptr, 0);
    pids_.clear();
  }
  std::string job() const override { return "local"; }

 private:
  std::string dir_;
  std::map<int, pid_t> pids_;
};

}  // namespace

void write_wrapper(const std::string& dir) {
  const std::string q = shell_quote(dir);
  const std::string script =
      "#!/bin/bash\n"
      "# trial.sh — written by loom-sweep: runs trial $SLURM_ARRAY_TASK_ID of the sweep in " + comment_text(dir) + "\n"
      "# once loom-sweep has written its command, and records its start, end and exit status.\n"
      "dir=" + q + "\n"
      "id=${SLURM_ARRAY_TASK_ID:?loom-sweep: not an array task}\n"
      "t=\"$dir/trials/$id\"\n"
      "until [ -f \"$t/command\" ]; do\n"
      "  if [ -e \"$dir/stop\" ]; then echo \"loom-sweep: the sweep ended before trial $id ran\"; exit 0; fi\n"
      "  sleep 0.05\n"
      "done\n"
      "echo \"${SLURM_ARRAY_JOB_ID:-local}_$id\" > \"$t/job\"\n"
      "date +%s.%N > \"$t/start\"\n"
      "echo \"loom-sweep: trial $id: $(cat \"$t/command\")\"\n"
      "bash \"$t/command\"\n"
      "rc=$?\n"
      "date +%s.%N > \"$t/end\"\n"
      "echo \"$rc\" > \"$t/rc.tmp\" && mv -f \"$t/rc.tmp\" \"$t/rc\"\n"
      "exit \"$rc\"\n";
  write_file_atomic(dir + "/trial.sh", script, 0755);
}

std::unique_ptr<Launcher> slurm_launcher(const std::string& dir, std::vector<std::string> args, std::string job) {
  return std::make_unique<SlurmLauncher>(dir, std::move(args), std::move(job));
}
std::unique_ptr<Launcher> local_launcher(const std::string& dir) { return std::make_unique<LocalLauncher>(dir); }

}  // namespace loom::sweep

// slurm.cpp — slurm.hpp: the replicas' jobs through the one Slurm client (rt::slurm).
#include "slurm.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <sstream>

#include "loom/rt/error.hpp"
#include "loom/rt/proc/process.hpp"
#include "loom/rt/proc/slurm.hpp"

namespace loom::serve {

std::string slurm_memory(const std::string& q) {
  if (q.empty()) return "";
  size_t digits = 0;
  while (digits < q.size() && std::isdigit(static_cast<unsigned char>(q[digits]))) ++digits;
  const double n = std::stod(q.substr(0, digits));
  const std::string unit = q.substr(digits);
  double mib = n / (1024.0 * 1024.0);  // bytes
  if (unit == "Ki") mib = n / 1024.0;
  if (unit == "K") mib = n * 1000.0 / (1024.0 * 1024.0);
  if (unit == "Mi") mib = n;
  if (unit == "M") mib = n * 1e6 / (1024.0 * 1024.0);
  if (unit == "Gi") mib = n * 1024.0;
  if (unit == "G") mib = n * 1e9 / (1024.0 * 1024.0);
  if (unit == "Ti") mib = n * 1024.0 * 1024.0;
  if (unit == "T") mib = n * 1e12 / (1024.0 * 1024.0);
  const long long whole = static_cast<long long>(mib + 0.999999);
  return std::to_string(whole < 1 ? 1 : whole) + "M";
}

std::string ready_file(const std::string& state_dir, const std::string& job) {
  return state_dir + "/replicas/" + job + ".json";
}

int prune_replica_files(const std::string& state_dir, const std::set<std::string>& live, size_t keep_logs) {
  const std::string dir = state_dir + "/replicas";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  std::vector<std::pair<time_t, std::string>> logs;  // of ended jobs: (mtime, path)
  std::vector<std::string> gone;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const size_t dot = name.rfind('.');
    if (dot == std::string::npos || dot == 0) continue;
    const std::string job = name.substr(0, dot), ext = name.substr(dot);
    if (job.find_first_not_of("0123456789_") != std::string::npos || live.count(job)) continue;  // job ids only
    struct stat st {};
    if (ext == ".json") gone.push_back(dir + "/" + name);
    else if (ext == ".log" && ::stat((dir + "/" + name).c_str(), &st) == 0) logs.emplace_back(st.st_mtime, dir + "/" + name);
  }
  ::closedir(d);
  std::sort(logs.begin(), logs.end());
  for (size_t i = 0; i + keep_logs < logs.size(); ++i) gone.push_back(logs[i].second);
  int removed = 0;
  for (const auto& p : gone) removed += ::unlink(p.c_str()) == 0;
  return removed;
}

void write_replica_script(const std::string& state_dir, const std::string& loom_serve, const std::string& spec_file,
                          const std::string& bind, const std::string& token_file,
                          const std::vector<std::string>& serve_args, int gpus) {
  using rt::shell_quote;
  ::mkdir((state_dir + "/replicas").c_str(), 0755);
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# replica.sh — written by loom-serve --controller: one replica of the service in " << rt::comment_text(spec_file) << ".\n"
    << "# It announces its address in replicas/$SLURM_JOB_ID.json once it listens; SIGTERM drains it (srun\n"
    << "# passes it on). It runs as a job step, so that Loom's SPANK plugin, where Slurm loads it, places\n"
    << "# it: on its GPU and the cores and NIC nearest it (or on one NUMA node without a GPU).\n"
    << "place=\n"
    << "if srun --help 2>/dev/null | grep -q -- --loom-bind; then place=--loom-bind=" << (gpus > 0 ? "gpu" : "numa") << "; fi\n"
    << "exec srun --ntasks=1 --cpus-per-task=\"${SLURM_CPUS_PER_TASK:-1}\" $place " << shell_quote(loom_serve)
    << " --spec " << shell_quote(spec_file) << " --bind " << shell_quote(bind)
    << " --http-port 0 --grpc-port 0 --ready-file " << shell_quote(state_dir + "/replicas") << "/\"$SLURM_JOB_ID.json\""
    << " --log-format json --threads \"${SLURM_CPUS_PER_TASK:-1}\"";
  if (!token_file.empty()) s << " --auth-token-file " << shell_quote(token_file);
  for (const auto& a : serve_args) s << " " << shell_quote(a);
  s << "\n";
  rt::write_file_atomic(state_dir + "/replica.sh", s.str(), 0755);
}

std::string SlurmJobs::submit() const {
  std::vector<std::string> options = {"--job-name=" + job_name(), "--comment=" + comment(), "--ntasks=1",
                                      "--cpus-per-task=" + std::to_string(s_.cpus),
                                      "--output=" + s_.state_dir + "/replicas/%j.log", "--open-mode=append"};
  if (s_.gpus > 0) options.push_back("--gpus=" + std::to_string(s_.gpus));
  if (!s_.mem.empty()) options.push_back("--mem=" + s_.mem);
  if (!s_.partition.empty()) options.push_back("--partition=" + s_.partition);
  if (!s_.qos.empty()) options.push_back("--qos=" + s_.qos);
  return rt::slurm::submit(options, s_.state_dir + "/replica.sh");
}

std::vector<JobInfo> SlurmJobs::list() const {
  std::vector<JobInfo> jobs;
  for (const auto& j : rt::slurm::query({"-t", "all", "-u", std::to_string(::getuid()), "--name=" + job_name()}))
    if (j.comment == comment()) jobs.push_back({j.id, j.state, j.reason, j.node});  // not another controller's
  return jobs;
}

void SlurmJobs::terminate(const std::string& id) const { rt::slurm::cancel(id, {"--batch", "--signal=TERM"}); }

void SlurmJobs::cancel(const std::string& id) const { rt::slurm::cancel(id); }

std::string SlurmJobs::suspend(const std::string& id) const { return rt::slurm::suspend(id); }

std::string SlurmJobs::resume(const std::string& id) const { return rt::slurm::resume(id); }

namespace {
std::string log_end(const std::string& path) {  // its last 4 KiB
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(std::max<std::streamoff>(0, size - 4096));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
}  // namespace

std::string SlurmJobs::log_tail(const std::string& id) const {
  std::string text = log_end(s_.state_dir + "/replicas/" + id + ".log");
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  const size_t nl = text.rfind('\n');
  std::string last = nl == std::string::npos ? text : text.substr(nl + 1);
  if (last.size() > 300) last = last.substr(0, 300) + "...";
  return last;
}

bool SlurmJobs::log_says(const std::string& id, const std::string& needle) const {
  return log_end(s_.state_dir + "/replicas/" + id + ".log").find(needle) != std::string::npos;
}

}  // namespace loom::serve

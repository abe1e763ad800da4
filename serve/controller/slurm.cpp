// slurm.cpp — slurm.hpp: sbatch, squeue and scancel, run without a shell.
#include "slurm.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <sstream>

#include "loom/rt/error.hpp"
#include "loom/rt/proc/process.hpp"

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

namespace {

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

std::string run_or_throw(const std::vector<std::string>& argv) {
  std::string out;
  const int rc = rt::run_program(argv, out);
  if (rc != 0)
    throw rt::Error(argv[0] + (rc == 127 ? ": not found (is Slurm installed?)" : " failed (exit " + std::to_string(rc) + "): " + trim(out)));
  return out;
}

}  // namespace

std::string SlurmJobs::submit() const {
  std::vector<std::string> argv = {"sbatch", "--parsable", "--job-name=" + job_name(), "--comment=" + comment(),
                                   "--ntasks=1", "--cpus-per-task=" + std::to_string(s_.cpus),
                                   "--output=" + s_.state_dir + "/replicas/%j.log", "--open-mode=append"};
  if (s_.gpus > 0) argv.push_back("--gpus=" + std::to_string(s_.gpus));
  if (!s_.mem.empty()) argv.push_back("--mem=" + s_.mem);
  if (!s_.partition.empty()) argv.push_back("--partition=" + s_.partition);
  argv.push_back(s_.state_dir + "/replica.sh");
  std::string id = trim(run_or_throw(argv));
  id = id.substr(0, id.find(';'));  // "ID;cluster" on a federation
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
    throw rt::Error("sbatch answered '" + id + "', not a job ID");
  return id;
}

std::vector<JobInfo> SlurmJobs::list() const {
  const std::string user = std::to_string(::getuid());
  const std::string out = run_or_throw({"squeue", "-h", "-t", "all", "-u", user, "--name=" + job_name(), "-o", "%i|%T|%r|%N|%k"});
  std::vector<JobInfo> jobs;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f;
    std::istringstream ls(line);
    for (std::string x; std::getline(ls, x, '|');) f.push_back(x);
    if (f.size() < 5) continue;
    std::string c = f[4];
    for (size_t i = 5; i < f.size(); ++i) c += "|" + f[i];  // a comment may hold '|'
    if (trim(c) != comment()) continue;  // another controller's, or someone's own job of that name
    jobs.push_back({f[0], f[1], f[2], f[3]});
  }
  return jobs;
}

void SlurmJobs::terminate(const std::string& id) const {
  std::string out;
  rt::run_program({"scancel", "--batch", "--signal=TERM", id}, out);
}

void SlurmJobs::cancel(const std::string& id) const {
  std::string out;
  rt::run_program({"scancel", id}, out);
}

}  // namespace loom::serve

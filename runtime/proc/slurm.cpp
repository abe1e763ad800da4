// slurm.cpp — slurm.hpp.
#include "loom/rt/proc/slurm.hpp"

#include <cctype>
#include <sstream>

#include "loom/rt/error.hpp"
#include "loom/rt/proc/process.hpp"

namespace loom::rt::slurm {
namespace {

constexpr int kTimeoutMs = 30000;  // a slurmctld that does not answer is an error, not a hang

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

std::string run_or_throw(const std::vector<std::string>& argv, const std::string& hint) {
  std::string out;
  const int rc = run_program(argv, out, kTimeoutMs);
  if (rc == 127) throw Error(argv[0] + ": not found (is Slurm installed?)" + (hint.empty() ? "" : "; " + hint));
  if (rc != 0) throw Error(argv[0] + " failed (exit " + std::to_string(rc) + "): " + trim(out));
  return out;
}

}  // namespace

std::string submit(const std::vector<std::string>& options, const std::string& script, const std::string& hint) {
  std::vector<std::string> argv = {"sbatch", "--parsable"};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.push_back(script);
  std::string id = trim(run_or_throw(argv, hint));
  id = id.substr(0, id.find(';'));  // "ID;cluster" on a federation
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
    throw Error("sbatch answered '" + id + "', not a job ID");
  return id;
}

std::vector<Job> query(const std::vector<std::string>& filter) {
  std::vector<std::string> argv = {"squeue", "-h"};
  argv.insert(argv.end(), filter.begin(), filter.end());
  argv.insert(argv.end(), {"-o", "%i|%T|%r|%N|%K|%k"});
  std::istringstream in(run_or_throw(argv, ""));
  std::vector<Job> jobs;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f;
    std::istringstream ls(line);
    for (std::string x; std::getline(ls, x, '|');) f.push_back(x);
    if (f.size() < 6) continue;
    std::string comment = f[5];
    for (size_t i = 6; i < f.size(); ++i) comment += "|" + f[i];  // a comment may hold '|'
    jobs.push_back({trim(f[0]), trim(f[1]), trim(f[2]), trim(f[3]), trim(f[4]), trim(comment)});
  }
  return jobs;
}

bool cancel(const std::string& id, const std::vector<std::string>& options) {
  std::vector<std::string> argv = {"scancel"};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.push_back(id);
  std::string out;
  return run_program(argv, out, kTimeoutMs) == 0;
}

namespace {
std::string scontrol(const std::string& verb, const std::string& id) {
  std::string out;
  const int rc = run_program({"scontrol", verb, id}, out, kTimeoutMs);
  if (rc == 0) return "";
  out = trim(out);
  return "scontrol " + verb + " " + id + " failed (exit " + std::to_string(rc) + ")" + (out.empty() ? "" : ": " + out);
}
}  // namespace

std::string suspend(const std::string& id) { return scontrol("suspend", id); }
std::string resume(const std::string& id) { return scontrol("resume", id); }

}  // namespace loom::rt::slurm

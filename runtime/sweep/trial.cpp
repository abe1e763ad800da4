// trial.cpp — a trial's folder (trial.hpp), with nlohmann-json.
#include "trial.hpp"
#include "loom/error.hpp"

#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace loom::sweep {
namespace {

using json = nlohmann::json;

bool exists(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

double read_number(const std::string& path) {
  const std::string s = read_text(path);
  return s.empty() ? 0 : std::strtod(s.c_str(), nullptr);
}

const char* state_name(TrialState s) {
  return s == TrialState::Ok ? "ok" : s == TrialState::Failed ? "failed" : "proposed";
}

}  // namespace

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string trial_dir(const std::string& sweep_dir, int id) { return sweep_dir + "/trials/" + std::to_string(id); }

void write_proposal(const std::string& sweep_dir, Trial& t, const std::string& command) {
  const std::string d = trial_dir(sweep_dir, t.id);
  if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) throw loom::Error(d + ": cannot create", Kind::kIO);
  t.proposed_at = now_seconds();
  json j = {{"id", t.id}, {"u", t.u}, {"values", t.values}, {"after", t.after}, {"proposed_at", t.proposed_at}};
  write_file_atomic(d + "/trial.json", j.dump() + "\n");
  write_file_atomic(d + "/command", command + "\n");
}

bool has_started(const std::string& sweep_dir, const Trial& t) { return exists(trial_dir(sweep_dir, t.id) + "/start"); }

bool read_finish(const std::string& sweep_dir, Trial& t) {
  const std::string d = trial_dir(sweep_dir, t.id);
  const std::string rc = read_text(d + "/rc");
  if (rc.empty()) return false;
  t.rc = std::atoi(rc.c_str());
  t.start = read_number(d + "/start");
  t.end = read_number(d + "/end");
  t.slurm_job = read_text(d + "/job");
  while (!t.slurm_job.empty() && (t.slurm_job.back() == '\n' || t.slurm_job.back() == ' ')) t.slurm_job.pop_back();
  return true;
}

double read_metric(const std::string& metrics_file, const std::string& metric) {
  std::ifstream in(metrics_file);
  if (!in) throw loom::Error("the trial wrote no metrics file", Kind::kInput);
  std::string line;
  bool found = false;
  double value = 0;
  while (std::getline(in, line)) {
    if (line.find('"' + metric + '"') == std::string::npos) continue;
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains(metric) || !j[metric].is_number()) continue;
    value = j[metric].get<double>();
    found = true;
  }
  if (!found) throw loom::Error("metric '" + metric + "' is not in the metrics file (JSON lines)", Kind::kInput);
  if (!std::isfinite(value)) throw loom::Error("metric '" + metric + "' is not finite", Kind::kInput);
  return value;
}

void write_result(const std::string& sweep_dir, const Trial& t) {
  json j = {{"state", state_name(t.state)}, {"rc", t.rc}, {"start", t.start}, {"end", t.end}, {"job", t.slurm_job}};
  if (t.state == TrialState::Ok) j["value"] = t.value;
  if (!t.error.empty()) j["error"] = t.error;
  write_file_atomic(trial_dir(sweep_dir, t.id) + "/result.json", j.dump() + "\n");
}

bool load_trial(const std::string& sweep_dir, const Space& space, int id, Trial& t) {
  const std::string d = trial_dir(sweep_dir, id);
  const json p = json::parse(read_text(d + "/trial.json"), nullptr, false);
  if (p.is_discarded() || !exists(d + "/command")) return false;
  t = Trial{};
  t.id = id;
  t.u = p.at("u").get<std::vector<double>>();
  if (t.u.size() != space.dims()) throw loom::Error(d + "/trial.json: a point of another spec", Kind::kInput);
  t.values = space.decode(t.u);
  t.after = p.value("after", -1);
  t.proposed_at = p.value("proposed_at", 0.0);
  const json r = json::parse(read_text(d + "/result.json"), nullptr, false);
  if (r.is_discarded()) return true;  // proposed, no result
  const std::string state = r.value("state", "");
  t.state = state == "ok" ? TrialState::Ok : TrialState::Failed;
  t.value = r.value("value", 0.0);
  t.error = r.value("error", "");
  t.rc = r.value("rc", -1);
  t.start = r.value("start", 0.0);
  t.end = r.value("end", 0.0);
  t.slurm_job = r.value("job", "");
  return true;
}

}  // namespace loom::sweep

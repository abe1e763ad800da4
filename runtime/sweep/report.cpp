// report.cpp — a sweep's result as JSON (Contract 11: every trial, then the best) and as text.
#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "sweep.hpp"

namespace loom::sweep {
namespace {

using json = nlohmann::ordered_json;

json params_json(const Space& space, const Point& v) {
  json p = json::object();
  for (size_t i = 0; i < space.dims(); ++i) {
    const Param& q = space.params()[i];
    const std::string text = space.format(i, v[i]);
    if (q.type == ParamType::Choice) p[q.name] = text;
    else if (q.type == ParamType::Int) p[q.name] = std::stoll(text);
    else p[q.name] = std::stod(text);
  }
  return p;
}

json summary(std::vector<double> xs) {
  if (xs.empty()) return nullptr;
  std::sort(xs.begin(), xs.end());
  return {{"n", xs.size()}, {"median", xs[xs.size() / 2]}, {"max", xs.back()}};
}

const char* state_text(TrialState s) {
  return s == TrialState::Ok ? "ok" : s == TrialState::Failed ? "failed" : "not finished";
}

}  // namespace

std::string result_json(const Spec& spec, const SweepResult& r) {
  const Space space(spec.params);
  json trials = json::array();
  for (const auto& t : r.trials) {
    json j = {{"id", t.id}, {"params", params_json(space, t.values)}, {"state", state_text(t.state)}};
    if (t.state == TrialState::Ok) j["value"] = t.value;
    if (!t.error.empty()) j["error"] = t.error;
    if (!t.slurm_job.empty()) j["job"] = t.slurm_job;
    if (t.end > 0 && t.start > 0) j["seconds"] = t.end - t.start;
    trials.push_back(j);
  }
  json out = {{"metric", spec.metric}, {"goal", spec.maximise ? "max" : "min"},
              {"method", spec.bayes ? "bayes" : "random"}, {"job", r.job}, {"complete", r.complete}};
  if (!r.error.empty()) out["error"] = r.error;
  out["overhead_s"] = summary(r.overhead);
  out["start_lag_s"] = summary(r.start_lag);
  out["trials"] = trials;
  if (r.best >= 0) {
    const Trial& b = r.trials[static_cast<size_t>(r.best)];
    out["best"] = {{"id", b.id}, {"value", b.value}, {"params", params_json(space, b.values)}};
  } else {
    out["best"] = nullptr;
  }
  return out.dump() + "\n";
}

std::string result_text(const Spec& spec, const SweepResult& r) {
  const Space space(spec.params);
  std::string s;
  char line[256];
  const int ok = static_cast<int>(std::count_if(r.trials.begin(), r.trials.end(),
                                                [](const Trial& t) { return t.state == TrialState::Ok; }));
  std::snprintf(line, sizeof line, "sweep: %d trials, %d ok, %d failed (%s, array job %s)\n",
                static_cast<int>(r.trials.size()), ok,
                static_cast<int>(std::count_if(r.trials.begin(), r.trials.end(),
                                               [](const Trial& t) { return t.state == TrialState::Failed; })),
                spec.bayes ? "bayes" : "random", r.job.c_str());
  s += line;
  auto lag = [&](const char* what, std::vector<double> xs) {
    if (xs.empty()) return;
    std::sort(xs.begin(), xs.end());
    std::snprintf(line, sizeof line, "sweep: %s: median %.2f s, max %.2f s over %zu trials\n", what,
                  xs[xs.size() / 2], xs.back(), xs.size());
    s += line;
  };
  lag("from a trial's end to the next trial's command", r.overhead);
  lag("from a trial's end to the next trial's start", r.start_lag);
  if (r.best >= 0) {
    const Trial& b = r.trials[static_cast<size_t>(r.best)];
    std::string params;
    for (size_t i = 0; i < space.dims(); ++i) params += " " + space.params()[i].name + "=" + space.format(i, b.values[i]);
    std::snprintf(line, sizeof line, "best: trial %d, %s %.6g:", b.id, spec.metric.c_str(), b.value);
    s += line + params + "\n";
  } else {
    s += "best: none (no trial succeeded)\n";
  }
  return s;
}

}  // namespace loom::sweep

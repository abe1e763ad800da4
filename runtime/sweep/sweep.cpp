// sweep.cpp — the sweep controller (sweep.hpp).
#include "sweep.hpp"
#include "loom/error.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "launcher.hpp"
#include "loom/rt/io/tensorboard.hpp"
#include "propose.hpp"

namespace loom::sweep {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

std::string params_text(const Space& space, const Point& v) {
  std::string s;
  for (size_t i = 0; i < space.dims(); ++i) s += (i ? " " : "") + space.params()[i].name + "=" + space.format(i, v[i]);
  return s;
}

// "5,7-23" from sorted ids.
std::string array_ranges(const std::vector<int>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    s += (s.empty() ? "" : ",") + std::to_string(ids[i]) + (j > i ? "-" + std::to_string(ids[j]) : "");
    i = j + 1;
  }
  return s;
}

class Controller {
 public:
  Controller(const Spec& spec, const SweepOptions& o)
      : spec_(spec), o_(o), space_(spec.params), proposer_(space_, spec.bayes, spec.init_trials, spec.seed) {}
  SweepResult run();

 private:
  void say(const std::string& line) const {
    if (o_.log) o_.log->write(LogLevel::kInfo, line);
  }
  void prepare_dir();
  std::vector<int> resume();  // returns the ids still to run
  void propose(std::vector<int>& todo, int after);
  void finish_trial(Trial& t);
  void board(const Trial& t);
  void check_lost();
  History history() const;
  int count(TrialState s) const {
    return static_cast<int>(
        std::count_if(trials_.begin(), trials_.end(), [s](const Trial& t) { return t.id >= 0 && t.state == s; }));
  }
  int in_flight() const { return count(TrialState::Proposed); }
  void save_state() const {
    json j = {{"job", launcher_->job()}, {"executor", o_.local ? "local" : "slurm"}};
    write_file_atomic(o_.dir + "/sweep.json", j.dump() + "\n");
  }

  const Spec& spec_;
  SweepOptions o_;
  Space space_;
  Proposer proposer_;
  std::vector<Trial> trials_;  // by id; id -1 where none was proposed yet
  std::unique_ptr<Launcher> launcher_;
  bool attached_ = false;  // resumed onto an array job that is still queued
  int last_finished_ = -1;
  bool board_warned_ = false;
  std::string fatal_;
};

void Controller::prepare_dir() {
  if (o_.dir.find('%') != std::string::npos) throw SpecError("--dir: '%' is not allowed (sbatch reads it as a pattern)");
  std::error_code ec;
  fs::create_directories(o_.dir + "/trials", ec);
  fs::create_directories(o_.dir + "/logs", ec);
  if (ec) throw loom::Error(o_.dir + ": cannot create the sweep folder: " + ec.message(), Kind::kIO);
  o_.dir = fs::canonical(o_.dir).string();
  const std::string stored = o_.dir + "/spec.yaml";
  if (fs::exists(stored)) {
    if (read_text(stored) != spec_.text)
      throw SpecError(o_.dir + " holds a sweep of another spec (spec.yaml differs): use a new --dir");
  } else {
    write_file_atomic(stored, spec_.text);
  }
  fs::remove(o_.dir + "/stop", ec);
  write_wrapper(o_.dir);
}

std::vector<int> Controller::resume() {
  trials_.assign(static_cast<size_t>(spec_.trials), Trial{});
  for (auto& t : trials_) t.id = -1;
  std::string job, executor;
  const auto state = nlohmann::json::parse(read_text(o_.dir + "/sweep.json"), nullptr, false);
  if (!state.is_discarded()) job = state.value("job", ""), executor = state.value("executor", "");
  launcher_ = o_.local ? local_launcher(o_.dir) : slurm_launcher(o_.dir, spec_.sbatch_args, executor == "slurm" ? job : "");
  const bool attached = !o_.local && executor == "slurm" && launcher_->alive();
  std::vector<int> todo;
  int done = 0;
  for (int id = 0; id < spec_.trials; ++id) {
    Trial t;
    if (!load_trial(o_.dir, space_, id, t)) {
      todo.push_back(id);
      continue;
    }
    trials_[id] = t;
    Trial& mine = trials_[id];
    if (mine.state == TrialState::Proposed && read_finish(o_.dir, mine)) finish_trial(mine);
    if (mine.state != TrialState::Proposed) {
      ++done;
    } else if (!attached) {  // its task is gone: run it again
      fs::remove_all(trial_dir(o_.dir, id));
      mine.id = -1;
      todo.push_back(id);
    }
  }
  if (done || attached)
    say("resuming " + o_.dir + ": " + std::to_string(done) + " trials done" +
        (attached ? ", array job " + launcher_->job() + " still queued" : ""));
  attached_ = attached;
  return todo;
}

History Controller::history() const {
  History h;
  for (const auto& t : trials_) {
    if (t.id < 0) continue;
    if (t.state == TrialState::Ok) h.done.push_back(t.u), h.value.push_back(spec_.maximise ? -t.value : t.value);
    if (t.state == TrialState::Proposed) h.pending.push_back(t.u);
  }
  return h;
}

void Controller::propose(std::vector<int>& todo, int after) {
  const int room = std::min<int>(spec_.parallel - in_flight(), static_cast<int>(todo.size()));
  if (room <= 0) return;
  const auto points = proposer_.propose(history(), static_cast<size_t>(room));
  for (const auto& u : points) {
    Trial& t = trials_[todo.front()];
    t = Trial{};
    t.id = todo.front();
    t.u = u;
    t.values = space_.decode(u);
    t.after = after;
    todo.erase(todo.begin());
    const std::string metrics = trial_dir(o_.dir, t.id) + "/metrics.jsonl";
    write_proposal(o_.dir, t, expand_command(spec_, space_, t.values, metrics));
    launcher_->launched(t.id);
  }
}

void Controller::finish_trial(Trial& t) {
  if (t.rc != 0) {
    t.state = TrialState::Failed;
    t.error = "exit status " + std::to_string(t.rc) + " (log: " + o_.dir + "/logs/trial-" + std::to_string(t.id) + ".out)";
  } else {
    try {
      t.value = read_metric(trial_dir(o_.dir, t.id) + "/metrics.jsonl", spec_.metric);
      t.state = TrialState::Ok;
    } catch (const std::exception& e) {
      t.state = TrialState::Failed;
      t.error = e.what();
    }
  }
  write_result(o_.dir, t);
  board(t);
  last_finished_ = t.id;
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f s", t.end - t.start);
  if (t.state == TrialState::Ok) {
    char v[32];
    std::snprintf(v, sizeof v, "%.6g", t.value);
    say("trial " + std::to_string(t.id) + " ok: " + params_text(space_, t.values) + " -> " + spec_.metric + " " + v +
        " (" + secs + ")");
  } else {
    say("trial " + std::to_string(t.id) + " failed: " + params_text(space_, t.values) + ": " + t.error);
  }
}

// --tensorboard DIR: DIR/trial-N, one HParams session with the trial's values and its metric.
void Controller::board(const Trial& t) {
  if (o_.tensorboard.empty()) return;
  try {
    rt::EventWriter w(o_.tensorboard + "/trial-" + std::to_string(t.id));
    std::vector<rt::EventWriter::HParam> hp;
    for (size_t i = 0; i < space_.dims(); ++i) {
      const Param& p = space_.params()[i];
      const std::string ran = space_.format(i, t.values[i]);  // what the command was given
      if (p.type == ParamType::Choice) hp.push_back({p.name, false, 0, ran});
      else hp.push_back({p.name, true, std::stod(ran), ""});
    }
    w.session_start(hp, t.start > 0 ? t.start : t.proposed_at);
    if (t.state == TrialState::Ok) w.scalars(0, {{spec_.metric, t.value}});
    w.session_end(t.state == TrialState::Ok, t.end);
    w.flush();
  } catch (const std::exception& e) {
    if (!board_warned_) say(std::string("cannot write the TensorBoard runs: ") + e.what());
    board_warned_ = true;
  }
}

void Controller::check_lost() {
  std::vector<int> started;
  for (const auto& t : trials_)
    if (t.id >= 0 && t.state == TrialState::Proposed && has_started(o_.dir, t)) started.push_back(t.id);
  for (int id : launcher_->lost(started)) {
    Trial& t = trials_[id];
    if (read_finish(o_.dir, t)) {  // it ended between the two looks
      finish_trial(t);
      continue;
    }
    t.state = TrialState::Failed;
    t.error = "its task ended without an exit status (killed or cancelled; log: " + o_.dir + "/logs/trial-" +
              std::to_string(id) + ".out)";
    t.end = now_seconds();
    write_result(o_.dir, t);
    say("trial " + std::to_string(id) + " failed: " + t.error);
  }
}

}  // namespace

namespace {

SweepResult Controller::run() {
  prepare_dir();
  std::vector<int> todo = resume();
  if (!attached_ && !todo.empty()) {
    launcher_->start(array_ranges(todo), spec_.parallel);
    if (!o_.local)
      say("array job " + launcher_->job() + ": trials " + array_ranges(todo) + ", " + std::to_string(spec_.parallel) +
          " at a time");
  }
  save_state();
  double last_check = now_seconds();
  int gone_polls = 0;
  while ((in_flight() > 0 || !todo.empty()) && fatal_.empty()) {
    if (o_.interrupted && o_.interrupted->load()) {
      fatal_ = "interrupted: the sweep resumes with the same --spec and --dir";
      break;
    }
    propose(todo, last_finished_);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (auto& t : trials_)
      if (t.id >= 0 && t.state == TrialState::Proposed && read_finish(o_.dir, t)) finish_trial(t);
    if (now_seconds() - last_check > 1) {
      last_check = now_seconds();
      check_lost();
      gone_polls = o_.local || launcher_->alive() ? 0 : gone_polls + 1;
      if (gone_polls >= 3 && (in_flight() > 0 || !todo.empty()))
        fatal_ = "array job " + launcher_->job() + " is gone with " + std::to_string(in_flight() + todo.size()) +
                 " trials not run (scancel, or a time limit? logs: " + o_.dir + "/logs)";
    }
    const int failed = count(TrialState::Failed);
    if (failed >= spec_.max_failures && fatal_.empty()) {
      const auto last = std::find_if(trials_.rbegin(), trials_.rend(),
                                     [](const Trial& t) { return t.id >= 0 && t.state == TrialState::Failed; });
      fatal_ = std::to_string(failed) + " trials failed (max_failures " + std::to_string(spec_.max_failures) +
               "); the last, trial " + std::to_string(last->id) + ": " + last->error;
    }
  }
  write_file_atomic(o_.dir + "/stop", "");  // tasks still waiting for a command end at once
  if (!fatal_.empty()) launcher_->cancel();
  SweepResult r;
  r.job = launcher_->job();
  r.error = fatal_;
  r.complete = fatal_.empty();
  for (const auto& t : trials_) {
    if (t.id < 0) continue;
    r.trials.push_back(t);
    if (t.state == TrialState::Ok) {
      const auto& b = r.best < 0 ? t : r.trials[static_cast<size_t>(r.best)];
      if (r.best < 0 || (spec_.maximise ? t.value > b.value : t.value < b.value))
        r.best = static_cast<int>(r.trials.size() - 1);
    }
    if (t.after >= 0 && t.state != TrialState::Proposed && trials_[t.after].end > 0) {
      r.overhead.push_back(t.proposed_at - trials_[t.after].end);
      if (t.start > 0) r.start_lag.push_back(t.start - trials_[t.after].end);
    }
  }
  return r;
}

}  // namespace

SweepResult run_sweep(const Spec& spec, const SweepOptions& opts) { return Controller(spec, opts).run(); }

}  // namespace loom::sweep

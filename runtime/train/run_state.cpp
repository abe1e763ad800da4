// run_state.cpp — train.config, checkpoint snapshots and resuming a run from one.
#include "loom/rt/train/run_state.hpp"

#include <nlohmann/json.hpp>

#include "loom/rt/io/json.hpp"
#include "loom/rt/error.hpp"
#include "loom/rt/train/train_config.hpp"

namespace loom::rt {

RunState::RunState(const TrainConfig& c, const Ranks& ranks, const Reporter& rep, const Task& task, int64_t total,
                   const std::string& precision)
    : c_(c), ranks_(ranks), rep_(rep), total_(total) {
  nlohmann::json tc;
  tc["model"] = nlohmann::json::parse(task.config_json());
  tc["data"] = c.model != ModelKind::kGpt ? c.data_dir : c.token_files.empty() ? c.text_path : "tokens:" + c.token_files;
  tc["global_batch"] = c.global_batch;
  tc["total_steps"] = total;
  tc["optimizer"] = {{"kind", word_of(c.optim.kind)}, {"momentum", c.optim.momentum}, {"nesterov", c.optim.nesterov},
                     {"weight_decay", c.optim.weight_decay}};
  tc["lr"] = {{"base", c.lr}, {"schedule", word_of(c.schedule)}, {"warmup", c.warmup}};
  tc["clip"] = c.clip;
  tc["seed"] = c.seed;
  tc["precision"] = precision;
  tc["grad_compress"] = c.grad_compress;
  if (!c.teacher_path.empty())  // a distillation resumes only with the teacher and the loss it began with
    tc["distill"] = {{"teacher", c.teacher_path}, {"temperature", c.temperature}, {"alpha", c.alpha}};
  identity_ = tc.dump();
}

// Training longer (or shorter) than the checkpoint's run planned: a constant learning rate does
// not depend on the total; a cosine schedule does, and is re-planned only when asked.
void RunState::check_total(const std::string& path, const Checkpoint& k) const {
  int64_t planned = total_;
  try {
    planned = parse_json_text(k.train_config, path + ": train.config").at("total_steps").get<int64_t>();
  } catch (const nlohmann::json::exception&) {
    throw Error(path + ": train.config has no total_steps (corrupt checkpoint)");
  }
  if (planned == total_) return;
  const std::string both = std::to_string(planned) + " steps, this run " + std::to_string(total_);
  if (c_.schedule == Schedule::kCosine && !c_.lr_replan)
    throw Error(path + ": checkpoint of another configuration (total_steps: the checkpoint's run planned " + both +
                "); the cosine learning-rate schedule depends on the total: pass --lr-replan to re-plan it over " +
                std::to_string(total_) + " steps, or resume with the checkpoint's --steps/--epochs");
  rep_.say(c_.schedule == Schedule::kCosine
               ? "re-planning the cosine schedule over " + std::to_string(total_) + " steps (the checkpoint's run planned " +
                     std::to_string(planned) + ")"
               : "the checkpoint's run planned " + both + ": the learning rate is constant, nothing to re-plan",
           LogFields(LogLevel::kInfo, {{"event", "replan"}, {"total_steps", total_}}));
}

Position RunState::resume(CheckpointWriter& ckpt, RunParts parts) {
  Position pos;
  if (auto loaded = ckpt.find_resume(identity_, {"total_steps"})) {
    const Checkpoint& k = loaded->second;
    check_total(loaded->first, k);
    auto st = parse_json_text(k.state_json, loaded->first + ": state/json");
    std::vector<Param>& ps = parts.task.params();
    auto by_name = [&](const std::vector<std::pair<std::string, Tensor>>& ts, const std::string& name) -> const Tensor* {
      for (const auto& t : ts)
        if (t.first == name) return &t.second;
      return nullptr;
    };
    std::vector<Tensor> m, v;
    for (auto& p : ps) {
      const Tensor* t = by_name(k.params, p.name);
      if (!t || t->shape() != p.value.shape())
        throw Error(loaded->first + ": no /params/" + p.name + " of shape " + p.value.shape_str());
      p.value = t->to(p.value.device());
      if (const Tensor* tm = by_name(k.opt_m, p.name)) m.push_back(tm->to(p.value.device()));
      if (const Tensor* tv = by_name(k.opt_v, p.name)) v.push_back(tv->to(p.value.device()));
    }
    if ((!m.empty() && m.size() != ps.size()) || (!v.empty() && v.size() != ps.size()))
      throw Error(loaded->first + ": the optimizer state does not cover every parameter");
    parts.opt.restore(std::move(m), std::move(v), st.at("opt_t").get<int64_t>());
    parts.precision.amp().restore(st.at("loss_scale").get<float>(), st.at("clean_steps").get<int>());
    parts.task.set_rng_state(k.rng);
    pos.step = st.at("step").get<int64_t>();
    pos.epoch = st.at("epoch").get<int64_t>();
    pos.batch = st.at("batch").get<int64_t>();
    const int world = st.at("world").get<int>();
    if (world == ranks_.size) {
      parts.plan.balancer().restore(st.at("shares").get<std::vector<int>>(), st.at("speeds").get<std::vector<double>>(),
                                    st.at("observed").get<int>());
    } else {
      rep_.say("resharding: the checkpoint was written by " + std::to_string(world) + " ranks, resuming on " +
                   std::to_string(ranks_.size) + "; shares start again from the device weights",
               LogFields(LogLevel::kInfo, {{"event", "reshard"}}));
    }
    rep_.say("resumed from " + loaded->first + " at step " + std::to_string(pos.step) + " (epoch " +
                 std::to_string(pos.epoch) + ")",
             LogFields(LogLevel::kInfo, {{"event", "resume"}, {"step", pos.step}}));
    if (ranks_.many() && parts.sync.powersgd()) {
      if (world == ranks_.size && k.shards == ranks_.size) {
        parts.sync.exchange().restore(k.rank_state[static_cast<size_t>(ranks_.me)]);
      } else {
        rep_.say("PowerSGD's error feedback and warm-started Q belong to the " + std::to_string(world) +
                     " ranks that wrote the checkpoint: they start again from zero on " + std::to_string(ranks_.size),
                 LogFields(LogLevel::kWarning, {{"event", "resume_powersgd"}}));
      }
    }
  }
  for (double s : ranks_.gather(static_cast<double>(pos.step)))
    if (s != static_cast<double>(pos.step)) throw Error("ranks resumed at different steps (is --ckpt-dir shared by every node?)");
  return pos;
}

CheckpointState RunState::snapshot(RunParts parts, Position next) const {
  CheckpointState k;
  k.model_config = parts.task.config_json();
  k.train_config = identity_;
  const auto& ps = parts.task.params();
  const Optimizer& opt = parts.opt;
  std::vector<Tensor> m, v;  // whole, per parameter, also when --zero 1 shards them
  parts.sync.moments(opt, ps, &m, &v);
  for (const auto& p : ps) k.tensors.push_back({"params", p.name, p.value});
  for (size_t i = 0; i < m.size(); ++i) k.tensors.push_back({"optimizer/m", ps[i].name, m[i]});
  for (size_t i = 0; i < v.size(); ++i) k.tensors.push_back({"optimizer/v", ps[i].name, v[i]});
  if (ranks_.many()) k.rank_state = parts.sync.exchange().state();
  const Balancer& bal = parts.plan.balancer();
  nlohmann::json st;
  st["step"] = next.step;
  st["epoch"] = next.epoch;
  st["batch"] = next.batch;
  st["world"] = ranks_.size;
  st["opt_t"] = opt.steps();
  st["loss_scale"] = parts.precision.amp().scale();
  st["clean_steps"] = parts.precision.amp().clean_steps();
  st["shares"] = bal.shares();
  st["speeds"] = bal.speeds();
  st["observed"] = bal.observed();
  k.state_json = st.dump();
  k.rng = parts.task.rng_state();
  return k;
}

}  // namespace loom::rt

// batch_plan.cpp — shares of the global batch per rank, their re-plans and the stragglers.
#include "loom/rt/train/batch_plan.hpp"

#include "loom/rt/train/train_config.hpp"

namespace loom::rt {

BatchPlan::BatchPlan(const TrainConfig& c, const Ranks& ranks, const Reporter& rep)
    : global_(c.global_batch), ranks_(ranks), rep_(rep), bal_(c.balance, c.global_batch, ranks.size, c.replan_every) {
  bal_.start(ranks_.gather(c.device_weight));
  if (ranks_.many())
    rep_.say(std::string("balance ") + word_of(c.balance) + ": shares " + shares_text(), LogFields(LogLevel::kInfo, {{"event", "shares"}}));
}

std::string BatchPlan::shares_text() const {
  std::string t;
  for (size_t i = 0; i < bal_.shares().size(); ++i) t += (i ? "," : "") + std::to_string(bal_.shares()[i]);
  return t;
}

void BatchPlan::observe(double compute_seconds) {
  const std::vector<double> seconds = ranks_.gather(compute_seconds);
  for (int straggler : bal_.stragglers(seconds))
    rep_.say("rank " + std::to_string(straggler) + " is a straggler: its step took " +
                 num(seconds[static_cast<size_t>(straggler)]) + " s, more than 1.5x what its share predicts",
             LogFields(LogLevel::kWarning, {{"event", "straggler"}, {"straggler", straggler}}));
  if (bal_.observe(seconds)) rep_.say("re-planned shares " + shares_text(), LogFields(LogLevel::kInfo, {{"event", "shares"}}));
}

}  // namespace loom::rt

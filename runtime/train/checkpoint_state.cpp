// checkpoint_state.cpp — what a resume checks of a loom-train checkpoint before it touches
// anything (check_train_state): a checkpoint is a file people copy, read as data from a stranger.
#include <algorithm>
#include <climits>
#include <cmath>
#include <nlohmann/json.hpp>

#include "loom/rt/error.hpp"
#include "loom/rt/io/json.hpp"
#include "loom/rt/train/checkpoint_writer.hpp"

namespace loom::rt {

namespace {

[[noreturn]] void bad_state(const std::string& path, const std::string& why) {
  throw Error(path + ": " + why + " (a damaged or crafted checkpoint: a resume would not use it)");
}

// state/json's `key`: a whole number from lo to hi.
int64_t whole(const std::string& path, const nlohmann::json& st, const char* key, int64_t lo, int64_t hi) {
  const auto it = st.find(key);
  if (it == st.end() || !it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi ||
      (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi)))
    bad_state(path, std::string("state/json's ") + key + " is " + (it == st.end() ? "missing" : it->dump().substr(0, 40)) +
                        ", not a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
  return it->get<int64_t>();
}

void check_moments(const std::string& path, const Checkpoint& k, const char* group, const std::vector<std::pair<std::string, Tensor>>& ms) {
  for (const auto& m : ms) {
    const auto p = std::find_if(k.params.begin(), k.params.end(), [&](const auto& q) { return q.first == m.first; });
    if (p == k.params.end()) bad_state(path, std::string(group) + "/" + m.first + " belongs to no parameter");
    if (p->second.shape() != m.second.shape())
      bad_state(path, std::string(group) + "/" + m.first + " is " + m.second.shape_str() + ", its parameter " + p->second.shape_str());
  }
  if (!ms.empty() && ms.size() != k.params.size()) bad_state(path, std::string(group) + " does not cover every parameter");
}

}  // namespace

void check_train_state(const std::string& path, const Checkpoint& k) {
  const nlohmann::json st = parse_json_text(k.state_json, path + ": state/json");
  if (!st.is_object()) bad_state(path, "state/json is not an object");
  constexpr int64_t kMost = int64_t{1} << 53;
  for (const char* key : {"step", "epoch", "batch", "opt_t", "clean_steps", "observed"})
    whole(path, st, key, 0, std::string(key) == "clean_steps" || std::string(key) == "observed" ? INT32_MAX : kMost);
  const int64_t world = whole(path, st, "world", 1, 65536);
  const auto scale = st.find("loss_scale");
  if (scale == st.end() || !scale->is_number() || !std::isfinite(scale->get<double>()) || !(scale->get<double>() > 0) ||
      scale->get<double>() > 3.4e38)
    bad_state(path, "state/json's loss_scale is not a positive finite number");
  for (const char* key : {"shares", "speeds"}) {
    const auto v = st.find(key);
    if (v == st.end() || !v->is_array() || static_cast<int64_t>(v->size()) != world) bad_state(path, std::string("state/json's ") + key + " are not one per rank");
    for (const auto& x : *v)
      if (!x.is_number() || !std::isfinite(x.get<double>()) || x.get<double>() < 0 || (std::string(key) == "shares" && (!x.is_number_integer() || x.get<int64_t>() > INT32_MAX)))
        bad_state(path, std::string("state/json's ") + key + " hold " + x.dump().substr(0, 40));
  }
  check_moments(path, k, "optimizer/m", k.opt_m);
  check_moments(path, k, "optimizer/v", k.opt_v);
  std::string kind;
  try {
    kind = parse_json_text(k.train_config, path + ": train.config").at("optimizer").at("kind").get<std::string>();
  } catch (const nlohmann::json::exception&) {
    bad_state(path, "train.config names no optimizer");
  }
  if (kind == "adamw" && k.opt_m.empty() != k.opt_v.empty()) bad_state(path, "AdamW's state has one of its two moments (optimizer/m and optimizer/v)");
}

}  // namespace loom::rt

// checkpoint_resume.cpp — CheckpointWriter's choice of the checkpoint a run resumes from: the
// newest in the folder that verifies (the others skipped and named), or the file asked for, and
// never one of another configuration.
#include <dirent.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "loom/rt/io/json.hpp"
#include "loom/rt/error.hpp"
#include "loom/rt/train/checkpoint_writer.hpp"

namespace loom::rt {

namespace {

// "ckpt-0000000120.h5" -> 120; -1 for anything else (temporary files included).
int64_t step_of(const std::string& name) {
  if (name.size() < 9 || name.compare(0, 5, "ckpt-") != 0 || name.compare(name.size() - 3, 3, ".h5") != 0) return -1;
  const std::string digits = name.substr(5, name.size() - 8);
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

// The first key (depth-first) where two train.config objects differ, with both values.
std::string first_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& at = "") {
  if (a.is_object() && b.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it) {
      const std::string key = at.empty() ? it.key() : at + "." + it.key();
      if (!b.contains(it.key())) return key + " (not in this run)";
      std::string d = first_difference(it.value(), b.at(it.key()), key);
      if (!d.empty()) return d;
    }
    for (auto it = b.begin(); it != b.end(); ++it)
      if (!a.contains(it.key())) return (at.empty() ? it.key() : at + "." + it.key()) + " (not in the checkpoint)";
    return "";
  }
  if (a == b) return "";
  std::string sa = a.dump(), sb = b.dump();
  if (sa.size() > 60) sa = sa.substr(0, 57) + "...";
  if (sb.size() > 60) sb = sb.substr(0, 57) + "...";
  return at + ": " + sa + " in the checkpoint, " + sb + " in this run";
}

}  // namespace

std::vector<std::pair<int64_t, std::string>> CheckpointWriter::list(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    int64_t s = step_of(e->d_name);
    if (s >= 0) out.emplace_back(s, dir + "/" + e->d_name);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::pair<std::string, Checkpoint>> CheckpointWriter::find_resume(const std::string& train_config,
                                                                                   const std::vector<std::string>& may_differ) {
  if (resume_ == "never") return std::nullopt;
  auto check = [&](const std::string& path, const Checkpoint& k) {
    nlohmann::json a, b = nlohmann::json::parse(train_config);
    try {
      a = parse_json_text(k.train_config, path + ": train.config");
    } catch (const nlohmann::json::exception&) {
      throw Error(path + ": train.config is not valid JSON (corrupt checkpoint)");
    }
    for (const auto& key : may_differ) {
      if (a.is_object()) a.erase(key);
      b.erase(key);
    }
    std::string d = first_difference(a, b);
    if (!d.empty())
      throw Error(path + ": checkpoint of another configuration (" + d +
                  "); resume with the same options, or start over with --resume never");
  };
  if (resume_ != "auto") {
    Checkpoint k = load_checkpoint(resume_);
    check(resume_, k);
    check_train_state(resume_, k);
    return std::make_pair(resume_, std::move(k));
  }
  auto files = list(dir_);
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    Checkpoint k;
    try {
      k = load_checkpoint(it->second);
      check_train_state(it->second, k);
    } catch (const Error& e) {
      // The error names the file at fault: the index, or one of its shards.
      const std::string what = e.what(), file = it->second;
      log_("skipping a checkpoint that does not verify: " +
               (what.compare(0, file.size(), file) == 0 ? what : file + ": " + what),
           LogFields(LogLevel::kWarning, {{"event", "checkpoint_skipped"}, {"file", it->second}}));
      continue;
    }
    check(it->second, k);
    return std::make_pair(it->second, std::move(k));
  }
  return std::nullopt;
}

}  // namespace loom::rt

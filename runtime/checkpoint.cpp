// checkpoint.cpp — CheckpointWriter: the cadence, the background writer, pruning and the
// choice of the checkpoint to resume from.
#include "loom/rt/checkpoint.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "loom/rt/trainer.hpp"

namespace loom::rt {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

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

CheckpointWriter::CheckpointWriter(const TrainConfig& c, int rank, Log log)
    : dir_(c.ckpt_dir), resume_(c.resume), async_(c.ckpt_async), every_(c.ckpt_every), every_min_(c.ckpt_every_min),
      keep_(c.ckpt_keep), rank_(rank), stop_(c.stop_signal), log_(std::move(log)), last_(std::chrono::steady_clock::now()) {
  if (every_ < 0) throw Error("--ckpt-every must not be negative");
  if (!(every_min_ >= 0)) throw Error("--ckpt-every-min must not be negative");
  if (keep_ < 1) throw Error("--ckpt-keep must be at least 1");
  if ((every_ > 0 || every_min_ > 0 || async_) && dir_.empty())
    throw Error("--ckpt-every, --ckpt-every-min and --ckpt-async need --ckpt-dir");
  if (resume_ == "auto" && dir_.empty()) resume_ = "never";
  if (dir_.empty()) return;
  struct stat st;
  if (stat(dir_.c_str(), &st) != 0) {
    if (rank_ == 0 && mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST)
      throw Error("--ckpt-dir " + dir_ + ": cannot create: " + std::strerror(errno));
  } else if (!S_ISDIR(st.st_mode)) {
    throw Error("--ckpt-dir " + dir_ + ": not a folder");
  }
  if (rank_ != 0) return;
  // Temporary files of a writer that was killed: never loaded, removed.
  if (DIR* d = opendir(dir_.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.compare(0, 5, "ckpt-") == 0 && n.find(".h5.tmp.") != std::string::npos) std::remove((dir_ + "/" + n).c_str());
    }
    closedir(d);
  }
}

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

bool CheckpointWriter::stop_requested() const { return stop_ && stop_->load() != 0; }

std::string CheckpointWriter::path_for(int64_t step) const {
  char name[40];
  std::snprintf(name, sizeof name, "ckpt-%010lld.h5", static_cast<long long>(step));
  return dir_ + "/" + name;
}

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

bool CheckpointWriter::due(int64_t done) {
  flush_messages();
  if (!enabled()) return false;
  if (every_ > 0 && done % every_ == 0) return true;
  return every_min_ > 0 && seconds_since(last_) >= every_min_ * 60;
}

std::optional<std::pair<std::string, Checkpoint>> CheckpointWriter::find_resume(const std::string& train_config) {
  if (resume_ == "never") return std::nullopt;
  auto check = [&](const std::string& path, const Checkpoint& k) {
    nlohmann::json a, b = nlohmann::json::parse(train_config);
    try {
      a = nlohmann::json::parse(k.train_config);
    } catch (const nlohmann::json::exception&) {
      throw Error(path + ": train.config is not valid JSON (corrupt checkpoint)");
    }
    std::string d = first_difference(a, b);
    if (!d.empty())
      throw Error(path + ": checkpoint of another configuration (" + d +
                  "); resume with the same options, or start over with --resume never");
  };
  if (resume_ != "auto") {
    Checkpoint k = load_checkpoint(resume_);
    check(resume_, k);
    return std::make_pair(resume_, std::move(k));
  }
  auto files = list(dir_);
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    Checkpoint k;
    try {
      k = load_checkpoint(it->second);
    } catch (const Error& e) {
      log_("skipping a checkpoint that does not verify: " + std::string(e.what()),
           "\"level\":\"warning\",\"event\":\"checkpoint_skipped\",\"file\":\"" + it->second + "\"");
      continue;
    }
    check(it->second, k);
    return std::make_pair(it->second, std::move(k));
  }
  return std::nullopt;
}

void CheckpointWriter::write(const Checkpoint& k, int64_t step, double paused_s) {
  const std::string path = path_for(step);
  auto t0 = std::chrono::steady_clock::now();
  std::pair<std::string, std::string> msg;
  try {
    save_checkpoint(path, k);
    const double took = seconds_since(t0);
    struct stat st;
    const double mib = stat(path.c_str(), &st) == 0 ? static_cast<double>(st.st_size) / 1048576.0 : 0;
    auto files = list(dir_);
    for (size_t i = 0; i + static_cast<size_t>(keep_) < files.size(); ++i) std::remove(files[i].second.c_str());
    msg = {"checkpoint step " + std::to_string(step) + ": " + path + " (" + fmt("%.1f", mib) + " MiB in " +
               fmt("%.3f", took) + " s" +
               (paused_s >= 0 ? ", async: training paused " + fmt("%.1f", paused_s * 1e3) + " ms to copy the state" : "") +
               ")",
           "\"level\":\"info\",\"event\":\"checkpoint\",\"step\":" + std::to_string(step) + ",\"write_s\":" +
               fmt("%.6f", took) + ",\"paused_s\":" + fmt("%.6f", paused_s < 0 ? took : paused_s)};
  } catch (const std::exception& e) {
    msg = {"checkpoint step " + std::to_string(step) + " failed: " + e.what() + "; the previous checkpoint is kept",
           "\"level\":\"error\",\"event\":\"checkpoint_failed\",\"step\":" + std::to_string(step)};
  }
  std::lock_guard<std::mutex> lock(mu_);
  messages_.push_back(std::move(msg));
}

void CheckpointWriter::flush_messages() {
  std::vector<std::pair<std::string, std::string>> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.swap(messages_);
  }
  for (const auto& m : out) log_(m.first, m.second);
}

void CheckpointWriter::save(Checkpoint k, int64_t step, bool sync, double paused_s) {
  finish();  // at most one write in flight
  last_ = std::chrono::steady_clock::now();
  if (sync || !async_) {
    write(k, step, -1);
    flush_messages();
    return;
  }
  thread_ = std::thread([this, k = std::move(k), step, paused_s]() mutable { write(k, step, paused_s); });
}

void CheckpointWriter::finish() {
  if (thread_.joinable()) thread_.join();
  flush_messages();
}

}  // namespace loom::rt

// mllog.cpp — writing :::MLLOG lines.
#include "loom/rt/train/mllog.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>

#include "loom/rt/error.hpp"

namespace loom::rt {

MlLog::MlLog(const std::string& path, int rank, const char* file, int line) {
  if (path.empty() || rank != 0) return;
  f_ = std::fopen(path.c_str(), "a");
  if (!f_) throw Error("--mllog " + path + ": " + std::strerror(errno));
  log(Type::kStart, "init_start", nullptr, nlohmann::ordered_json::object(), file, line);
}

MlLog::~MlLog() {
  if (!f_) return;
  if (running_) run_stop("aborted", __FILE__, __LINE__);
  std::fclose(f_);
}

void MlLog::log(Type type, const char* key, const nlohmann::ordered_json& value, const nlohmann::ordered_json& metadata,
                const char* file, int line) {
  if (!f_) return;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch()).count();
  nlohmann::ordered_json j;
  j["namespace"] = "";
  j["time_ms"] = ms;
  j["event_type"] = type == Type::kStart ? "INTERVAL_START" : type == Type::kEnd ? "INTERVAL_END" : "POINT_IN_TIME";
  j["key"] = key;
  j["value"] = value;
  nlohmann::ordered_json md = metadata;
  const char* base = std::strrchr(file, '/');
  md["file"] = base ? base + 1 : file;
  md["lineno"] = line;
  j["metadata"] = md;
  if (std::strcmp(key, "run_start") == 0) running_ = true;
  const std::string text = ":::MLLOG " + j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  std::fputs(text.c_str(), f_);
  std::fflush(f_);  // a preempted or killed run keeps every line it wrote
}

void MlLog::run_stop(const char* status, const char* file, int line) {
  if (!f_ || !running_) return;
  running_ = false;
  log(Type::kEnd, "run_stop", nullptr, {{"status", status}}, file, line);
}

}  // namespace loom::rt

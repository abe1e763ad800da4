// log.cpp — the one log line (log.hpp) and the JSON logs' timestamp.
#include "loom/log.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "loom/json_text.hpp"

namespace loom {

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
  }
  return "error";
}

LogLevel parse_level(const std::string& name) {
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning") return LogLevel::kWarning;
  return LogLevel::kError;
}

std::string utc_timestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[80];  // ample for any year the compiler can imagine (-Wformat-truncation)
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

void Logger::to_stderr(const std::string& line) {
  static std::mutex mu;  // whole lines from every thread
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

Logger::Logger(std::string component, bool json, int rank, int ranks, Sink sink)
    : component_(std::move(component)), json_(json), rank_(rank), ranks_(ranks), sink_(std::move(sink)) {}

std::string Logger::format(LogLevel level, const std::string& msg, const LogMembers& members) const {
  if (json_) {
    LogMembers j = {{"ts", utc_timestamp()}, {"level", level_name(level)}, {"component", component_}};
    if (rank_ >= 0) j["rank"] = rank_;
    if (members.is_object())
      for (const auto& [k, v] : members.items()) j[k] = v;
    j["msg"] = msg;
    return json_text(j);
  }
  std::string line = component_ + ": ";
  if (rank_ >= 0 && ranks_ > 1) line += "rank " + std::to_string(rank_) + ": ";
  if (level != LogLevel::kInfo) line += std::string(level_name(level)) + ": ";
  return line + msg;
}

void Logger::write(LogLevel level, const std::string& msg, const LogMembers& members) const {
  sink_(format(level, msg, members));
}

}  // namespace loom

// mllog.hpp — MLPerf-style logs (`loom-train --mllog FILE`): one `:::MLLOG {json}` line per
// event, as the MLCommons logging library writes them (namespace, time_ms, event_type
// INTERVAL_START | INTERVAL_END | POINT_IN_TIME, key, value, metadata with file and lineno), so
// MLPerf's log tools and dashboards read loom-train's runs. Rank 0 writes; the file is appended
// to, so a resumed run logs a new run after the one that was preempted. A run that ends without
// run_stop (an error) gets run_stop with status "aborted" when the log is closed.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace loom::rt {

class MlLog {
 public:
  enum class Type { kStart, kEnd, kPoint };
  // Disabled when `path` is empty or `rank` is not 0. Throws Error when the file cannot be opened.
  // Logs init_start with the caller's file and line.
  MlLog(const std::string& path, int rank, const char* file, int line);
  ~MlLog();
  MlLog(const MlLog&) = delete;
  MlLog& operator=(const MlLog&) = delete;
  bool enabled() const { return f_ != nullptr; }
  void log(Type type, const char* key, const nlohmann::ordered_json& value, const nlohmann::ordered_json& metadata,
           const char* file, int line);
  // run_stop with {"status": status} (success | aborted), once.
  void run_stop(const char* status, const char* file, int line);

 private:
  std::FILE* f_ = nullptr;
  bool running_ = false;
};

// The caller's file and line go into the metadata, as mlperf_logging's `stack_offset` does.
#define LOOM_MLLOG(ml, type, key, value, ...) \
  (ml).log(::loom::rt::MlLog::Type::type, key, value, nlohmann::ordered_json::object(__VA_ARGS__), __FILE__, __LINE__)

}  // namespace loom::rt

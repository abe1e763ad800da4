// log.hpp — Loom's one log line, for every tool and daemon (doc/errors.md): a level, the
// component, the rank where there are several; human text or JSON lines.
//
//   text:  loom-train: rank 1: warning: gradient overflow at step 12: ...
//   json:  {"ts":"2026-12-01T13:05:17.123Z","level":"warning","component":"loom-train","rank":1,
//           "event":"overflow","step":12,...,"msg":"gradient overflow at step 12: ..."}
//
// In text the rank is shown when there are several, the level when it is not info.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace loom {

enum class LogLevel { kInfo, kWarning, kError };
const char* level_name(LogLevel l);  // "info", "warning", "error"
LogLevel parse_level(const std::string& name);  // those three; anything else is kError

// ISO 8601 in UTC with milliseconds, "2026-12-01T13:05:17.123Z": the JSON lines' "ts".
std::string utc_timestamp();

// A JSON line's members beyond ts, level, component, rank and msg, in the order given.
using LogMembers = nlohmann::ordered_json;

// A line's level and its JSON members: `LogFields(LogLevel::kWarning, {{"event", "overflow"}, {"step", step}})`.
struct LogFields {
  explicit LogFields(LogLevel l = LogLevel::kInfo, LogMembers m = LogMembers::object()) : level(l), members(std::move(m)) {}
  LogLevel level;
  LogMembers members;
};

class Logger {
 public:
  using Sink = std::function<void(const std::string& line)>;  // one line, without its newline
  static void to_stderr(const std::string& line);              // the default sink: flushed at once

  // `rank` -1: no rank (one process); in text it is shown only when `ranks` > 1.
  explicit Logger(std::string component, bool json = false, int rank = -1, int ranks = 1, Sink sink = to_stderr);

  // One line. `members`: more JSON members (an object), or none; text shows only `msg`. Strings
  // that are not UTF-8 are written with U+FFFD in place of the bad bytes.
  void write(LogLevel level, const std::string& msg, const LogMembers& members = LogMembers::object()) const;
  void write(const std::string& msg, const LogFields& f) const { write(f.level, msg, f.members); }
  std::string format(LogLevel level, const std::string& msg, const LogMembers& members = LogMembers::object()) const;

  bool json() const { return json_; }

 private:
  std::string component_;
  bool json_;
  int rank_, ranks_;
  Sink sink_;
};

}  // namespace loom

// bench_mllog.cpp — `loom-bench SUBCOMMAND ... --mllog FILE`: the subcommand runs with
// --format json and its stdout captured; every JSON line it prints becomes a POINT_IN_TIME
// `:::MLLOG` event (key "loom_bench_result", the figures as the value) between run_start and
// run_stop (success, or aborted when the subcommand fails), and is printed as usual. The
// figures are then collected the way loom-train's runs are (MLCommons' log format).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "loom/rt/error.hpp"
#include "loom/rt/train/mllog.hpp"

namespace {

int env_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return 0;
}

// Runs `run` with stdout going to a temporary file; returns its status and the text.
int capture_stdout(const std::function<int()>& run, std::string* text) {
  std::fflush(stdout);
  std::FILE* tmp = std::tmpfile();
  if (!tmp) throw loom::rt::Error("--mllog: cannot make a temporary file");
  const int saved = ::dup(1);
  ::dup2(::fileno(tmp), 1);
  int rc = 1;
  try {
    rc = run();
  } catch (...) {
    std::fflush(stdout);
    ::dup2(saved, 1);
    ::close(saved);
    std::fclose(tmp);
    throw;
  }
  std::fflush(stdout);
  ::dup2(saved, 1);
  ::close(saved);
  std::rewind(tmp);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, tmp)) > 0;) text->append(buf, n);
  std::fclose(tmp);
  return rc;
}

}  // namespace

int bench_with_mllog(const std::string& path, const std::string& cmd, const std::function<int()>& run) {
  using loom::rt::MlLog;
  MlLog ml(path, env_rank(), __FILE__, __LINE__);
  LOOM_MLLOG(ml, kPoint, "submission_benchmark", "loom-bench " + cmd);
  LOOM_MLLOG(ml, kEnd, "init_stop", nullptr);
  LOOM_MLLOG(ml, kStart, "run_start", nullptr);
  std::string text;
  const int rc = capture_stdout(run, &text);
  std::fputs(text.c_str(), stdout);
  size_t results = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = text.find('\n', pos);
    const std::string line = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    pos = end == std::string::npos ? text.size() : end + 1;
    const auto j = nlohmann::ordered_json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    LOOM_MLLOG(ml, kPoint, "loom_bench_result", j);
    ++results;
  }
  ml.run_stop(rc == 0 && results > 0 ? "success" : "aborted", __FILE__, __LINE__);
  return rc;
}

// bench_args.hpp — loom-bench's numeric option values, read whole: `--bytes 12x` or
// `--iters abc` is refused with the option's name (std::stoi had taken the 12, or ended the
// process with an uncaught exception). main() answers a BenchUsage with its message and exit 2.
#pragma once

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

struct BenchUsage : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// A whole number of at least lo (and at most hi, the type's limit).
inline long long bench_whole(const std::string& flag, const std::string& v, long long lo, long long hi = LLONG_MAX) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno == ERANGE || x < lo || x > hi)
    throw BenchUsage(flag + " must be a whole number of at least " + std::to_string(lo) + ", not '" + v + "'");
  return x;
}

inline int bench_int(const std::string& flag, const std::string& v, int lo = 1) {
  return static_cast<int>(bench_whole(flag, v, lo, INT_MAX));
}

inline double bench_real(const std::string& flag, const std::string& v, double lo) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !std::isfinite(x) || x < lo) {
    std::ostringstream msg;
    msg << flag << " must be a number of at least " << lo << ", not '" << v << "'";
    throw BenchUsage(msg.str());
  }
  return x;
}

// Sizes in bytes, one or a comma-separated list: 1048576,16777216.
inline std::vector<size_t> bench_sizes(const std::string& flag, const std::string& v) {
  std::vector<size_t> out;
  size_t at = 0;
  for (;;) {
    const size_t comma = v.find(',', at);
    out.push_back(static_cast<size_t>(bench_whole(flag, v.substr(at, comma - at), 1)));
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

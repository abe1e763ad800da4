// text.hpp — small text forms the programs share.
#pragma once

#include <cstdio>
#include <string>

namespace loom::rt {

// A number as a person writes it (%g): 0.05, not 0.0500000007 (a float's default in --help).
inline std::string number_text(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

}  // namespace loom::rt

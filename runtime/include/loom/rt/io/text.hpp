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

// A file's or a client's bytes inside a message: control bytes (NUL included, which would cut the
// message where C strings meet it) as \xNN, and at most `most` bytes of it, the rest counted.
inline std::string visible_text(const std::string& s, size_t most = 64) {
  std::string out;
  for (size_t k = 0; k < s.size() && k < most; ++k) {
    const auto c = static_cast<unsigned char>(s[k]);
    if (c >= 0x20 && c != 0x7f) {
      out += s[k];
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    }
  }
  if (s.size() > most) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

}  // namespace loom::rt

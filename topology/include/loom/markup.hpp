// markup.hpp — text from files, specs and requests made safe inside HTML, SVG or XML: in an
// element or a quoted attribute it is text, never markup (& < > " ' escaped, control characters
// but tab and newline dropped).
#pragma once

#include <string>

namespace loom {

inline std::string markup_text(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n') o += c;
    }
  }
  return o;
}

}  // namespace loom

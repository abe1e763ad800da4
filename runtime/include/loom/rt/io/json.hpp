// json.hpp — JSON from files: parsed with a bound on nesting, so that nothing walked afterwards
// (dump() in an error message, a comparison, a copy) can recurse past the stack on a crafted file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "loom/rt/error.hpp"

namespace loom::rt {

constexpr int kMaxJsonDepth = 64;

// `text` as JSON (J: nlohmann::json or ordered_json). Nothing deeper than kMaxJsonDepth is built:
// the parser stops there. Throws Error "<what>: not valid JSON: ..." or "<what>: JSON nested
// deeper than 64 levels".
template <class J = nlohmann::json>
J parse_json_text(const std::string& text, const std::string& what) {
  typename J::parser_callback_t limit = [&what](int depth, typename J::parse_event_t, J&) {
    if (depth > kMaxJsonDepth) throw Error(what + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    return true;
  };
  try {
    return J::parse(text, limit);
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + ": not valid JSON: " + e.what());
  }
}

}  // namespace loom::rt

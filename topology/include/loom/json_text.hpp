// json_text.hpp — Loom's one way to write JSON text (nlohmann-json, header only): compact, and
// bytes that are not UTF-8 replaced by U+FFFD, so a hostname, a GPU name, a file name or a
// client's string never makes invalid JSON and never throws.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace loom {

template <typename Json>
std::string json_text(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace loom

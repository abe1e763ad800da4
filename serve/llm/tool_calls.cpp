// tool_calls.cpp — the hermes, llama3_json and mistral tool-call formats (tool_calls.hpp).
#include "tool_calls.hpp"

#include <nlohmann/json.hpp>
#include <cstring>
#include <random>

#include "loom/rt/error.hpp"
#include "loom/rt/io/text.hpp"
#include "tokenizer.hpp"

namespace loom::serve::llm {

namespace {

constexpr const char* kHermesOpen = "<tool_call>";
constexpr const char* kHermesClose = "</tool_call>";
constexpr const char* kPythonTag = "<|python_tag|>";
constexpr const char* kMistralCalls = "[TOOL_CALLS]";

std::string call_id() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* hex = "0123456789abcdef";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += hex[rng() & 15];
  return id;
}

// The end of the JSON value starting at `at` (an object or a list), strings and escapes
// respected; npos when it does not close.
size_t json_end(const std::string& s, size_t at) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = at; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string::npos;
}

size_t skip_space(const std::string& s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  return i;
}

// One call object: {"name": string, "arguments" or "parameters": object or JSON text}.
bool call_of(const nlohmann::json& j, ToolCall* c) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const nlohmann::json* a = j.contains("arguments") ? &j["arguments"] : j.contains("parameters") ? &j["parameters"] : nullptr;
  c->name = j["name"].get<std::string>();
  if (!a || a->is_null()) c->arguments = "{}";
  else if (a->is_string()) c->arguments = a->get<std::string>();
  else c->arguments = a->dump();
  c->id = call_id();
  return true;
}

bool parse_json(const std::string& s, nlohmann::json* j) {
  *j = nlohmann::json::parse(s, nullptr, false);
  return !j->is_discarded();
}

ToolOutput hermes(const std::string& text) {
  ToolOutput out;
  const size_t first = text.find(kHermesOpen);
  if (first == std::string::npos) return {text, {}};
  for (size_t at = first; at != std::string::npos; at = text.find(kHermesOpen, at)) {
    at += std::strlen(kHermesOpen);
    const size_t close = text.find(kHermesClose, at);
    nlohmann::json j;
    ToolCall c;
    if (!parse_json(text.substr(at, close == std::string::npos ? std::string::npos : close - at), &j) || !call_of(j, &c)) return {text, {}};
    out.calls.push_back(std::move(c));
    if (close == std::string::npos) break;
    at = close + std::strlen(kHermesClose);
  }
  out.content = text.substr(0, first);
  return out;
}

ToolOutput llama3_json(const std::string& text) {
  size_t at = skip_space(text, 0);
  if (text.compare(at, std::strlen(kPythonTag), kPythonTag) == 0) at = skip_space(text, at + std::strlen(kPythonTag));
  if (at >= text.size() || text[at] != '{') return {text, {}};
  ToolOutput out;
  while (at < text.size()) {
    const size_t end = json_end(text, at);
    nlohmann::json j;
    ToolCall c;
    if (end == std::string::npos || !parse_json(text.substr(at, end - at), &j) || !call_of(j, &c)) return {text, {}};
    out.calls.push_back(std::move(c));
    at = skip_space(text, end);
    if (at < text.size() && text[at] == ';') at = skip_space(text, at + 1);
    else if (at < text.size()) return {text, {}};
  }
  return out;
}

ToolOutput mistral(const std::string& text) {
  const size_t first = text.find(kMistralCalls);
  if (first == std::string::npos) return {text, {}};
  ToolOutput out;
  const std::string rest = text.substr(first + std::strlen(kMistralCalls));
  nlohmann::json j;
  if (!parse_json(rest, &j)) return {text, {}};
  for (const auto& item : j.is_array() ? j : nlohmann::json::array({j})) {
    ToolCall c;
    if (!call_of(item, &c)) return {text, {}};
    out.calls.push_back(std::move(c));
  }
  out.content = text.substr(0, first);
  return out;
}

}  // namespace

bool is_tool_marker(const std::string& t) { return t == kMistralCalls || t == kPythonTag || t == kHermesOpen; }

ToolParser tool_parser_named(const std::string& name) {
  if (name == "hermes") return ToolParser::kHermes;
  if (name == "llama3_json") return ToolParser::kLlama3Json;
  if (name == "mistral") return ToolParser::kMistral;
  throw rt::Error("--tool-call-parser '" + rt::visible_text(name) + "': hermes, llama3_json or mistral");
}

const char* tool_parser_name(ToolParser p) {
  switch (p) {
    case ToolParser::kHermes: return "hermes";
    case ToolParser::kLlama3Json: return "llama3_json";
    case ToolParser::kMistral: return "mistral";
    default: return "none";
  }
}

ToolParser tool_parser_of(const Tokenizer* tok, const std::string& source) {
  auto has = [&](const char* t) { return (tok && tok->id_of(t) >= 0) || source.find(t) != std::string::npos; };
  if (has(kHermesOpen)) return ToolParser::kHermes;
  if (has(kMistralCalls)) return ToolParser::kMistral;
  if (has(kPythonTag)) return ToolParser::kLlama3Json;
  return ToolParser::kNone;
}

ToolOutput parse_tool_calls(ToolParser p, const std::string& text) {
  switch (p) {
    case ToolParser::kHermes: return hermes(text);
    case ToolParser::kLlama3Json: return llama3_json(text);
    case ToolParser::kMistral: return mistral(text);
    default: return {text, {}};
  }
}

size_t tool_content_end(ToolParser p, const std::string& text) {
  if (p == ToolParser::kNone) return text.size();
  if (p == ToolParser::kLlama3Json) {  // a call is the whole output: content once it cannot be one
    const size_t at = skip_space(text, 0);
    if (at == text.size()) return 0;
    if (text[at] == '{' || std::string(kPythonTag).compare(0, text.size() - at, text, at, std::string::npos) == 0 ||
        text.compare(at, std::strlen(kPythonTag), kPythonTag) == 0)
      return 0;
    return text.size();
  }
  const std::string mark = p == ToolParser::kHermes ? kHermesOpen : kMistralCalls;
  const size_t found = text.find(mark);
  if (found != std::string::npos) return found;
  for (size_t keep = std::min(mark.size() - 1, text.size()); keep > 0; --keep)  // a tail that may begin the mark
    if (text.compare(text.size() - keep, keep, mark, 0, keep) == 0) return text.size() - keep;
  return text.size();
}

std::string tool_call_opening(ToolParser p, const std::string* function) {
  const std::string named = function ? "{\"name\": " + nlohmann::json(*function).dump() + ", \"arguments\": " : "";
  switch (p) {
    case ToolParser::kHermes: return std::string(kHermesOpen) + "\n" + named;
    case ToolParser::kMistral: return std::string(kMistralCalls) + (function ? "[" + named : "");
    case ToolParser::kLlama3Json: return function ? "{\"name\": " + nlohmann::json(*function).dump() + ", \"parameters\": " : "{\"name\": ";
    default: return "";
  }
}

}  // namespace loom::serve::llm

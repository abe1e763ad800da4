// chat_tools.cpp — tool_choice and tool_calls of chat completions (chat_tools.hpp).
#include "frontend/chat_tools.hpp"

#include "core/status.hpp"

namespace loom::serve {

using json = nlohmann::json;

namespace {

// The end of the whole characters of s[0, end): a stream never splits one.
size_t whole_chars(const std::string& s, size_t end) {
  for (size_t back = 1; back <= 4 && back <= end; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[end - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back for its lead
    const size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return back < n ? end - back : end;
  }
  return end;
}

json calls_json(const std::vector<llm::ToolCall>& calls, bool stream) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c = {{"id", calls[i].id}, {"type", "function"}, {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (stream) c["index"] = i;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

ToolMode tool_mode(const ChatRequest& req, const llm::ChatFormat& f, const std::string& model) {
  ToolMode m;
  if (req.tool_choice == "none" || (req.tool_choice == "default" && f.tools == llm::ToolParser::kNone)) return m;
  if (f.tools == llm::ToolParser::kNone)
    throw ServeError(Status::kInput, "tool_choice " + req.tool_choice + ": model " + model +
                                         " has no tool-call format (its tokens name none of <tool_call>, [TOOL_CALLS], <|python_tag|>; "
                                         "loom-serve --tool-call-parser names one)");
  m.parser = f.tools;
  if (req.tool_choice == "required") m.opening = llm::tool_call_opening(m.parser, nullptr);
  if (req.tool_choice == "function") m.opening = llm::tool_call_opening(m.parser, &req.tool_function);
  return m;
}

void tool_message(const ToolMode& m, const std::string& text, json& choice) {
  if (m.parser == llm::ToolParser::kNone) return;
  const llm::ToolOutput out = llm::parse_tool_calls(m.parser, m.opening + text);
  json& msg = choice["message"];
  if (out.calls.empty()) {
    msg["content"] = m.opening + text;
    return;
  }
  msg["content"] = out.content.empty() ? json(nullptr) : json(out.content);
  msg["tool_calls"] = calls_json(out.calls, false);
  choice["finish_reason"] = "tool_calls";
}

void tool_delta(const ToolMode& m, const std::string& text, size_t* sent, bool done, json& choice) {
  if (m.parser == llm::ToolParser::kNone) return;
  const std::string full = m.opening + text;
  json& delta = choice["delta"];
  if (!done) {
    const size_t end = m.opening.empty() ? whole_chars(full, llm::tool_content_end(m.parser, full)) : 0;
    delta["content"] = end > *sent ? full.substr(*sent, end - *sent) : "";
    *sent = std::max(*sent, end);
    return;
  }
  const llm::ToolOutput out = llm::parse_tool_calls(m.parser, full);
  const std::string& content = out.calls.empty() ? full : out.content;
  delta["content"] = content.size() > *sent ? content.substr(*sent) : "";
  *sent = content.size();
  if (out.calls.empty()) return;
  delta["tool_calls"] = calls_json(out.calls, true);
  choice["finish_reason"] = "tool_calls";
}

}  // namespace loom::serve

// chat_tools.hpp — tool calls in chat completions: the request's tool_choice against the model's
// tool-call format, and each choice's output turned into OpenAI's `tool_calls` (a whole message,
// or a stream's deltas: content until a call may begin, the calls when the choice ends).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "frontend/generate_json.hpp"
#include "llm/chat_template.hpp"

namespace loom::serve {

struct ToolMode {
  llm::ToolParser parser = llm::ToolParser::kNone;  // kNone: output is content, as without tools
  std::string opening;  // written after the prompt where a call is required: the output continues it
};

// Throws ServeError kInput when tool_choice needs a format the model has none of.
ToolMode tool_mode(const ChatRequest& req, const llm::ChatFormat& f, const std::string& model);

// A finished choice's message ({"role", "content"}) given its output `text`: tool_calls and
// finish_reason "tool_calls" when the text holds valid calls.
void tool_message(const ToolMode& m, const std::string& text, nlohmann::json& choice);

// A stream chunk's choice for output `text` so far: its delta's content is what is certain not
// to be a call (from *sent on), and once `done`, the calls or the rest of the text.
void tool_delta(const ToolMode& m, const std::string& text, size_t* sent, bool done, nlohmann::json& choice);

}  // namespace loom::serve

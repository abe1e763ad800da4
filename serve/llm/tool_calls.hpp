// tool_calls.hpp — function calls read from what a chat model writes, in the three formats vLLM
// names: hermes (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, Qwen's),
// llama3_json (a JSON object `{"name": ..., "parameters": {...}}`, after <|python_tag|> or
// alone; several separated by `;`) and mistral (`[TOOL_CALLS]` then a JSON list of calls).
// Output that is not a valid call is content, never an error.
#pragma once

#include <string>
#include <vector>

namespace loom::serve::llm {

class Tokenizer;

enum class ToolParser { kNone, kHermes, kLlama3Json, kMistral };

// "hermes", "llama3_json", "mistral" (--tool-call-parser); throws rt::Error naming the others.
ToolParser tool_parser_named(const std::string& name);
const char* tool_parser_name(ToolParser p);
// A folder's format from its tokens and chat template: <tool_call> -> hermes, [TOOL_CALLS] ->
// mistral, <|python_tag|> -> llama3_json; kNone when neither says.
ToolParser tool_parser_of(const Tokenizer* tok, const std::string& template_source);

// A special token's text that a format reads ([TOOL_CALLS], <|python_tag|>): kept in the text
// parsed, where decoding drops special tokens.
bool is_tool_marker(const std::string& special_text);

struct ToolCall {
  std::string id, name, arguments;  // arguments: JSON text
};
struct ToolOutput {
  std::string content;  // the text before the calls (all of it when there are none)
  std::vector<ToolCall> calls;
};
ToolOutput parse_tool_calls(ToolParser p, const std::string& text);

// How much of `text` (a stream's output so far) is content for certain: up to where a call
// begins, or up to a tail that could still become the start of one.
size_t tool_content_end(ToolParser p, const std::string& text);

// What the assistant's turn starts with when a call is required (tool_choice "required"), or
// this function's call (tool_choice {"type": "function", "function": {"name": ...}}): the
// format's opening, written into the prompt so that the model continues a call.
std::string tool_call_opening(ToolParser p, const std::string* function);

}  // namespace loom::serve::llm

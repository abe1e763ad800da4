// chat_template.hpp — a Hugging Face chat template (chat_template.jinja, or tokenizer_config.json's
// "chat_template": a Jinja2 template) turned into a prompt, as transformers' apply_chat_template
// renders it (trim_blocks, lstrip_blocks, loop controls, its tojson and strftime_now). The subset
// the published templates use: text, {{ expr }}, {% for %} (loop.*, else, `for k, v in`), {% if %},
// {% set %} (and `set ns.x` on a namespace()), {% macro %}, {% break %}, {% continue %},
// {% generation %}, comments, '-' whitespace control; expressions with strings, numbers, lists,
// dicts, subscripts and slices, attributes, arithmetic, comparisons, in, and/or/not, inline if,
// tests, filters and methods listed by is_test, is_filter and the parser (doc/llm.md has them
// all). Anything else is refused when the template is read, naming it.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tool_calls.hpp"

namespace loom::serve::llm {

struct ChatMessage {
  std::string role, content;
};

class ChatTemplate {
 public:
  // Parses `source`; throws rt::Error naming what the template uses that this reader lacks.
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;

  // The prompt for `messages` (a list of message objects: role, content and whatever else the
  // client sent, tool_calls or name), with `vars` (an object) as more variables: tools, and what
  // a request's chat_template_kwargs holds. Throws ServeError kInput with the template's own
  // words when it calls raise_exception (a conversation it does not take), when the prompt
  // would pass `max_bytes`, and when the rendering passes `deadline` or one of tmpl::Budget's
  // limits (steps, bytes built, nesting), naming it.
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& vars, bool add_generation_prompt,
                     const std::string& bos_token, const std::string& eos_token, size_t max_bytes,
                     std::chrono::steady_clock::time_point deadline) const;
  // The same for messages of a role and a content string.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt, const std::string& bos_token,
                     const std::string& eos_token, size_t max_bytes = 1 << 20) const;

  // Whether the template reads the variable `name` (tools a template never shows need not be built).
  bool reads(const std::string& name) const { return names_.count(name) > 0; }
  struct Node;

 private:
  std::vector<std::unique_ptr<Node>> body_;
  std::map<std::string, const Node*> macros_;  // {% macro %}s by name (nodes of body_)
  std::set<std::string> names_;                // the variables it reads
};

// A model folder's chat format: tokenizer_config.json's chat_template (a string, or a list of
// {name, template} whose "default" is taken) with its bos_token and eos_token (strings, or
// objects with "content"). Null when the folder has no tokenizer_config.json or it holds no
// chat_template; throws rt::Error naming the file when it cannot be read or rendered.
struct ChatFormat {
  ChatTemplate tmpl;
  std::string bos, eos;
  ToolParser tools = ToolParser::kNone;  // the format its tool calls are read in
};
std::unique_ptr<ChatFormat> load_chat_format(const std::string& folder);

}  // namespace loom::serve::llm

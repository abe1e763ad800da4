// chat_template.hpp — a Hugging Face chat template (tokenizer_config.json's "chat_template", a
// Jinja2 template) turned into a prompt, as transformers' apply_chat_template renders it
// (trim_blocks and lstrip_blocks on). The subset the published templates use: text, {{ expr }},
// {% for %} (with loop.index, index0, first, last, length), {% if/elif/else %}, {% set %},
// {# comments #}, whitespace control with '-'; expressions with strings, numbers, true/false/none,
// lists, subscripts and slices, attributes, + - * / // % ~, comparisons, in, and/or/not,
// `is [not] defined/none/string/number/mapping/sequence`, the filters trim, upper, lower, length,
// default, first, last, tojson, string, the string methods strip, lstrip, rstrip, upper, lower,
// startswith, endswith, and the functions raise_exception and range. Anything else is refused
// when the template is read, naming it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

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

  // The prompt for `messages`. Throws ServeError kInput with the template's own words when it
  // calls raise_exception (a conversation it does not take), or when the prompt would pass
  // `max_bytes`.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt, const std::string& bos_token,
                     const std::string& eos_token, size_t max_bytes = 1 << 20) const;

  struct Node;

 private:
  std::vector<std::unique_ptr<Node>> body_;
};

// A model folder's chat format: tokenizer_config.json's chat_template (a string, or a list of
// {name, template} whose "default" is taken) with its bos_token and eos_token (strings, or
// objects with "content"). Null when the folder has no tokenizer_config.json or it holds no
// chat_template; throws rt::Error naming the file when it cannot be read or rendered.
struct ChatFormat {
  ChatTemplate tmpl;
  std::string bos, eos;
};
std::unique_ptr<ChatFormat> load_chat_format(const std::string& folder);

}  // namespace loom::serve::llm

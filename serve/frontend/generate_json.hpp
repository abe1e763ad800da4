// generate_json.hpp — the requests of a language model, decoded strictly into one
// llm::SamplingParams: KServe's generate extension ({"text_input", "parameters": {...}}) and
// OpenAI's completions (/v1/completions: prompt as text or token ids, n, stream, logprobs,
// stop, seed, ignore_eos, top_k as vLLM takes them). Every field is checked for its type and
// range; a wrong one is a 400 naming it. What Loom does not do (echo, best_of, penalties,
// logit_bias, suffix) is refused by name, not ignored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llm/chat_template.hpp"
#include "llm/sampler.hpp"

namespace loom::serve {

constexpr int kMaxGenerateTokens = 1 << 20;  // then capped by the model's context
constexpr int kMaxStops = 64, kMaxStopBytes = 256, kMaxChoices = 16, kMaxLogprobs = 20;

// KServe generate: text_input; parameters max_tokens (default 64), temperature (default 0:
// greedy), top_p, top_k, seed (default 0), stop, stop_token_ids, ignore_eos — in "parameters" or
// at the top level as Triton's examples send them.
struct GenerateRequest {
  std::string prompt;
  llm::SamplingParams params;
};
GenerateRequest parse_generate_request(const std::string& body);

// OpenAI completions: model, prompt (a string, a list of token ids, or a list of one of either),
// max_tokens (default 16), temperature (default 1), top_p, top_k, n, stream, logprobs, stop,
// stop_token_ids, seed, ignore_eos, stream_options.include_usage.
struct CompletionRequest {
  std::string model;
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;  // set when the prompt was token ids
  bool prompt_is_ids = false;
  int n = 1;
  bool stream = false, include_usage = false;
  llm::SamplingParams params;
};
CompletionRequest parse_completion_request(const std::string& body);

// OpenAI chat completions: the completion request's fields (max_completion_tokens for
// max_tokens; logprobs true with top_logprobs), and `messages` (role and content: a string or a
// list of text parts; at most 10,000) with vLLM's add_generation_prompt (default true). The
// prompt is left empty: the model's chat template renders it from the messages.
struct ChatRequest {
  CompletionRequest completion;
  nlohmann::ordered_json messages;  // the message objects as sent (in their keys' order), contents as text
  nlohmann::ordered_json vars;      // more template variables: tools, chat_template_kwargs' members
  bool add_generation_prompt = true;
  // none | auto | required | function (tool_function names it) | default (tools, no choice sent:
  // auto where the model has a tool-call format, else none)
  std::string tool_choice = "none", tool_function;
};
// `tools_shown`: whether the model's template reads `tools`; where it does not, only the names of
// their functions are kept.
ChatRequest parse_chat_request(const std::string& body, bool tools_shown = true);

}  // namespace loom::serve

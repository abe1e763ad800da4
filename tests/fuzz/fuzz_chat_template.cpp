// fuzz_chat_template.cpp — libFuzzer target for chat templates, a model folder's program: the
// input is the template's source, read (every construct it lacks refused by name) and, when it
// reads, rendered over a fixed conversation with tools, under the request's deadline. Every
// template must render or end as an Error (a 400 to the client, the load's refusal); none may
// crash, recurse off the stack, or allocate past what the rendering's budget allows.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "llm/chat_template.hpp"
#include "loom/rt/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
          {"role": "assistant", "content": "yo", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
          {"role": "user", "content": [{"type": "text", "text": "more"}]}])");
  static const nlohmann::ordered_json vars = nlohmann::ordered_json::parse(
      R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}], "enable_thinking": false})");
  const std::string source(reinterpret_cast<const char*>(data), size);
  try {
    loom::serve::llm::ChatTemplate t(source);
    t.render(messages, vars, true, "<s>", "</s>", 1 << 16, std::chrono::steady_clock::now() + std::chrono::seconds(2));
  } catch (const loom::Error&) {
  } catch (const loom::rt::Error&) {
  }
  return 0;
}

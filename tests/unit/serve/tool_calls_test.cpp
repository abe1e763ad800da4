// tool_calls_test.cpp — the three tool-call formats parsed from crafted outputs, what a stream
// may send before a call, and tokenizer.json's steps one by one.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/status.hpp"
#include "llm/tokenizer_steps.hpp"
#include "llm/tool_calls.hpp"
#include "loom/rt/error.hpp"

using loom::serve::llm::ToolParser;
using loom::serve::llm::parse_tool_calls;
using loom::serve::llm::tool_content_end;
using nlohmann::json;

TEST(ToolCalls, Hermes) {
  auto out = parse_tool_calls(ToolParser::kHermes,
                              "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
                              "<tool_call>{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}");  // the last one unclosed
  EXPECT_EQ(out.content, "Let me check.");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(out.calls[0].arguments), json({{"city", "Paris"}}));
  EXPECT_EQ(out.calls[1].name, "get_time");
  EXPECT_EQ(out.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_NE(out.calls[0].id, out.calls[1].id);
  for (const char* bad : {"<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>",
                          "<tool_call>[1, 2]</tool_call>"}) {
    auto o = parse_tool_calls(ToolParser::kHermes, bad);
    EXPECT_TRUE(o.calls.empty()) << bad;
    EXPECT_EQ(o.content, bad);
  }
  EXPECT_EQ(parse_tool_calls(ToolParser::kHermes, "just text").content, "just text");
}

TEST(ToolCalls, Llama3Json) {
  auto out = parse_tool_calls(ToolParser::kLlama3Json, "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 1}}; {\"name\": \"g\", \"parameters\": {}}");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(out.content, "");
  EXPECT_EQ(json::parse(out.calls[0].arguments), json({{"x", 1}}));
  EXPECT_EQ(out.calls[1].name, "g");
  EXPECT_EQ(parse_tool_calls(ToolParser::kLlama3Json, " {\"name\": \"f\", \"arguments\": \"{}\"}").calls.size(), 1u);
  for (const char* text : {"The answer is {\"name\": 1}", "{\"name\": ", "{\"name\": \"f\"} trailing words", "{\"x\": 1}"}) {
    auto o = parse_tool_calls(ToolParser::kLlama3Json, text);
    EXPECT_TRUE(o.calls.empty()) << text;
    EXPECT_EQ(o.content, text);
  }
}

TEST(ToolCalls, Mistral) {
  auto out = parse_tool_calls(ToolParser::kMistral, "ok [TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}, {\"name\": \"g\", \"arguments\": {}}]");
  EXPECT_EQ(out.content, "ok ");
  ASSERT_EQ(out.calls.size(), 2u);
  EXPECT_EQ(json::parse(out.calls[0].arguments), json({{"a", {1, 2}}}));
  EXPECT_TRUE(parse_tool_calls(ToolParser::kMistral, "[TOOL_CALLS][{\"name\": \"f\"").calls.empty());
  EXPECT_TRUE(parse_tool_calls(ToolParser::kMistral, "[TOOL_CALLS]not json").calls.empty());
}

TEST(ToolCalls, StreamedContentStopsWhereACallMayBegin) {
  EXPECT_EQ(tool_content_end(ToolParser::kHermes, "hello"), 5u);
  EXPECT_EQ(tool_content_end(ToolParser::kHermes, "abc<tool"), 3u);  // may still become <tool_call>
  EXPECT_EQ(tool_content_end(ToolParser::kHermes, "abc<tool_call>{\"na"), 3u);
  EXPECT_EQ(tool_content_end(ToolParser::kHermes, "a < b"), 5u);
  EXPECT_EQ(tool_content_end(ToolParser::kMistral, "x[TOOL"), 1u);
  EXPECT_EQ(tool_content_end(ToolParser::kLlama3Json, "  {"), 0u);
  EXPECT_EQ(tool_content_end(ToolParser::kLlama3Json, "<|py"), 0u);
  EXPECT_EQ(tool_content_end(ToolParser::kLlama3Json, "Hi"), 2u);
  EXPECT_EQ(tool_content_end(ToolParser::kLlama3Json, ""), 0u);
  const std::string f = "get_weather";
  EXPECT_EQ(loom::serve::llm::tool_call_opening(ToolParser::kHermes, &f), "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ");
  EXPECT_EQ(loom::serve::llm::tool_call_opening(ToolParser::kMistral, nullptr), "[TOOL_CALLS]");
  EXPECT_THROW(loom::serve::llm::tool_parser_named("pythonic"), loom::rt::Error);
}

namespace {

std::vector<std::string> split(const json& step, const std::string& text) {
  auto pre = loom::serve::llm::make_pre_tokenizer(step, "test");
  std::vector<loom::serve::llm::Piece> p = {{text, true}};
  pre->run(p);
  std::vector<std::string> out;
  for (const auto& x : p) out.push_back(x.text);
  return out;
}

}  // namespace

TEST(TokenizerSteps, SplitBehaviours) {
  auto step = [](const char* behavior, bool invert = false) {
    return json{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split(step("Isolated"), "a-b--c"), (V{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(split(step("Removed"), "a-b--c"), (V{"a", "b", "c"}));
  EXPECT_EQ(split(step("MergedWithPrevious"), "a-b--c"), (V{"a-", "b-", "-", "c"}));
  EXPECT_EQ(split(step("MergedWithNext"), "a-b--c"), (V{"a", "-b", "-", "-c"}));
  EXPECT_EQ(split(step("Contiguous"), "a-b--c"), (V{"a", "-", "b", "--", "c"}));
  EXPECT_EQ(split(step("Removed", true), "a-b--c"), (V{"-", "-", "-"}));
  EXPECT_EQ(split(json{{"type", "Digits"}, {"individual_digits", true}}, "ab12c3"), (V{"ab", "1", "2", "c", "3"}));
  EXPECT_EQ(split(json{{"type", "Digits"}, {"individual_digits", false}}, "ab12c3"), (V{"ab", "12", "c", "3"}));
  EXPECT_EQ(split(json{{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", true}}, "hi there"),
            (V{"\u2581hi", "\u2581there"}));
  EXPECT_EQ(split(json{{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}+"}}}, {"behavior", "Isolated"}}, "x\u0663\u0664y"),  // Arabic-Indic digits are numbers
            (V{"x", "\u0663\u0664", "y"}));
}

TEST(TokenizerSteps, RefusedByName) {
  EXPECT_THROW(loom::serve::llm::make_pre_tokenizer(json{{"type", "Whitespace"}}, "t"), loom::rt::Error);
  EXPECT_THROW(loom::serve::llm::make_normalizer(json{{"type", "NFKD"}}, "t"), loom::rt::Error);
  EXPECT_THROW(loom::serve::llm::make_decoder(json{{"type", "WordPiece"}}, "t"), loom::rt::Error);
  try {
    loom::serve::llm::Pattern p("(unclosed", true, "tokenizer.json: pre_tokenizer Split");
    FAIL() << "an unclosed group compiled";
  } catch (const loom::rt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("pre_tokenizer Split: PCRE2 rejects the pattern"), std::string::npos) << e.what();
  }
  loom::serve::llm::Pattern slow("(a|aa)+$", true, "t");
  EXPECT_THROW(slow.find_all(std::string(60, 'a') + "b"), loom::serve::ServeError);  // the match limit, not minutes of backtracking
}

TEST(TokenizerSteps, DecodersPerToken) {
  auto d = loom::serve::llm::make_decoder(json::parse(R"({"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})"), "t");
  EXPECT_EQ(d->run("\u2581hello"), " hello");
  EXPECT_EQ(d->run("<0x0A>"), "\n");
  EXPECT_EQ(d->run("<0xZZ>"), "<0xZZ>");
  auto b = loom::serve::llm::make_decoder(json{{"type", "ByteLevel"}}, "t");
  EXPECT_EQ(b->run("\u0120hi\u010a"), " hi\n");
}

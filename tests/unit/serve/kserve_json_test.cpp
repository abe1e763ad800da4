// kserve_json_test.cpp — the two readers of a KServe v2 JSON infer request: the one-pass scan
// reads the common request as the strict decoder does (bit for bit, whatever the key order and
// nesting), and gives up on everything else, which the strict decoder then reads or refuses with
// its own words. And what a parse builds: members declined by their path of keys are never built,
// so a chat request's tools a template never shows keep only their functions' names.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/kserve_json.hpp"
#include "core/status.hpp"
#include "frontend/generate_json.hpp"

namespace {

using loom::serve::InferRequest;
using loom::serve::parse_infer_request;
using loom::serve::parse_infer_request_strict;
using loom::serve::scan_infer_request;
using loom::serve::ServeError;

std::optional<InferRequest> scan(const std::string& body) { return scan_infer_request(body.data(), body.data() + body.size()); }

void expect_same(const InferRequest& a, const InferRequest& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.has_id, b.has_id);
  EXPECT_EQ(a.outputs, b.outputs);
  EXPECT_EQ(a.binary_out, b.binary_out);
  ASSERT_EQ(a.inputs.size(), b.inputs.size());
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    EXPECT_EQ(a.inputs[i].name, b.inputs[i].name);
    EXPECT_EQ(a.inputs[i].datatype, b.inputs[i].datatype);
    EXPECT_EQ(a.inputs[i].shape, b.inputs[i].shape);
    EXPECT_EQ(a.inputs[i].data, b.inputs[i].data) << a.inputs[i].name;
  }
}

TEST(KServeJson, TheScanReadsTheCommonRequestAsTheStrictDecoderDoes) {
  const std::vector<std::string> bodies = {
      R"({"inputs":[{"name":"x","shape":[2,3],"datatype":"FP32","data":[[1.5,-2e-3,0],[3,4.25e10,-0.0]]}]})",
      // data before its datatype, whitespace everywhere, an id, outputs by name, binary output
      " { \"id\" : \"r-1\" , \"inputs\" : [ { \"data\" : [ 1 , -2 , 9223372036854775807 ] , \"name\" : \"ids\" ,"
      " \"shape\" : [ 1 , 3 ] , \"datatype\" : \"INT64\" } ] , \"outputs\" : [ { \"name\" : \"a\" } , { \"name\" : \"b\" } ] ,"
      " \"parameters\" : { \"binary_data_output\" : true } } ",
      R"({"inputs":[{"name":"m","datatype":"BOOL","shape":[4],"data":[true,0,1,false]},)"
      R"({"name":"p","datatype":"UINT8","shape":[2],"data":[0,255]},{"name":"q","datatype":"INT8","shape":[2],"data":[-128,127]},)"
      R"({"name":"r","datatype":"INT32","shape":[2],"data":[-2147483648,2147483647]}]})",
      R"({"inputs":[{"name":"x","datatype":"FP32","shape":[3],"data":[16777217,-0,1e-30]}]})",  // integers as JSON takes them
      R"({"inputs":[{"name":"x","datatype":"FP32","shape":[0],"data":[]}],"outputs":[]})",
  };
  for (const auto& body : bodies) {
    auto fast = scan(body);
    ASSERT_TRUE(fast.has_value()) << body;
    expect_same(*fast, parse_infer_request_strict(body, ""));
  }
  float neg_zero_read;  // -0 is the integer 0, so +0.0f: as the strict decoder reads it
  std::memcpy(&neg_zero_read, scan(bodies[3])->inputs[0].data.data() + 4, 4);
  EXPECT_FALSE(std::signbit(neg_zero_read));
}

TEST(KServeJson, TheScanGivesUpOnTheRestAndTheStrictDecoderAnswers) {
  const std::vector<std::pair<std::string, std::string>> cases = {  // body, what the strict decoder says ("" accepts)
      {R"({"inputs":[{"name":"\u0078","datatype":"FP32","shape":[1],"data":[1]}]})", ""},   // an escape
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1],"extra":{}}]})", ""},  // an unknown member
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}],"outputs":[{"name":"y","parameters":{"binary_data":true}}]})", ""},
      {R"({"inputs":[{"name":"x","datatype":"UINT8","shape":[1],"data":[-0]}]})", "UINT8 input data must be integers 0-255"},
      {R"({"inputs":[{"name":"x","datatype":"UINT8","shape":[1],"data":[256]}]})", "0-255"},
      {R"({"inputs":[{"name":"x","datatype":"INT64","shape":[1],"data":[1.0]}]})", "must be integers"},
      {R"({"inputs":[{"name":"x","datatype":"INT64","shape":[1],"data":[9223372036854775808]}]})", "out of range"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1e39]}]})", "out of range"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[true]}]})", "numbers only"},
      {R"({"inputs":[{"name":"x","datatype":"FP64","shape":[1],"data":[1]}]})", "is not supported"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[01]}]})", "malformed JSON"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[.5]}]})", "malformed JSON"},
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}]} x)", "malformed JSON"},
      {R"({"inputs":[{"name":"x","name":"y","datatype":"FP32","shape":[1],"data":[1]}]})", ""},  // a duplicate
      {R"({"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":)" + std::string(40, '[') + "1" + std::string(40, ']') + "}]}",
       "nested deeper than 32"},
      {R"([1,2])", "must be a JSON object"},
  };
  for (const auto& [body, why] : cases) {
    EXPECT_FALSE(scan(body).has_value()) << body;
    if (why.empty()) {
      EXPECT_NO_THROW(parse_infer_request(body, "")) << body;
      continue;
    }
    try {
      parse_infer_request(body, "");
      ADD_FAILURE() << "accepted: " << body;
    } catch (const ServeError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << body << ": " << e.what();
    }
  }
}

TEST(KServeJson, MembersAreBuiltByTheirPathOfKeys) {
  const std::string text = R"({"a": {"b": [{"c": 1, "d": [[{"e": 2}]]}]}, "f": 3})";
  std::vector<std::vector<std::string>> seen;
  const auto j = loom::serve::parse_ordered_json(text.data(), text.data() + text.size(), [&](const std::vector<std::string>& k) {
    seen.push_back(k);
    return k.back() != "c";
  });
  const std::vector<std::vector<std::string>> want = {{"a"}, {"a", "b"}, {"a", "b", "", "c"}, {"a", "b", "", "d"},
                                                      {"a", "b", "", "d", "", "", "e"}, {"f"}};
  EXPECT_EQ(seen, want);
  EXPECT_EQ(j.dump(), R"({"a":{"b":[{"d":[[{"e":2}]]}]},"f":3})");
}

TEST(KServeJson, ToolsATemplateNeverShowsKeepOnlyTheirNames) {
  const std::string body = R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": "function",
    "function": {"name": "g"}}, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "g", "description": "d"}}]})";
  const auto shown = loom::serve::parse_chat_request(body, true);
  EXPECT_EQ(shown.vars["tools"][1]["function"]["description"], "d");
  const auto unshown = loom::serve::parse_chat_request(body, false);
  EXPECT_EQ(unshown.vars["tools"].dump(), R"([{"function":{"name":"f"}},{"function":{"name":"g"}}])");
  EXPECT_EQ(unshown.tool_choice, "function");
  EXPECT_EQ(unshown.tool_function, "g");
  std::string unknown = body;
  unknown.replace(unknown.find(R"("name": "g"})"), 12, R"("name": "h"})");
  EXPECT_THROW(loom::serve::parse_chat_request(unknown, false), ServeError);
}

}  // namespace

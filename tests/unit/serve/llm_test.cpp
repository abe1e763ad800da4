// llm_test.cpp — the decoder engine's parts: the KV block manager (reference counts, the prefix
// cache's chain, eviction), the sampler (greedy, top-k, top-p, seeds, logprobs), the safetensors
// reader's checks, and the engine itself against the training gpt's own forward pass (greedy,
// with a pool so small that sequences are preempted, with and without prefix caching).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "llm/chat_template.hpp"
#include "llm/engine.hpp"
#include "llm/kv_blocks.hpp"
#include "llm/sampler.hpp"
#include "llm/tokenizer.hpp"
#include "loom/rt/error.hpp"
#include "loom/rt/io/hf_quant.hpp"
#include "loom/rt/io/safetensors.hpp"
#include "loom/rt/nn/decoder.hpp"
#include "loom/rt/nn/gpt.hpp"

namespace {

using loom::serve::llm::BlockManager;
using loom::serve::llm::SamplingParams;

TEST(KvBlocks, AllocateReleaseAndRunOut) {
  BlockManager m(3, 4, true);
  std::vector<int32_t> t;
  for (int i = 0; i < 3; ++i) t.push_back(m.allocate());
  EXPECT_EQ(m.allocate(), -1);
  EXPECT_EQ(m.used(), 3);
  m.release(t);
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(m.available(), 3);
}

TEST(KvBlocks, FullBlocksOfAPrefixAreSharedAndCounted) {
  BlockManager m(8, 4, true);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // two full blocks and one token
  std::vector<int32_t> ta = {m.allocate(), m.allocate(), m.allocate()};
  m.seal(a, ta, 0);
  std::vector<int32_t> tb = m.match_prefix({1, 2, 3, 4, 5, 6, 7, 8, 42}, 2);
  ASSERT_EQ(tb.size(), 2u);
  EXPECT_EQ(tb[0], ta[0]);
  EXPECT_EQ(tb[1], ta[1]);
  EXPECT_EQ(m.hits(), 2u);
  EXPECT_EQ(m.match_prefix({1, 2, 3, 9}, 1).size(), 0u);  // same first block? no: token 4 differs
  EXPECT_EQ(m.misses(), 1u);
  // A prefix whose second block differs shares only the first.
  std::vector<int32_t> tc = m.match_prefix({1, 2, 3, 4, 0, 6, 7, 8}, 2);
  EXPECT_EQ(tc.size(), 1u);
  m.release(ta);
  EXPECT_EQ(m.used(), 2);  // tb's two blocks (one of them tc's too) stay held
  m.release(tb);
  m.release(tc);
  EXPECT_EQ(m.used(), 0);
  // Cached, unused: still found, until allocation takes them.
  std::vector<int32_t> again = m.match_prefix(a, 2);
  EXPECT_EQ(again.size(), 2u);
  m.release(again);
  std::vector<int32_t> all;
  for (int i = 0; i < 8; ++i) all.push_back(m.allocate());
  EXPECT_EQ(m.allocate(), -1);
  m.release(all);
  EXPECT_EQ(m.match_prefix(a, 2).size(), 0u);  // evicted
}

TEST(KvBlocks, NoPrefixCachingFindsNothing) {
  BlockManager m(4, 2, false);
  std::vector<int32_t> t = {m.allocate(), m.allocate()};
  m.seal({1, 2, 3, 4}, t, 0);
  EXPECT_TRUE(m.match_prefix({1, 2, 3, 4}, 2).empty());
}

TEST(Sampler, GreedyTopKTopPSeedsAndLogprobs) {
  std::mt19937_64 rng(1);
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.5f};
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.logprobs = 2;
  auto c = loom::serve::llm::sample(logits.data(), 4, greedy, rng);
  EXPECT_EQ(c.token, 1);
  double z = 0;
  for (float l : logits) z += std::exp(l);
  EXPECT_NEAR(c.logprob, 2.0 - std::log(z), 1e-5);
  ASSERT_EQ(c.top.size(), 2u);
  EXPECT_EQ(c.top[1].first, 3);
  SamplingParams k1;
  k1.top_k = 1;
  SamplingParams p_small;
  p_small.top_p = 0.01f;
  SamplingParams k2;
  k2.top_k = 2;
  std::map<int, int> seen;
  for (int i = 0; i < 2000; ++i) {
    EXPECT_EQ(loom::serve::llm::sample(logits.data(), 4, k1, rng).token, 1);
    EXPECT_EQ(loom::serve::llm::sample(logits.data(), 4, p_small, rng).token, 1);
    ++seen[loom::serve::llm::sample(logits.data(), 4, k2, rng).token];
  }
  EXPECT_EQ(seen.size(), 2u);  // only the two most likely
  const double want = std::exp(2.0) / (std::exp(2.0) + std::exp(1.5));
  EXPECT_NEAR(seen[1] / 2000.0, want, 0.04);
  // Plain temperature sampling follows softmax(logits / T).
  SamplingParams t2;
  t2.temperature = 2.0f;
  std::map<int, int> freq;
  for (int i = 0; i < 20000; ++i) ++freq[loom::serve::llm::sample(logits.data(), 4, t2, rng).token];
  double zt = 0;
  for (float l : logits) zt += std::exp(l / 2);
  for (int v = 0; v < 4; ++v) EXPECT_NEAR(freq[v] / 20000.0, std::exp(logits[v] / 2) / zt, 0.015) << v;
  std::mt19937_64 a(7), b(7);
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(loom::serve::llm::sample(logits.data(), 4, t2, a).token, loom::serve::llm::sample(logits.data(), 4, t2, b).token);
}

// A safetensors file from a header and raw bytes.
std::string write_st(const std::string& header, const std::string& data, uint64_t len_override = 0) {
  static int n = 0;
  const std::string path = "/tmp/loom-llm-test-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".safetensors";
  std::ofstream f(path, std::ios::binary);
  uint64_t len = len_override ? len_override : header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((len >> (8 * i)) & 0xFF));
  f << header << data;
  return path;
}


// A byte-level BPE folder: GPT-2's 256 byte tokens and `specials` (ids 256, 257, ...) listed in
// tokenizer_config.json's added_tokens_decoder (with `extra` added to it, as published files are).
std::string bpe_folder(int specials, const std::string& extra = "") {
  static int n = 0;
  const std::string dir = "/tmp/loom-bpe-test-" + std::to_string(getpid()) + "-" + std::to_string(n++);
  mkdir(dir.c_str(), 0700);
  nlohmann::json vocab = nlohmann::json::object();
  int next = 0;
  for (int b = 0; b < 256; ++b) {  // GPT-2's bytes_to_unicode
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t c = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + next++);
    std::string u;
    if (c < 0x80) u = std::string(1, static_cast<char>(c));
    else u = {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    vocab[u] = b;
  }
  nlohmann::json added = nlohmann::json::object();
  for (int k = 0; k < specials; ++k) {
    vocab["<|s" + std::to_string(k) + "|>"] = 256 + k;
    added[std::to_string(256 + k)] = {{"content", "<|s" + std::to_string(k) + "|>"}, {"special", true}};
  }
  std::ofstream(dir + "/vocab.json") << vocab.dump();
  std::ofstream(dir + "/merges.txt") << "#version: 0.2\n";
  std::string cfg = nlohmann::json({{"added_tokens_decoder", added}}).dump();
  if (!extra.empty()) cfg = cfg.substr(0, cfg.size() - 2) + "," + extra + "}}";
  std::ofstream(dir + "/tokenizer_config.json") << cfg;
  return dir;
}

// Special tokens are found in one pass: with 30 of them, a text of 64,000 specials once took
// minutes (each match searched the rest of the text again for every other special).
TEST(BpeTokenizer, SpecialTokensInOnePass) {
  const std::string dir = bpe_folder(30);
  loom::serve::llm::BpeTokenizer tok(dir + "/vocab.json", dir + "/merges.txt", 300);
  tok.read_special_tokens(dir);
  std::string text;
  for (int i = 0; i < 64000; ++i) text += "<|s7|>";
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok.encode(text + "ab<|s29|>");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));  // quadratic: minutes
  ASSERT_EQ(ids.size(), 64003u);
  EXPECT_EQ(ids[0], 263);
  EXPECT_EQ(ids[63999], 263);
  EXPECT_EQ(ids[64000], 'a' - 0);
  EXPECT_EQ(ids.back(), 285);
  EXPECT_EQ(tok.encode("x<|s3|><|s30|>"), (std::vector<int32_t>{'x', 259, '<', '|', 's', '3', '0', '|', '>'}));
}

// Ids past 32 bits are refused whole, not read as the small id they truncate to.
TEST(BpeTokenizer, IdsPast32BitsAreRefused) {
  const std::string dir = bpe_folder(2, R"("4294967299": {"content": "<|big|>"})");
  loom::serve::llm::BpeTokenizer tok(dir + "/vocab.json", dir + "/merges.txt", 300);
  try {
    tok.read_special_tokens(dir);
    ADD_FAILURE() << "an added token with id 4294967299 was read";
  } catch (const loom::rt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has id 4294967299, outside the vocabulary"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, ReadsF32F16Bf16) {
  std::string data;
  const float f[2] = {1.5f, -2.0f};
  data.append(reinterpret_cast<const char*>(f), 8);
  const uint16_t h[2] = {0x3C00, 0xC000};  // 1.0, -2.0 in half
  data.append(reinterpret_cast<const char*>(h), 4);
  const uint16_t b[1] = {0x4040};  // 3.0 in bfloat16
  data.append(reinterpret_cast<const char*>(b), 2);
  const std::string path = write_st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"h":{"dtype":"F16","shape":[1,2],"data_offsets":[8,12]},)"
                                    R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[12,14]},"__metadata__":{"format":"pt"}})",
                                    data);
  loom::rt::Safetensors st(path);
  EXPECT_EQ(st.metadata().at("format"), "pt");
  EXPECT_EQ(st.tensor("a").f32()[1], -2.0f);
  EXPECT_EQ(st.tensor("h").f32()[0], 1.0f);
  EXPECT_EQ(st.tensor("h").shape(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(st.tensor("b").f32()[0], 3.0f);
  EXPECT_THROW(st.tensor("nope"), loom::rt::Error);
  std::remove(path.c_str());
}

TEST(Safetensors, HeadersThatLieAreRefused) {
  const std::string d(16, '\0');
  const std::vector<std::pair<std::string, std::string>> lies = {
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,800]}})", "outside"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "bytes for shape"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", "overlap"},
      {R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", "dtype"},
      {R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", "shape"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", "outside"},
      {R"([1,2])", "JSON object"},
      {R"({"a":)", "not valid JSON"},
      // Nested half a million deep: refused as it is read (the messages once dumped it, off the stack).
      {R"({"a":{"dtype":"F32","shape":)" + std::string(500000, '[') + std::string(500000, ']') + R"(,"data_offsets":[0,8]}})",
       "nested deeper than 64"}};
  for (const auto& lie : lies) {
    const std::string path = write_st(lie.first, d);
    try {
      loom::rt::Safetensors st(path);
      ADD_FAILURE() << lie.first << " was accepted";
    } catch (const loom::rt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(lie.second), std::string::npos) << e.what();
    }
    std::remove(path.c_str());
  }
  const std::string huge = write_st("{}", d, 4ull << 30);
  EXPECT_THROW(loom::rt::Safetensors{huge}, loom::rt::Error);
  std::remove(huge.c_str());
}

TEST(Safetensors, WrittenTensorsReadBackAsStored) {
  const std::string path = "/tmp/loom-llm-test-" + std::to_string(getpid()) + "-written.safetensors";
  auto bytes = [](std::vector<uint8_t> b) { return [b] { return b; }; };
  const float f[2] = {0.25f, -8.0f};
  std::vector<uint8_t> fb(8);
  std::memcpy(fb.data(), f, 8);
  loom::rt::write_safetensors(path, {{"w", "I8", {2, 3}, bytes({1, 2, 3, 0xFF, 0x80, 0x7F})}, {"w_scale", "F32", {2, 1}, bytes(fb)},
                                     {"b", "BF16", {1}, bytes({0x40, 0x40})}},
                              {{"format", "pt"}});
  loom::rt::Safetensors st(path);
  EXPECT_EQ(st.metadata().at("format"), "pt");
  EXPECT_EQ(st.entries().at("w").dtype, "I8");
  EXPECT_EQ(st.raw("w"), (std::vector<uint8_t>{1, 2, 3, 0xFF, 0x80, 0x7F}));
  EXPECT_EQ(st.tensor("w_scale").f32()[1], -8.0f);
  EXPECT_EQ(st.tensor("b").f32()[0], 3.0f);
  // A tensor whose bytes disagree with its shape: nothing is left behind, the old file stays.
  EXPECT_THROW(loom::rt::write_safetensors(path, {{"w", "I8", {2, 3}, bytes({1, 2})}}, {}), loom::rt::Error);
  EXPECT_FALSE(std::ifstream(path + ".part").good());
  EXPECT_EQ(loom::rt::Safetensors(path).entries().size(), 3u);
  EXPECT_THROW(loom::rt::write_safetensors(path, {{"a", "F32", {1}, bytes(fb)}, {"a", "F32", {1}, bytes(fb)}}, {}), loom::rt::Error);
  EXPECT_THROW(loom::rt::write_safetensors(path, {{"a", "Q4", {1}, bytes(fb)}}, {}), loom::rt::Error);
  std::remove(path.c_str());
}

// config.json's quantization_config: loom-compress's own scheme and vLLM's W8A8 int8 variants
// are read; every other scheme is refused naming its field.
TEST(HfQuant, Int8SchemesReadOthersRefusedByField) {
  const std::string path = "/tmp/loom-llm-test-" + std::to_string(getpid()) + "-config.json";
  auto scheme = [&](const nlohmann::json& q) {
    std::ofstream(path) << nlohmann::json{{"architectures", {"LlamaForCausalLM"}}, {"quantization_config", q}}.dump();
    return loom::rt::read_int8_scheme(loom::rt::ConfigJson(path));
  };
  const nlohmann::json own = loom::rt::int8_quantization_config();
  EXPECT_TRUE(scheme(own));
  nlohmann::json sym = own, tensor = own;
  sym["config_groups"]["group_0"]["input_activations"]["symmetric"] = true;
  tensor["config_groups"]["group_0"]["weights"]["strategy"] = "tensor";
  EXPECT_TRUE(scheme(sym));
  EXPECT_TRUE(scheme(tensor));
  std::ofstream(path) << R"({"architectures": ["LlamaForCausalLM"]})";
  EXPECT_FALSE(loom::rt::read_int8_scheme(loom::rt::ConfigJson(path)));
  auto refused = [&](const std::function<void(nlohmann::json&)>& spoil, const std::string& field) {
    nlohmann::json q = own;
    spoil(q);
    try {
      scheme(q);
      ADD_FAILURE() << q.dump() << " was read";
    } catch (const loom::rt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  const nlohmann::json::json_pointer g("/config_groups/group_0");
  refused([](auto& q) { q["quant_method"] = "awq"; }, "quantization_config.quant_method is 'awq'");
  refused([](auto& q) { q["format"] = "pack-quantized"; }, "group_0 format is 'pack-quantized'");
  refused([&](auto& q) { q[g]["weights"]["num_bits"] = 4; }, "group_0.weights.num_bits is 4");
  refused([&](auto& q) { q[g]["weights"]["strategy"] = "group"; }, "group_0.weights.strategy is 'group'");
  refused([&](auto& q) { q[g]["weights"]["symmetric"] = false; }, "group_0.weights.symmetric is false");
  refused([&](auto& q) { q[g]["weights"]["type"] = "float"; }, "group_0.weights.type is \"float\"");
  refused([&](auto& q) { q[g]["input_activations"] = nullptr; }, "group_0.input_activations is null");
  refused([&](auto& q) { q[g]["input_activations"]["dynamic"] = false; }, "group_0.input_activations.dynamic is false");
  refused([&](auto& q) { q[g]["input_activations"]["strategy"] = "tensor"; }, "input_activations.strategy is \"tensor\"");
  refused([](auto& q) { q["kv_cache_scheme"] = {{"num_bits", 8}}; }, "kv_cache_scheme is set");
  refused([](auto& q) { q["config_groups"] = nlohmann::json::object(); }, "config_groups must name at least one group");
  std::remove(path.c_str());
}

// The engine's greedy tokens against the training gpt's forward pass over the whole sequence.
std::vector<int32_t> gpt_greedy(loom::rt::Gpt& g, std::vector<int32_t> ids, int n) {
  const int T = g.config().context, V = g.config().vocab;
  std::vector<int32_t> out;
  for (int k = 0; k < n; ++k) {
    std::vector<int32_t> window(static_cast<size_t>(T), 0), targets(static_cast<size_t>(T), 0);
    std::copy(ids.begin(), ids.end(), window.begin());
    g.forward(window, targets, 1, false);
    const float* l = g.logits().f32() + (ids.size() - 1) * static_cast<size_t>(V);
    const int32_t next = static_cast<int32_t>(std::max_element(l, l + V) - l);
    ids.push_back(next);
    out.push_back(next);
  }
  return out;
}

std::shared_ptr<loom::serve::llm::Stream> greedy_stream(loom::serve::llm::Engine& e, const std::vector<int32_t>& prompt, int n) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = n;
  return e.submit(prompt, p, loom::serve::Clock::now() + std::chrono::seconds(60));
}

std::vector<int32_t> stream_tokens(const std::shared_ptr<loom::serve::llm::Stream>& s) {
  std::vector<int32_t> out;
  for (;;) {
    loom::serve::llm::TokenEvent ev;
    if (!s->next(&ev, loom::serve::Clock::now() + std::chrono::seconds(60))) break;
    EXPECT_EQ(ev.error, loom::serve::Status::kOk) << ev.message;
    if (ev.token >= 0) out.push_back(ev.token);
    if (ev.done) break;
  }
  return out;
}

std::vector<int32_t> engine_tokens(loom::serve::llm::Engine& e, const std::vector<int32_t>& prompt, int n) {
  return stream_tokens(greedy_stream(e, prompt, n));
}

TEST(Engine, EqualsTheGptsOwnForwardPassWithPreemptionAndPrefixHits) {
  loom::rt::GptConfig c;
  c.vocab = 40, c.context = 48, c.layers = 2, c.heads = 2, c.embd = 16;
  loom::rt::Gpt g(c, 3);
  for (auto& p : g.params())  // larger weights than the initialisation: decisive argmaxes
    for (int64_t i = 0; i < p.value.numel(); ++i) p.value.f32()[i] *= 8;
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {4, 5, 6, 7, 8, 9, 10, 11, 12}, {13}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}};
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(gpt_greedy(g, p, 20));
  for (size_t blocks : {size_t{64}, size_t{8}}) {  // 8 blocks of 4: one sequence of up to 30 fits, four at once do not
    for (bool prefix : {true, false}) {
      loom::serve::LlmOptions o;
      o.kv_block_tokens = 4;
      o.kv_cache_bytes = blocks * loom::rt::KvCache::bytes_per_block(loom::rt::decoder_from_gpt(g).c, 4);
      o.prefix_caching = prefix;
      loom::serve::llm::Engine e(loom::rt::Decoder(loom::rt::decoder_from_gpt(g)), nullptr, {}, o);
      // All four are submitted before any is read, so they run together whatever the load:
      // the streams keep their tokens until they are read.
      std::vector<std::shared_ptr<loom::serve::llm::Stream>> streams;
      for (const auto& p : prompts) streams.push_back(greedy_stream(e, p, 20));
      std::vector<std::vector<int32_t>> got;
      for (const auto& s : streams) got.push_back(stream_tokens(s));
      for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], want[i]) << "blocks " << blocks << " prefix " << prefix << " prompt " << i;
      if (blocks == 8) {
        EXPECT_GT(e.stats().preemptions, 0u);
      }
      if (!prefix) {
        EXPECT_EQ(e.stats().prefix_hits, 0u);
      }
    }
  }
}

TEST(Engine, RefusesWhatCannotRun) {
  loom::rt::GptConfig c;
  c.vocab = 10, c.context = 8, c.layers = 1, c.heads = 1, c.embd = 4;
  loom::rt::Gpt g(c, 1);
  loom::serve::LlmOptions o;
  o.kv_block_tokens = 2;
  loom::serve::llm::Engine e(loom::rt::Decoder(loom::rt::decoder_from_gpt(g)), nullptr, {}, o);
  const auto later = loom::serve::Clock::now() + std::chrono::seconds(5);
  EXPECT_THROW(e.submit({}, {}, later), loom::serve::ServeError);
  EXPECT_THROW(e.submit({1, 2, 3, 4, 5, 6, 7, 8}, {}, later), loom::serve::ServeError);  // no room in the context
  EXPECT_THROW(e.submit({1, 10}, {}, later), loom::serve::ServeError);                    // outside the vocabulary
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 1000;
  EXPECT_EQ(engine_tokens(e, {1, 2, 3}, 1000).size(), 5u);  // capped by the context of 8
  o.kv_cache_bytes = 1;
  EXPECT_THROW(loom::serve::llm::Engine(loom::rt::Decoder(loom::rt::decoder_from_gpt(g)), nullptr, {}, o), loom::rt::Error);
}

}  // namespace

// Chat templates: Jinja's whitespace rules (trim_blocks, lstrip_blocks, '-') and data model, what
// the template refuses, and what the reader refuses at load, named.
namespace chat {

using loom::serve::llm::ChatMessage;
using loom::serve::llm::ChatTemplate;

std::string render(const std::string& src, std::vector<ChatMessage> m = {{"user", "hi"}, {"assistant", "yo"}}, size_t max = 1 << 20) {
  return ChatTemplate(src).render(m, true, "<s>", "</s>", max);
}

TEST(ChatTemplate, WhitespaceAsTransformersRendersIt) {
  // trim_blocks drops the newline after a block; lstrip_blocks the blanks before one on its line.
  EXPECT_EQ(render("{% for m in messages %}\n  {% if m.role == 'user' %}\nU:{{ m.content }}\n  {% endif %}\n{% endfor %}"), "U:hi\n");
  EXPECT_EQ(render("a  {{- ' b ' -}}  c"), "a b c");
  EXPECT_EQ(render("x {%- if true %} y{% endif %}"), "x y");
  EXPECT_EQ(render("{# note #}\n{{ bos_token }}"), "<s>");
}

TEST(ChatTemplate, ExpressionsAndScopes) {
  EXPECT_EQ(render("{{ messages|length }} {{ messages[-1]['content']|upper }} {{ messages[1:]|length }} {{ 7 // 2 }} {{ -7 % 3 }}"),
            "2 YO 1 3 2");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none }} {{ 'x' if messages|length > 5 else 'y' }} {{ undefined_name is defined }}"), "a1None y False");
  EXPECT_EQ(render("{% set n = 1 %}{% for m in messages %}{% set n = 2 %}{{ loop.index }}/{{ loop.length }}{% endfor %} {{ n }}"),
            "1/22/2 1");  // a set inside a loop stays there, as in Jinja
  EXPECT_EQ(render("{{ '  pad \\n'.strip() }}|{{ 'abc'.startswith('ab') }}|{{ 'b' in 'abc' }}|{{ 'q' not in ['a'] }}"), "pad|True|True|True");
  EXPECT_EQ(render("{% for m in [] %}x{% else %}empty{% endfor %}"), "empty");
}

// What the newer published templates use (Qwen3's reasoning turns, Llama 3's tool headers).
TEST(ChatTemplate, NamespacesSlicesFiltersAndLoopControls) {
  EXPECT_EQ(render("{% set ns = namespace(n=0, last='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% set ns.last = m.role %}"
                   "{% endfor %}{{ ns.n }} {{ ns.last }}"),
            "2 assistant");  // a namespace's attributes outlive the loop, unlike a plain set
  EXPECT_EQ(render("{{ [1, 2, 3, 4][::-1] }} {{ 'abcdef'[1:5:2] }} {{ [1, 2, 3][5:] }} {{ 'abc'[::-2] }}"), "[4, 3, 2, 1] bd [] ca");
  EXPECT_EQ(render("{{ '<think>a</think>\nb'.split('</think>')[-1].lstrip('\n') }}|{{ ' a  b '.split() }}|{{ 'xxhixx'.strip('x') }}"),
            "b|['a', 'b']|hi");
  EXPECT_EQ(render("{{ ['a', 'b', 'c'] | reject('equalto', 'b') | join(', ') }}|{{ messages | selectattr('role', 'equalto', 'user') "
                   "| map(attribute='content') | list }}|{{ messages | map(attribute='role') | join('-') | title }}"),
            "a, c|['hi']|User-Assistant");
  EXPECT_EQ(render("{% for k, v in {'b': 1, 'a': [True, none]} | items %}{{ k }}={{ v }};{% endfor %}{{ {'b': 1, 'a': 'x'} | tojson }}"
                   "|{{ {'k': [1]} | tojson(indent=2) }}"),
            "b=1;a=[True, None];{\"b\": 1, \"a\": \"x\"}|{\n  \"k\": [\n    1\n  ]\n}");  // insertion order, Python's separators
  EXPECT_EQ(render("{% for i in range(9) %}{% if i == 1 %}{% continue %}{% endif %}{% if i > 3 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
            "023");
  EXPECT_EQ(render("{{ false is false }} {{ 0 is false }} {{ 'x' is string }} {{ {'a': 1}.get('b', 'none') }} "
                   "{{ strftime_now is defined }} {{ strftime_now('%Y') | length }}{% generation %} kept{% endgeneration %}"),
            "True False True none True 4 kept");
  EXPECT_EQ(render("{% macro m(a, b='B') %}[{{ a }}{{ b }}{{ messages|length }}{{ x }}]{% endmacro %}{% set x = 'X' %}"
                   "{% for i in [1] %}{{ m(i) }}{{ m(b=2, a=i) }}{% endfor %}\n"),
            "[1B2X][122X]");  // the template's variables, not the loop's; one trailing newline dropped
  for (const char* bad : {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "{% macro m(a) %}{% endmacro %}{{ m(c=1) }}",
                          "{% macro m(n) %}{{ m(n) }}{% endmacro %}{{ m(1) }}"})
    EXPECT_THROW(render(bad), loom::Error) << bad;
  try {
    render("{% set x = 1 %}{% set x.a = 2 %}");
    ADD_FAILURE() << "an attribute set on a plain value";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a namespace()"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, RefusalsAndLimits) {
  try {
    render("{{ raise_exception('roles must alternate') }}");
    ADD_FAILURE() << "raise_exception did not refuse";
  } catch (const loom::Error& e) {
    EXPECT_EQ(e.kind(), loom::Kind::kInput);
    EXPECT_STREQ(e.what(), "roles must alternate");
  }
  EXPECT_THROW(render("{% for i in range(100) %}{{ messages }}{% endfor %}", {{"user", std::string(1000, 'x')}}, 4096), loom::Error);
  EXPECT_THROW(render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"), loom::Error);
  EXPECT_THROW(render("{{ [1] | select('odd') }}"), loom::Error);  // a test it lacks, named when the filter runs
  for (const auto& bad : std::vector<std::pair<std::string, std::string>>{
           {"{% include 'x.jinja' %}", "uses {% include %}"},
           {"{{ x|wordwrap }}", "the filter 'wordwrap'"},
           {"{{ cycler(1) }}", "the function cycler()"},
           {"{{ x.format(1) }}", "the method .format()"},
           {"{% break %}", "{% break %} outside a loop"},
           {"{% if true %}open", "ends before its {% elif %}"},
           {"{{ 'unterminated }}", "a tag without its close"},
           {std::string(100, '(') + "1" + std::string(100, ')'), "nested deeper than 64"}}) {
    try {
      ChatTemplate t("{{ " + (bad.first[0] == '(' ? bad.first + " }}" : "1 }}") + (bad.first[0] == '(' ? "" : bad.first));
      ADD_FAILURE() << bad.first << " was read";
    } catch (const loom::rt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad.second), std::string::npos) << e.what();
    }
  }
}


// A template is a program from a model's folder: each of these once ended the server. Now each is
// the request's 400 naming the limit (or the load's error naming what it refuses).
TEST(ChatTemplate, HostileTemplatesEndAsErrors) {
  const std::string least = "{% set m = -999999999999999999 * 9 - 223372036854775817 %}";  // INT64_MIN
  const std::string most = "{% set big = 999999999999999999 * 9 + 223372036854775816 %}";   // INT64_MAX
  EXPECT_EQ(render(least + "{{ m % -1 }} {{ 7 % -1 }} {{ m // 1 == m }}"), "0 0 True");
  EXPECT_EQ(render("{{ -7 // 2 }} {{ 7 // -2 }} {{ 7 / 2 }} {{ 7 % -3 }} {{ -7 % 3 }}"), "-4 -4 3.5 -2 2");  // Python's
  EXPECT_EQ(render(most + "{{ 'abc'[1::big] }}|{{ 'abc'[1::-big] }}|{{ [1, 2, 3][::big] }}|{{ 'abc'[big:] }}"), "b|b|[1]|");
  auto refused = [](const std::string& src, const std::string& why, std::chrono::steady_clock::time_point deadline =
                                                                          std::chrono::steady_clock::time_point::max()) {
    try {
      ChatTemplate(src).render(nlohmann::ordered_json::array({{{"role", "user"}, {"content", "hi"}}}), nlohmann::ordered_json::object(),
                               true, "<s>", "</s>", 1 << 20, deadline);
      ADD_FAILURE() << src.substr(0, 200) << ": rendered";
    } catch (const loom::Error& e) {
      EXPECT_EQ(e.kind(), loom::Kind::kInput) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << src.substr(0, 200) << ": " << e.what();
    }
  };
  refused(least + "{{ m // -1 }}", "integer overflow");
  refused(least + "{{ -m }}", "integer overflow");
  refused(most + "{{ big + 1 }}", "integer overflow");
  refused(most + "{{ big * 2 }}", "integer overflow");
  // Recursion and time: a macro calling itself twice counts every call.
  const auto t0 = std::chrono::steady_clock::now();
  refused("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}", "macros call each other deeper");
  refused("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(31) }}", "more than 1000000 steps");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  refused("{% for i in range(100000) %}{% for c in 'abcdefghij' %}{{ '' }}{% endfor %}{% endfor %}", "steps");
  refused("{% for i in range(5000) %}{{ messages | length }}{% endfor %}", "deadline", std::chrono::steady_clock::now());
  // Values that nest without end: built through a namespace, they would take the stack when printed or freed.
  refused("{% set ns = namespace(x=0) %}{% for i in range(1000) %}{% for j in 'abcdefghij' %}{% set ns.x = [ns.x] %}{% endfor %}"
          "{% endfor %}{{ ns.x }}", "nested deeper than 64");
  refused("{% set ns = namespace(x=0) %}{% set ns.x = [ns] %}{{ ns }}", "holds the namespace itself");
  refused("{% set ns = namespace(x=0) %}{% set l = [ns] %}{% set ns.x = {'a': l} %}{{ ns }}", "holds the namespace itself");
  refused("{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x }}", "bytes");
  // Memory: a string or a list doubled, text built past the limits before the output is.
  refused("{% set ns = namespace(s='ab') %}{% for i in range(28) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
          "a string of more than");
  refused("{% set ns = namespace(s='ab') %}{% for i in range(28) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "a string of more than");
  refused("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", "MiB of values");
  refused("{% set s = 'ab' %}{% set s = s ~ s ~ s ~ s ~ s ~ s ~ s ~ s %}{% set ns = namespace(s=s) %}{% for i in range(20) %}"
          "{% set ns.s = ns.s | replace('a', ns.s) %}{% endfor %}", "replace() builds a string");
  refused("{% set ns = namespace(s='abcd') %}{% for i in range(30) %}{% set ns.s = [ns.s, ns.s] | join('') %}{% endfor %}",
          "join() builds a string");
  // What the reader refuses at load: operators on operators past what evaluation can recurse.
  for (const auto& bad : std::vector<std::pair<std::string, std::string>>{
           {"{{ " + std::string(57000, '-') + "1 }}", "nested deeper than 64"},
           {"{{ " + [] { std::string s; for (int i = 0; i < 57000; ++i) s += "not "; return s; }() + "1 }}", "nested deeper than 64"},
           {"{{ x" + [] { std::string s; for (int i = 0; i < 400000; ++i) s += ".a"; return s; }() + " }}", "more than 128 operators"},
           {"{{ 'a'" + [] { std::string s; for (int i = 0; i < 150000; ++i) s += " ~ 'a'"; return s; }() + " }}", "more than 128 operators"},
           {"{{ x" + [] { std::string s; for (int i = 0; i < 100000; ++i) s += "|trim"; return s; }() + " }}", "more than 128 operators"},
           {"{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}", "nested deeper than 64"}}) {
    try {
      ChatTemplate t(bad.first);
      ADD_FAILURE() << bad.first.substr(0, 60) << " was read";
    } catch (const loom::rt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad.second), std::string::npos) << e.what();
    }
  }
}

}  // namespace chat


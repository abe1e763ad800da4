// sampler.hpp — choosing a sequence's next token from its logits: greedy (temperature 0), or
// temperature, then top-k, then top-p (nucleus), then a draw from the sequence's own generator;
// the chosen token's log-probability under the model (log-softmax of the raw logits) and the
// top alternatives', as OpenAI's logprobs report them.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace loom::serve::llm {

struct SamplingParams {
  int max_tokens = 16;
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0: all
  float top_p = 1.0f;        // (0, 1]
  bool has_seed = false;
  uint64_t seed = 0;
  std::vector<std::string> stop;         // stop strings (not part of the text returned)
  std::vector<int32_t> stop_token_ids;   // stop tokens (not part of the text returned)
  bool ignore_eos = false;
  int logprobs = -1;  // -1: none; 0: the chosen token's; k: and the k most likely
  // Which of temperature, top_p and top_k the request gave: the others take the model's
  // defaults (generation_config.json), as vLLM.
  bool set_temperature = false, set_top_p = false, set_top_k = false;
};

// A model's sampling defaults (generation_config.json's temperature, top_p, top_k); < 0: none.
struct SamplingDefaults {
  float temperature = -1, top_p = -1;
  int top_k = -1;
  // p with the defaults where the request gave nothing.
  void apply(SamplingParams& p) const {
    if (!p.set_temperature && temperature >= 0) p.temperature = temperature;
    if (!p.set_top_p && top_p > 0) p.top_p = top_p;
    if (!p.set_top_k && top_k >= 0) p.top_k = top_k;
  }
};

struct Choice {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // the k most likely tokens and their log-probabilities
};

// logits [vocab] may be overwritten.
Choice sample(float* logits, int vocab, const SamplingParams& p, std::mt19937_64& rng);

}  // namespace loom::serve::llm

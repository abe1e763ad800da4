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
};

struct Choice {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // the k most likely tokens and their log-probabilities
};

// logits [vocab] may be overwritten.
Choice sample(float* logits, int vocab, const SamplingParams& p, std::mt19937_64& rng);

}  // namespace loom::serve::llm

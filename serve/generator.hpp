// generator.hpp — text generation with a served `gpt` model (the KServe v2 generate extension):
// byte-level tokens from model.config's vocab_bytes, a causal window of the model's context,
// greedy (temperature 0) or sampled next tokens; one generation at a time per model version.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "loom/rt/nn/gpt.hpp"
#include "status.hpp"

namespace loom::serve {

struct GenerateParams {
  int max_tokens = 64;       // 1 to kMaxGenerateTokens
  float temperature = 0.0f;  // 0: greedy
  uint64_t seed = 0;         // the sampler's seed (temperature > 0)
  Clock::time_point deadline = Clock::time_point::max();
};
constexpr int kMaxGenerateTokens = 4096;

class TextGenerator {
 public:
  // `vocab_bytes`: the byte each token stands for (model.config). Throws rt::Error when they do
  // not fit the model.
  TextGenerator(rt::Gpt model, std::vector<int> vocab_bytes, const std::string& path);
  // The prompt's continuation, max_tokens bytes. on_piece, when set, is told each new byte as it
  // comes (returning false stops). Throws ServeError: kBadRequest (empty prompt, a byte outside
  // the vocabulary), kTimeout (past the deadline).
  std::string generate(const std::string& prompt, const GenerateParams& p,
                       const std::function<bool(const std::string&)>& on_piece = nullptr);
  int context() const { return gpt_.config().context; }

 private:
  std::mutex mu_;  // the model keeps its activations: one forward at a time
  rt::Gpt gpt_;
  std::vector<int> bytes_;
  int token_of_[256];
};

}  // namespace loom::serve

// generator.cpp — byte-level prompts, a sliding causal window, greedy or sampled next tokens.
#include "generator.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "loom/rt/error.hpp"

namespace loom::serve {

TextGenerator::TextGenerator(rt::Gpt model, std::vector<int> vocab_bytes, const std::string& path)
    : gpt_(std::move(model)), bytes_(std::move(vocab_bytes)) {
  if (static_cast<int>(bytes_.size()) != gpt_.config().vocab)
    throw rt::Error(path + ": model.config's vocab_bytes holds " + std::to_string(bytes_.size()) + " bytes for a vocabulary of " +
                    std::to_string(gpt_.config().vocab));
  std::fill(std::begin(token_of_), std::end(token_of_), -1);
  for (size_t i = 0; i < bytes_.size(); ++i) {
    const int b = bytes_[i];
    if (b < 0 || b > 255 || token_of_[b] >= 0) throw rt::Error(path + ": model.config's vocab_bytes are not distinct bytes");
    token_of_[b] = static_cast<int>(i);
  }
}

std::string TextGenerator::generate(const std::string& prompt, const GenerateParams& p,
                                    const std::function<bool(const std::string&)>& on_piece) {
  if (prompt.empty()) throw ServeError(Status::kBadRequest, "text_input must not be empty");
  std::vector<int32_t> ids;
  ids.reserve(prompt.size() + static_cast<size_t>(p.max_tokens));
  for (unsigned char ch : prompt) {
    if (token_of_[ch] < 0)
      throw ServeError(Status::kBadRequest, "text_input holds byte " + std::to_string(ch) + ", not in the model's vocabulary");
    ids.push_back(token_of_[ch]);
  }
  const int T = gpt_.config().context, V = gpt_.config().vocab;
  std::mt19937_64 rng(p.seed);
  std::vector<int32_t> window(static_cast<size_t>(T)), targets(static_cast<size_t>(T), 0);
  std::vector<double> probs(static_cast<size_t>(V));
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (int n = 0; n < p.max_tokens; ++n) {
    if (Clock::now() > p.deadline)
      throw ServeError(Status::kTimeout, "generation timed out after " + std::to_string(n) + " tokens");
    // The last T tokens, from position 0: causal attention makes the rest of the window (zeros)
    // invisible to the position whose logits are read.
    const size_t used = std::min(ids.size(), static_cast<size_t>(T));
    std::copy(ids.end() - static_cast<std::ptrdiff_t>(used), ids.end(), window.begin());
    std::fill(window.begin() + static_cast<std::ptrdiff_t>(used), window.end(), 0);
    gpt_.forward(window, targets, 1, false);
    const float* logits = gpt_.logits().f32() + (used - 1) * static_cast<size_t>(V);
    int next = static_cast<int>(std::max_element(logits, logits + V) - logits);
    if (p.temperature > 0) {
      const float top = logits[next];
      for (int v = 0; v < V; ++v) probs[static_cast<size_t>(v)] = std::exp((logits[v] - top) / p.temperature);
      next = std::discrete_distribution<int>(probs.begin(), probs.end())(rng);
    }
    ids.push_back(next);
    const std::string piece(1, static_cast<char>(bytes_[static_cast<size_t>(next)]));
    out += piece;
    if (on_piece && !on_piece(piece)) break;
  }
  return out;
}

}  // namespace loom::serve

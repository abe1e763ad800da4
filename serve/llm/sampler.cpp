// sampler.cpp — greedy, temperature, top-k and top-p over one row of logits. Only what the
// request asks for is computed: greedy is an argmax, plain temperature sampling one pass over the
// vocabulary, a sort only for top-k or top-p, the log-softmax only when logprobs are asked for.
#include "sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LOOM_SAMPLER_VEC __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define LOOM_SAMPLER_VEC
#endif

namespace loom::serve::llm {

namespace {

// log(sum(exp(x))), stable.
double log_sum_exp(const float* x, int n) {
  const float top = *std::max_element(x, x + n);
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i] - top));
  return top + std::log(s);
}

// A draw from the tokens idx[0, keep) (all when idx is empty) weighted exp((logit - top) / T),
// restricted to the smallest head whose mass reaches top_p when idx is sorted.
int32_t draw(const float* logits, int vocab, const std::vector<int32_t>& idx, int keep, float top, const SamplingParams& p,
             std::mt19937_64& rng) {
  auto id = [&](int i) { return idx.empty() ? i : idx[static_cast<size_t>(i)]; };
  std::vector<double> w(static_cast<size_t>(keep));
  double sum = 0;
  for (int i = 0; i < keep; ++i) sum += w[static_cast<size_t>(i)] = std::exp((logits[id(i)] - top) / p.temperature);
  if (!idx.empty() && p.top_p < 1.0f) {
    double run = 0;
    int n = 0;
    while (n < keep && run < p.top_p * sum) run += w[static_cast<size_t>(n++)];
    keep = std::max(n, 1);
    sum = run > 0 ? run : w[0];
  }
  const double u = std::uniform_real_distribution<double>(0.0, sum)(rng);
  double run = 0;
  for (int i = 0; i < keep; ++i)
    if (u < (run += w[static_cast<size_t>(i)])) return id(i);
  (void)vocab;
  return id(keep - 1);
}

// The first index of the largest logit (std::max_element's answer), the maximum found in vector
// lanes first: over a 50,000-token vocabulary for 32 sequences a step, max_element's compare
// per element took a tenth of a small model's decode step.
LOOM_SAMPLER_VEC int argmax(const float* x, int n) {
  constexpr int kLanes = 16;
  float lane[kLanes];
  std::fill(lane, lane + kLanes, -std::numeric_limits<float>::infinity());
  int k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = lane[l] > x[k + l] ? lane[l] : x[k + l];
  float m = *std::max_element(lane, lane + kLanes);
  for (; k < n; ++k) m = m > x[k] ? m : x[k];
  for (int i = 0; i < n; ++i)
    if (x[i] == m) return i;
  return 0;
}

}  // namespace

Choice sample(float* logits, int vocab, const SamplingParams& p, std::mt19937_64& rng) {
  Choice c;
  const int greedy = argmax(logits, vocab);
  c.token = greedy;
  if (p.temperature > 0 && p.top_k != 1) {
    std::vector<int32_t> idx;
    int keep = vocab;
    if (p.top_k > 0 || p.top_p < 1.0f) {
      idx.resize(static_cast<size_t>(vocab));
      std::iota(idx.begin(), idx.end(), 0);
      auto order = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
      keep = p.top_k > 0 ? std::min(p.top_k, vocab) : vocab;
      std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(), order);
    }
    c.token = draw(logits, vocab, idx, keep, logits[greedy], p, rng);
  }
  if (p.logprobs >= 0) {
    const double lse = log_sum_exp(logits, vocab);
    c.logprob = static_cast<float>(logits[c.token] - lse);
    std::vector<int32_t> idx(static_cast<size_t>(vocab));
    std::iota(idx.begin(), idx.end(), 0);
    const int k = std::min(p.logprobs, vocab);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    for (int i = 0; i < k; ++i) c.top.emplace_back(idx[static_cast<size_t>(i)], static_cast<float>(logits[idx[static_cast<size_t>(i)]] - lse));
  }
  return c;
}

}  // namespace loom::serve::llm

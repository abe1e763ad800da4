// sampler.cpp — greedy, temperature, top-k and top-p over one row of logits.
#include "sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace loom::serve::llm {

namespace {

// log(sum(exp(x))), stable.
double log_sum_exp(const float* x, int n) {
  const float top = *std::max_element(x, x + n);
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i] - top));
  return top + std::log(s);
}

}  // namespace

Choice sample(float* logits, int vocab, const SamplingParams& p, std::mt19937_64& rng) {
  Choice c;
  const double lse = log_sum_exp(logits, vocab);
  if (p.logprobs > 0) {
    std::vector<int32_t> idx(static_cast<size_t>(vocab));
    std::iota(idx.begin(), idx.end(), 0);
    const int k = std::min(p.logprobs, vocab);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    for (int i = 0; i < k; ++i) c.top.emplace_back(idx[static_cast<size_t>(i)], static_cast<float>(logits[idx[static_cast<size_t>(i)]] - lse));
  }
  const int greedy = static_cast<int>(std::max_element(logits, logits + vocab) - logits);
  c.token = greedy;
  if (p.temperature > 0 && p.top_k != 1) {
    std::vector<int32_t> idx(static_cast<size_t>(vocab));
    std::iota(idx.begin(), idx.end(), 0);
    int keep = p.top_k > 0 ? std::min(p.top_k, vocab) : vocab;
    std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    std::vector<double> prob(static_cast<size_t>(keep));
    const float top = logits[idx[0]];
    double sum = 0;
    for (int i = 0; i < keep; ++i) sum += prob[static_cast<size_t>(i)] = std::exp((logits[idx[static_cast<size_t>(i)]] - top) / p.temperature);
    if (p.top_p < 1.0f) {  // the smallest head of the sorted tokens whose mass reaches top_p
      double run = 0;
      int n = 0;
      while (n < keep && run < p.top_p * sum) run += prob[static_cast<size_t>(n++)];
      keep = std::max(n, 1);
      sum = run > 0 ? run : prob[0];
    }
    double u = std::uniform_real_distribution<double>(0.0, sum)(rng), run = 0;
    c.token = idx[static_cast<size_t>(keep - 1)];
    for (int i = 0; i < keep; ++i) {
      run += prob[static_cast<size_t>(i)];
      if (u < run) {
        c.token = idx[static_cast<size_t>(i)];
        break;
      }
    }
  }
  c.logprob = static_cast<float>(logits[c.token] - lse);
  return c;
}

}  // namespace loom::serve::llm

// engine.hpp — the decoder engine every generative front end uses (KServe generate, OpenAI
// completions): continuous batching over a paged KV cache, as vLLM's. One thread runs steps; each
// step admits waiting sequences while blocks and --max-num-seqs allow (their prompts prefilled
// in the same forward pass as the running sequences' next tokens), runs one forward pass over
// all of them (one GEMM per layer), samples every sequence's next token, and lets finished ones
// go at once. When the pool has no block for a running sequence's next token, the newest
// sequence is preempted: its blocks freed, it waits again and is recomputed (its full blocks
// likely still in the prefix cache).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/options.hpp"
#include "core/status.hpp"
#include "kv_blocks.hpp"
#include "loom/rt/nn/decoder.hpp"
#include "sampler.hpp"
#include "tokenizer.hpp"

namespace loom::serve::llm {

using EngineOptions = LlmOptions;

// One event of a sequence: a token (with its text, possibly empty while a stop string may be
// forming), or the end (done, finish_reason "stop" or "length"), or an error.
struct TokenEvent {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
  std::string text;
  bool done = false;
  std::string finish_reason;
  Status error = Status::kOk;
  std::string message;
  int prompt_tokens = 0, completion_tokens = 0;
  int index = 0;  // which of the sequences sharing a Stream (OpenAI's n choices)
};

// The consumer's side of one sequence.
class Stream {
 public:
  // The next event; false when `until` passes first.
  bool next(TokenEvent* e, Clock::time_point until);
  // The client is gone: the engine frees the sequence at its next step.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  void push(TokenEvent e);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> q_;
  std::atomic<bool> cancelled_{false};
};

struct EngineStats {
  int running = 0, waiting = 0, blocks_used = 0, blocks_total = 0, block_tokens = 0;
  uint64_t tokens_held = 0;  // positions the running sequences keep in the cache
  uint64_t prefix_hits = 0, prefix_misses = 0, preemptions = 0, steps = 0, output_tokens = 0, finished = 0;
  // Time to first token and between tokens: histograms over kLatencyBounds (the last count +Inf).
  double ttft_sum_s = 0, itl_sum_s = 0;
  uint64_t ttft_count = 0, itl_count = 0;
  std::vector<uint64_t> ttft_buckets, itl_buckets;
};
extern const std::vector<double> kLatencyBounds;

class Engine {
 public:
  // eos: the end-of-text tokens (none: empty; Llama 3 stops on two). tokenizer may be null
  // (token ids only).
  Engine(rt::Decoder decoder, std::unique_ptr<Tokenizer> tokenizer, std::vector<int32_t> eos, EngineOptions o);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  // Queues a sequence. Throws ServeError: kInput (empty prompt, a token outside the
  // vocabulary, a prompt that leaves no room in the context or needs more blocks than the pool
  // has), kUnavailable (the waiting queue is full). max_tokens is capped by the context.
  // `into`, when given, is the Stream the events go to (tagged with `index`): the n choices of
  // one request share one.
  std::shared_ptr<Stream> submit(std::vector<int32_t> prompt, SamplingParams p, Clock::time_point deadline,
                                 std::shared_ptr<Stream> into = nullptr, int index = 0);
  const Tokenizer* tokenizer() const { return tok_.get(); }
  int context() const { return dec_.config().context; }
  int vocab() const { return dec_.config().vocab; }
  const std::vector<int32_t>& eos() const { return eos_; }
  // The model's sampling defaults, for requests that give none (generation_config.json).
  void set_sampling_defaults(SamplingDefaults d) { defaults_ = d; }
  const EngineOptions& options() const { return o_; }
  EngineStats stats() const;

 private:
  struct Seq;
  void loop();
  void admit();
  bool make_room(size_t i);
  void preempt(size_t i);
  void step();
  void advance(Seq& s, float* logits);
  void finish(size_t i, const std::string& reason, Status error = Status::kOk, const std::string& message = "");
  void emit_text(Seq& s, TokenEvent& e, bool last);

  rt::Decoder dec_;
  std::unique_ptr<Tokenizer> tok_;
  std::vector<int32_t> eos_;
  SamplingDefaults defaults_;
  EngineOptions o_;
  rt::KvCache kv_;
  BlockManager blocks_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Seq>> incoming_, waiting_;
  std::vector<std::unique_ptr<Seq>> running_;
  bool stop_ = false;
  EngineStats st_;
  rt::Tensor logits_;
  std::thread thread_;
};

}  // namespace loom::serve::llm

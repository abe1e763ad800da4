// engine.cpp — the scheduler thread: admission by free blocks, one forward pass per step over
// every running sequence, sampling, stop conditions, preemption, and the events each sequence's
// consumer reads.
#include "engine.hpp"

#include <algorithm>

#include "core/compute_pool.hpp"
#include "loom/rt/error.hpp"

namespace loom::serve::llm {

const std::vector<double> kLatencyBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

bool Stream::next(TokenEvent* e, Clock::time_point until) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_until(lk, until, [&] { return !q_.empty(); })) return false;
  *e = std::move(q_.front());
  q_.pop_front();
  return true;
}

void Stream::push(TokenEvent e) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    q_.push_back(std::move(e));
  }
  cv_.notify_one();
}

struct Engine::Seq {
  std::vector<int32_t> tokens;  // the prompt, then every token generated
  int prompt_len = 0, computed = 0, generated = 0;
  std::vector<int32_t> table;
  SamplingParams p;
  std::mt19937_64 rng;
  Clock::time_point deadline, submitted, last_token;
  std::shared_ptr<Stream> out;
  std::string text;  // the generated text so far (stop strings cut it)
  size_t emitted = 0, max_stop = 0;
  bool done = false;
  int index = 0;
  int pending() const { return static_cast<int>(tokens.size()) - computed; }
};

namespace {

int blocks_for(size_t tokens, int bt) { return static_cast<int>((tokens + static_cast<size_t>(bt) - 1) / static_cast<size_t>(bt)); }

int pool_blocks(const rt::DecoderConfig& c, const EngineOptions& o) {
  if (o.kv_block_tokens < 1 || o.kv_block_tokens > 1024) throw rt::Error("--kv-block-tokens must be from 1 to 1024");
  if (o.max_num_seqs < 1) throw rt::Error("--max-num-seqs must be at least 1");
  const size_t per = rt::KvCache::bytes_per_block(c, o.kv_block_tokens);
  const size_t n = o.kv_cache_bytes / per;
  if (n < 1)
    throw rt::Error("--kv-cache-bytes " + std::to_string(o.kv_cache_bytes) + " holds no block of " + std::to_string(o.kv_block_tokens) +
                    " tokens (" + std::to_string(per) + " bytes for this model)");
  return static_cast<int>(std::min<size_t>(n, 1u << 24));
}

}  // namespace

Engine::Engine(rt::Decoder decoder, std::unique_ptr<Tokenizer> tokenizer, std::vector<int32_t> eos, EngineOptions o)
    : dec_(std::move(decoder)),
      tok_(std::move(tokenizer)),
      eos_(std::move(eos)),
      o_(o),
      kv_(dec_.config(), pool_blocks(dec_.config(), o), o.kv_block_tokens),
      blocks_(kv_.blocks(), o.kv_block_tokens, o.prefix_caching) {
  st_.blocks_total = kv_.blocks();
  st_.ttft_buckets.assign(kLatencyBounds.size() + 1, 0);
  st_.itl_buckets.assign(kLatencyBounds.size() + 1, 0);
  st_.block_tokens = o.kv_block_tokens;
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  auto end = [](Seq& s) {
    TokenEvent e;
    e.done = true;
    e.error = Status::kUnavailable;
    e.message = "the server is shutting down";
    e.index = s.index;
    s.out->push(e);
  };
  for (auto& s : running_) end(*s);
  for (auto& s : waiting_) end(*s);
  for (auto& s : incoming_) end(*s);
}

std::shared_ptr<Stream> Engine::submit(std::vector<int32_t> prompt, SamplingParams p, Clock::time_point deadline,
                                       std::shared_ptr<Stream> into, int index) {
  const int T = context(), V = vocab();
  defaults_.apply(p);
  if (prompt.empty()) throw ServeError(Status::kInput, "the prompt must not be empty");
  for (int32_t t : prompt)
    if (t < 0 || t >= V) throw ServeError(Status::kInput, "token id " + std::to_string(t) + " is outside the vocabulary (0 to " + std::to_string(V - 1) + ")");
  if (static_cast<int>(prompt.size()) >= T)
    throw ServeError(Status::kInput, "the prompt's " + std::to_string(prompt.size()) + " tokens leave no room in the model's context of " +
                                              std::to_string(T) + " tokens");
  if (blocks_for(prompt.size() + 1, o_.kv_block_tokens) > kv_.blocks())
    throw ServeError(Status::kInput, "the prompt's " + std::to_string(prompt.size()) + " tokens need more than the KV cache's " +
                                              std::to_string(kv_.blocks()) + " blocks of " + std::to_string(o_.kv_block_tokens) + " tokens");
  auto s = std::make_unique<Seq>();
  s->prompt_len = static_cast<int>(prompt.size());
  p.max_tokens = std::min(p.max_tokens, T - s->prompt_len);
  s->tokens = std::move(prompt);
  for (const auto& stop : p.stop) s->max_stop = std::max(s->max_stop, stop.size());
  s->rng.seed(p.has_seed ? p.seed : std::random_device{}());
  s->p = std::move(p);
  s->deadline = deadline;
  s->submitted = s->last_token = Clock::now();
  s->out = into ? std::move(into) : std::make_shared<Stream>();
  s->index = index;
  auto out = s->out;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (static_cast<int>(incoming_.size()) + st_.waiting >= o_.max_waiting)
      throw ServeError(Status::kUnavailable, "the server holds " + std::to_string(o_.max_waiting) + " waiting sequences: try again");
    incoming_.push_back(std::move(s));
  }
  cv_.notify_one();
  return out;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  EngineStats s = st_;
  s.waiting += static_cast<int>(incoming_.size());
  return s;
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !incoming_.empty() || !running_.empty() || !waiting_.empty(); });
      if (stop_) return;
      while (!incoming_.empty()) {
        waiting_.push_back(std::move(incoming_.front()));
        incoming_.pop_front();
      }
    }
    try {
      step();
    } catch (const std::exception& e) {  // a fault of the engine, not of one request: every running sequence is told
      while (!running_.empty()) finish(running_.size() - 1, "", Status::kInternal, std::string("the decoder failed: ") + e.what());
    }
  }
}

void Engine::finish(size_t i, const std::string& reason, Status error, const std::string& message) {
  Seq& s = *running_[i];
  TokenEvent e;
  e.done = true;
  e.finish_reason = reason;
  e.error = error;
  e.message = message;
  e.prompt_tokens = s.prompt_len;
  e.completion_tokens = s.generated;
  e.index = s.index;
  if (error == Status::kOk) emit_text(s, e, true);
  s.out->push(std::move(e));
  blocks_.release(s.table);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
}

void Engine::admit() {
  int rows = 0;
  for (const auto& s : running_) rows += s->pending();
  const int bt = o_.kv_block_tokens;
  while (!waiting_.empty() && static_cast<int>(running_.size()) < o_.max_num_seqs) {
    Seq& s = *waiting_.front();
    // At least the last token is computed: its logits choose the next one.
    std::vector<int32_t> table = blocks_.match_prefix(s.tokens, static_cast<int>(s.tokens.size() - 1) / bt);
    const int need = blocks_for(s.tokens.size(), bt) - static_cast<int>(table.size());
    const int rows_new = static_cast<int>(s.tokens.size() - table.size() * static_cast<size_t>(bt));
    if (need > blocks_.available() || (rows > 0 && rows + rows_new > o_.max_batched_tokens)) {
      blocks_.release(table);
      break;
    }
    for (int k = 0; k < need; ++k) table.push_back(blocks_.allocate());
    s.table = std::move(table);
    s.computed = static_cast<int>(s.table.size() - static_cast<size_t>(need)) * bt;
    rows += rows_new;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

void Engine::preempt(size_t i) {
  Seq& s = *running_[i];
  blocks_.release(s.table);  // its full blocks stay in the prefix cache until the pool needs them
  s.computed = 0;
  ++st_.preemptions;
  waiting_.push_front(std::move(running_[i]));
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
}

// Blocks for every token sequence i will have computed after this step; preempts the newest
// sequences while the pool has none. False when sequence i itself was preempted or failed.
bool Engine::make_room(size_t i) {
  Seq& s = *running_[i];
  const size_t need = static_cast<size_t>(blocks_for(s.tokens.size(), o_.kv_block_tokens));
  while (s.table.size() < need) {
    const int b = blocks_.allocate();
    if (b >= 0) {
      s.table.push_back(b);
      continue;
    }
    if (running_.size() == 1) {
      finish(i, "", Status::kUnavailable,
             "the KV cache's " + std::to_string(kv_.blocks()) + " blocks cannot hold this sequence's " + std::to_string(s.tokens.size()) +
                 " tokens (--kv-cache-bytes)");
      return false;
    }
    const size_t newest = running_.size() - 1;
    preempt(newest);
    if (newest == i) return false;
  }
  return true;
}

void Engine::emit_text(Seq& s, TokenEvent& e, bool last) {
  size_t upto = s.text.size();
  if (!last && s.max_stop > 1) upto = upto >= s.max_stop - 1 ? upto - (s.max_stop - 1) : 0;  // a stop string may be forming
  if (upto > s.emitted) {
    e.text = s.text.substr(s.emitted, upto - s.emitted);
    s.emitted = upto;
  }
}

// The sampled token joins s; s.done when it is finished (its last event sent).
void Engine::advance(Seq& s, float* logits) {
  const Choice c = sample(logits, vocab(), s.p, s.rng);
  const auto now = Clock::now();
  {
    std::lock_guard<std::mutex> lk(mu_);
    const bool first = s.generated == 0;
    const double dt = std::chrono::duration<double>(now - (first ? s.submitted : s.last_token)).count();
    (first ? st_.ttft_sum_s : st_.itl_sum_s) += dt;
    ++(first ? st_.ttft_count : st_.itl_count);
    auto& b = first ? st_.ttft_buckets : st_.itl_buckets;
    ++b[static_cast<size_t>(std::lower_bound(kLatencyBounds.begin(), kLatencyBounds.end(), dt) - kLatencyBounds.begin())];
  }
  s.last_token = now;
  s.tokens.push_back(c.token);
  ++s.generated;
  ++st_.output_tokens;
  TokenEvent e;
  e.token = c.token;
  e.logprob = c.logprob;
  e.top = c.top;
  const bool stop_token = (!s.p.ignore_eos && std::find(eos_.begin(), eos_.end(), c.token) != eos_.end()) ||
                          std::find(s.p.stop_token_ids.begin(), s.p.stop_token_ids.end(), c.token) != s.p.stop_token_ids.end();
  if (stop_token) {
    e.done = true;
    e.finish_reason = "stop";
  } else {
    if (tok_) s.text += tok_->decode(c.token);
    // A stop string ends in the new text and starts after what was sent (emit_text holds back
    // max_stop - 1 bytes); the earliest one cuts the text.
    size_t cut = std::string::npos;
    for (const auto& stop : s.p.stop)
      if (!stop.empty()) cut = std::min(cut, s.text.find(stop, s.emitted));
    if (cut != std::string::npos) {
      s.text.resize(cut);
      e.done = true;
      e.finish_reason = "stop";
    }
  }
  if (!e.done && (s.generated >= s.p.max_tokens || static_cast<int>(s.tokens.size()) >= context())) {
    e.done = true;
    e.finish_reason = "length";
  }
  s.done = e.done;
  if (e.done) {
    e.prompt_tokens = s.prompt_len;
    e.completion_tokens = s.generated;
  }
  e.index = s.index;
  emit_text(s, e, e.done);
  s.out->push(std::move(e));
}

void Engine::step() {
  const auto now = Clock::now();
  for (size_t i = running_.size(); i-- > 0;) {
    Seq& s = *running_[i];
    if (s.out->cancelled()) finish(i, "abort");
    else if (now > s.deadline)
      finish(i, "", Status::kTimeout, "generation timed out after " + std::to_string(s.generated) + " tokens");
  }
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Seq& s = **it;
    const bool late = now > s.deadline;
    if (!late && !s.out->cancelled()) {
      ++it;
      continue;
    }
    TokenEvent e;
    e.done = true;
    e.finish_reason = late ? "" : "abort";
    e.error = late ? Status::kTimeout : Status::kOk;
    e.message = "generation timed out after " + std::to_string(s.generated) + " tokens (waiting for a slot)";
    e.index = s.index;
    s.out->push(std::move(e));
    it = waiting_.erase(it);
  }
  admit();
  for (size_t i = 0; i < running_.size();) i += make_room(i) ? 1 : 0;
  if (!running_.empty()) {
    rt::DecodeBatch b;
    for (size_t k = 0; k < running_.size(); ++k) {
      Seq& s = *running_[k];
      b.tables.push_back(&s.table);
      for (int p = s.computed; p < static_cast<int>(s.tokens.size()); ++p) {
        b.tokens.push_back(s.tokens[static_cast<size_t>(p)]);
        b.positions.push_back(p);
        b.seq.push_back(static_cast<int32_t>(k));
      }
      b.logit_rows.push_back(static_cast<int32_t>(b.tokens.size() - 1));
    }
    ComputePool::shared().run([&] { dec_.forward(kv_, b, logits_); }, o_.threads);
    ++st_.steps;
    const int V = vocab();
    for (size_t k = 0; k < running_.size(); ++k) {
      Seq& s = *running_[k];
      const int from = s.computed / o_.kv_block_tokens;
      s.computed = static_cast<int>(s.tokens.size());
      blocks_.seal(s.tokens, s.table, from);
      advance(s, logits_.f32() + static_cast<int64_t>(k) * V);
    }
    for (size_t i = running_.size(); i-- > 0;) {
      Seq& s = *running_[i];
      if (s.done) {
        blocks_.release(s.table);
        ++st_.finished;
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  st_.running = static_cast<int>(running_.size());
  st_.waiting = static_cast<int>(waiting_.size());
  st_.blocks_used = blocks_.used();
  st_.prefix_hits = blocks_.hits();
  st_.prefix_misses = blocks_.misses();
  uint64_t held = 0;
  for (const auto& s : running_) held += static_cast<uint64_t>(s->computed);
  st_.tokens_held = held;
}

}  // namespace loom::serve::llm

// options.hpp — the serving options every model version gets (batching, queue, timeouts,
// threads, device), set once from loom-serve's command line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace loom::serve {

// The decoder engine of a generative model (serve/llm/engine.hpp): --max-num-seqs,
// --kv-cache-bytes, --kv-block-tokens, --no-prefix-caching.
struct LlmOptions {
  int max_num_seqs = 64;                  // running sequences (1: one at a time)
  size_t kv_cache_bytes = size_t{512} << 20;
  int kv_block_tokens = 16;
  bool prefix_caching = true;
  int max_waiting = 1024;                 // queued beyond that: 503
  int max_batched_tokens = 2048;          // rows of one forward pass (a longer prompt runs alone)
  int threads = 1;                        // BLAS/OpenMP threads of its forward passes (--threads)
  std::string tool_call_parser;           // hermes | llama3_json | mistral; empty: from each model's folder
};

struct Options {
  int max_batch_size = 32;
  int64_t max_queue_delay_us = 0;  // Triton's default: no wait; batches form from what queued meanwhile
  int max_queue_size = 256;      // requests waiting per model version; beyond: 503 at once
  int64_t request_timeout_ms = 30000;
  int threads = 1;               // BLAS threads of each model's forward pass
  std::string device = "auto";   // auto (CUDA when built and a GPU is usable) | cpu | cuda
  bool allow_symlinks = false;   // serve model files that resolve outside the repository
  bool exit_on_error = false;    // a model that fails to load at start fails the start (Triton's flag)
  int64_t max_run_memory_mb = 1024;  // an ONNX graph's tensors alive at once in one run; past it: 400
  // A model's own, from its config.pbtxt: batch sizes worth stopping the wait for (dynamic_batching's
  // preferred_batch_size) and copies of the model running at once (instance_group's count).
  std::vector<int> preferred_batch_sizes;
  int instances = 1;
  LlmOptions llm;
};

}  // namespace loom::serve

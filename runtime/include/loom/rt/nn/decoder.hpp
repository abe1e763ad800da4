// decoder.hpp — a GPT decoder for inference over a paged KV cache: the weights of Loom's `gpt`
// or of a GPT-2 checkpoint (config.json + model.safetensors, Hugging Face's layout), and one
// forward pass over any mix of rows — a prompt's tokens being prefilled beside other sequences'
// single decode tokens —, each row writing its key and value into its sequence's blocks and
// attending to every earlier position through the sequence's block table (vLLM's PagedAttention
// on the CPU). One GEMM per layer for all rows of all sequences.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/rt/nn/gpt.hpp"
#include "loom/rt/tensor/int8.hpp"
#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt {

struct DecoderConfig {
  int vocab = 0, context = 0, layers = 0, heads = 0, embd = 0;
  float ln_eps = 1e-5f;
  bool gelu_tanh = false;  // GPT-2's gelu_new; Loom's gpt uses the erf GELU
  int head_size = 0;       // a pruned gpt's; 0: embd / heads
  int hs() const { return head_size ? head_size : embd / heads; }
  int attn() const { return heads * hs(); }  // q, k and v's width: what the KV cache holds per token
};

// An INT8 model's linear layer: int8 weights, each input row quantized as it comes (int8.hpp).
using Int8Linear = std::shared_ptr<const int8::DynamicLinear>;

struct DecoderLayer {  // linear weights [out, in] (torch.nn.Linear's layout)
  Tensor ln1_g, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_g, ln2_b, w_fc, b_fc, w_p, b_p;
  Int8Linear q_qkv, q_o, q_fc, q_p;  // when set, the layer's GEMM runs in int8 and its float weight is empty
};

struct DecoderWeights {
  DecoderConfig c;
  Tensor wte, wpe;  // [vocab, C], [context, C]
  std::vector<DecoderLayer> layers;
  Tensor lnf_g, lnf_b, lm_head;  // lm_head [vocab, C]: GPT-2's is wte (tied)
  Int8Linear q_lm_head;
};

// The weights of a trained Loom gpt (shared with it, not copied).
DecoderWeights decoder_from_gpt(Gpt& gpt);

// Keys and values of every layer in blocks of block_tokens positions: [blocks, block_tokens, attn]
// per layer for K and for V.
class KvCache {
 public:
  KvCache(const DecoderConfig& c, int blocks, int block_tokens);
  static size_t bytes_per_block(const DecoderConfig& c, int block_tokens) {
    return 2ull * static_cast<size_t>(c.layers) * static_cast<size_t>(block_tokens) * static_cast<size_t>(c.attn()) * sizeof(float);
  }
  int blocks() const { return blocks_; }
  int block_tokens() const { return bt_; }
  float* k(int layer, int block, int slot) { return at(k_, layer, block, slot); }
  float* v(int layer, int block, int slot) { return at(v_, layer, block, slot); }

 private:
  float* at(std::unique_ptr<float[]>& kv, int layer, int block, int slot) {
    return kv.get() + ((static_cast<size_t>(layer) * static_cast<size_t>(blocks_) + static_cast<size_t>(block)) * static_cast<size_t>(bt_) +
                        static_cast<size_t>(slot)) * static_cast<size_t>(c_);
  }
  int blocks_, bt_, c_;
  std::unique_ptr<float[]> k_, v_;  // not cleared: the OS commits a page when a block first holds a token
};

// One forward pass: row i is token tokens[i] at position positions[i] of sequence seq[i], whose
// blocks are tables[seq[i]] (position p in block table[p / block_tokens], slot p % block_tokens).
// A sequence's rows come in position order, and every position before a row's is either in the
// cache already or an earlier row of this batch. logits gets [logit_rows.size(), vocab].
struct DecodeBatch {
  std::vector<int32_t> tokens, positions, seq, logit_rows;
  std::vector<const std::vector<int32_t>*> tables;
};

class Decoder {
 public:
  explicit Decoder(DecoderWeights w) : w_(std::move(w)) {}
  const DecoderConfig& config() const { return w_.c; }
  const DecoderWeights& weights() const { return w_; }
  void forward(KvCache& kv, const DecodeBatch& b, Tensor& logits);

 private:
  void attention(KvCache& kv, const DecodeBatch& b, int layer);
  // y = x w^T (+ bias): in int8 when q is set, else in float.
  static void linear(const Tensor& x, const Tensor& w, const Int8Linear& q, const Tensor* bias, Tensor& y);
  DecoderWeights w_;
  Tensor x_, ln_, qkv_, att_, proj_, fc_, fc_act_, last_, mean_, rstd_;
};

}  // namespace loom::rt

// decoder.hpp — the decoder every served language model shares, for inference over a paged KV
// cache: Loom's `gpt`, GPT-2 and the Llama family (Llama, Mistral, Qwen2, Qwen3) as Hugging Face
// folders hold them (io/hf_decoder.hpp), as configurations of one layer — LayerNorm or RMSNorm,
// learned positions or RoPE, multi-head, grouped-query or multi-query attention, GELU or SwiGLU —,
// and one forward pass over any mix of rows — a prompt's tokens being prefilled beside other sequences'
// single decode tokens —, each row writing its key and value into its sequence's blocks and
// attending to every earlier position through the sequence's block table (vLLM's PagedAttention
// on the CPU). One GEMM per layer for all rows of all sequences.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/rt/nn/gpt.hpp"
#include "loom/rt/tensor/half_linear.hpp"
#include "loom/rt/tensor/int8.hpp"
#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt {

// Rotary position embedding (Su et al.), as Hugging Face's rotate_half: within the first `dim`
// values of a head, value i and value i + dim/2 turn by position * inv_freq[i].
struct RopeConfig {
  int dim = 0;                  // 0: no RoPE (learned positions, wpe)
  std::vector<float> inv_freq;  // dim / 2 frequencies, scaling (linear, llama3, yarn) applied
  float attention_factor = 1;   // yarn's scale of cos and sin
  // "dynamic" NTK scaling: past `original` positions the base grows with the sequence's length.
  float dynamic_factor = 0, theta = 10000;
  int original = 0;
};

struct DecoderConfig {
  int vocab = 0, context = 0, layers = 0, heads = 0, embd = 0;
  float ln_eps = 1e-5f;
  bool gelu_tanh = false;  // GPT-2's gelu_new; Loom's gpt uses the erf GELU
  int head_size = 0;       // a pruned gpt's, or config.json's head_dim; 0: embd / heads
  int kv_heads = 0;        // grouped-query attention's key/value heads; 0: heads
  bool rms_norm = false;   // RMSNorm (no bias, no mean) instead of LayerNorm
  bool swiglu = false;     // MLP down(silu(gate x) * up x) instead of GELU
  bool qk_norm = false;    // Qwen3: RMSNorm over each head of q and k before RoPE
  int sliding_window = 0;  // Mistral: a position attends to the last W positions; 0: all
  RopeConfig rope;
  int hs() const { return head_size ? head_size : embd / heads; }
  int kvh() const { return kv_heads ? kv_heads : heads; }
  int attn() const { return heads * hs(); }  // q's width: the attention's output
  int kv() const { return kvh() * hs(); }    // k's and v's width: what the KV cache holds per token
};

// An INT8 model's linear layer: int8 weights, each input row quantized as it comes (int8.hpp).
using Int8Linear = std::shared_ptr<const int8::DynamicLinear>;
// A 16-bit checkpoint's linear layer, kept 16-bit (half_linear.hpp).
using Linear16 = std::shared_ptr<const HalfLinear>;

// Linear weights [out, in] (torch.nn.Linear's layout). w_qkv stacks q, k and v's rows; with
// SwiGLU, w_fc stacks gate's rows and then up's. A bias or norm a model lacks is an empty tensor.
struct DecoderLayer {
  Tensor ln1_g, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_g, ln2_b, w_fc, b_fc, w_p, b_p;
  Tensor q_norm, k_norm;  // [head size], Qwen3's
  Int8Linear q_qkv, q_o, q_fc, q_p;  // when set, the layer's GEMM runs in int8 and its float weight is empty
  Linear16 h_qkv, h_o, h_fc, h_p;    // when set, the weights stay 16-bit and the float weight is empty
};

struct DecoderWeights {
  DecoderConfig c;
  Tensor wte, wpe;  // [vocab, C], [context, C] (none with RoPE)
  std::vector<DecoderLayer> layers;
  Tensor lnf_g, lnf_b, lm_head;  // lm_head [vocab, C]: GPT-2's is wte (tied)
  Int8Linear q_lm_head;
  Linear16 h_wte, h_lm_head;  // a 16-bit checkpoint's embedding and head (one object when tied)
};

// The weights of a trained Loom gpt (shared with it, not copied).
DecoderWeights decoder_from_gpt(Gpt& gpt);

// Keys and values of every layer in blocks of block_tokens positions: [blocks, block_tokens, kv]
// per layer for K and for V (kv: the key/value heads' width, smaller than q's under GQA).
class KvCache {
 public:
  KvCache(const DecoderConfig& c, int blocks, int block_tokens);
  static size_t bytes_per_block(const DecoderConfig& c, int block_tokens) {
    return 2ull * static_cast<size_t>(c.layers) * static_cast<size_t>(block_tokens) * static_cast<size_t>(c.kv()) * sizeof(float);
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
  void norm(const Tensor& x, const Tensor& g, const Tensor& b, Tensor& y);
  void position_in(const DecodeBatch& b, int layer);  // RoPE and Qwen3's q/k norms on qkv_
  void mlp(const DecoderLayer& L, int64_t rows);
  // y = x w^T (+ bias): in int8 when q is set, else in float.
  static void linear(const Tensor& x, const Tensor& w, const Int8Linear& q, const Linear16& h, const Tensor* bias, Tensor& y);
  DecoderWeights w_;
  Tensor x_, ln_, qkv_, att_, proj_, fc_, fc_act_, last_, mean_, rstd_;
};

}  // namespace loom::rt

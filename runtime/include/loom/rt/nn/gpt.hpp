// gpt.hpp — the `gpt` model: a small decoder-only transformer for character-level language
// modelling. Explicit forward and backward for every layer (Embedding, LayerNorm, causal
// self-attention, GELU MLP, Dropout); parameter names and layouts as the PyTorch module in
// tests/parity/gpt_parity.py (wte, wpe, h.N.ln_1, h.N.attn.c_attn, ..., ln_f, lm_head).
#pragma once

#include "loom/choice.hpp"

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "loom/rt/nn/mlp.hpp"
#include "loom/rt/nn/param_gate.hpp"

namespace loom::rt {

// Attention's algorithm (gpt_kernels.hpp): full keeps each head's T x T softmax for the
// backward; flash keeps one log-sum-exp per row and recomputes the softmax tile by tile in the
// backward, so activation memory grows with T, not T^2. auto: on the CPU flash from kFlashContext
// tokens on; on CUDA from kFlashContextCuda (for heads of at most gpt_cuda's 128 values): there
// full attention's GEMMs run on tensor cores and flash's kernels on fp32 cores, and full was
// 1.56x faster at context 1024 on an H200 (doc/gpu.md); from 2048 on, the scores of a 12-layer
// model at batch 8 would take ~19 GB.
enum class Attention { kAuto, kFull, kFlash };
Attention parse_attention(const std::string& name);  // auto | full | flash; UsageError otherwise
constexpr int kFlashContext = 256;
constexpr int kFlashContextCuda = 2048;

// A teacher's logits for distillation (host, [B*T, vocab], the rows of forward's tokens): the loss
// becomes alpha T^2 KL(softmax(teacher/T) || softmax(student/T)) + (1 - alpha) CE (cpu::distill_xent).
struct SoftTargets {
  const float* logits = nullptr;
  float temperature = 1.0f, alpha = 0.5f;
};

struct GptConfig {
  int vocab = 0, context = 64, layers = 2, heads = 4, embd = 64;
  float dropout = 0.0f;
  // A pruned model's (loom-compress prune): each head's width, 0 for embd / heads; the MLP's
  // width, 0 for 4 embd (Hugging Face's n_inner).
  int head_size = 0, inner = 0;
  int hs() const { return head_size ? head_size : embd / heads; }
  int attn() const { return heads * hs(); }  // the width of q, k, v and the attention's output
  int ff() const { return inner ? inner : 4 * embd; }
  std::string json() const;
};

class Gpt {
 public:
  // `grads` false: the gradients are not allocated (a gate gives them, --zero 3).
  Gpt(GptConfig c, uint64_t seed, bool grads = true);
  const GptConfig& config() const { return c_; }
  // tokens [B*T] (row-major B sequences of T = context tokens) -> mean cross-entropy against
  // targets; keeps what backward needs. `train` enables dropout. Backward's gradients are those of
  // the summed loss over grad_batch sequences (0: batch; a rank's share passes the global batch).
  // `soft`: a teacher's soft targets mixed into the loss (on the CPU).
  double forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, int batch, bool train,
                 int grad_batch = 0, const SoftTargets* soft = nullptr);
  // Gradients of the last forward's loss, overwriting every parameter's grad; `ready(i)`, when
  // set, is told as soon as params()[i].grad is final (the head's first, the embeddings' last),
  // so that the gradient exchange overlaps with the rest of backward.
  void backward(const std::function<void(size_t)>& ready = {});
  const Tensor& logits() const { return logits_; }  // [B*T, vocab], on the model's device
  // Moves the parameters (and their gradients) to a device; every layer then runs there
  // (gpt_kernels.hpp). Throws Error in a build without CUDA.
  void to(Device device);
  Device device() const { return device_; }
  std::vector<Param>& params() { return params_; }
  double train_flops(int batch) const;
  // Activation recomputation: forward keeps only each block's input (and its dropout generator's
  // state); backward runs the block's forward again before its backward. The same operations in
  // the same order: gradients equal bit for bit, for about one more forward per step.
  void set_recompute(bool on) { recompute_ = on; }
  void set_attention(Attention a) { attention_ = a; }
  bool flash() const;  // whether attention runs the flash path (set_attention, the context, the device)
  // Fully sharded training (param_gate.hpp): the groups are the embeddings, each block, and the
  // final LayerNorm with the head; forward and backward tell the gate before and after each.
  std::vector<ParamGroup> param_groups() const;
  void set_gate(ParamGate* gate) { gate_ = gate; }

 private:
  struct LayerActs {
    Tensor x_in, ln1, ln1_mean, ln1_rstd, qkv, att, y, x_mid, ln2, ln2_mean, ln2_rstd, fc, gelu, drop1, drop2;  // fc: GELU'(fc) after forward
    std::mt19937_64 rng;  // --recompute: the dropout generator as the block's forward found it
    bool train = false;
  };
  // One block's forward from a.x_in: every activation into a; returns the block's output.
  Tensor block_forward(int l, LayerActs& a, bool train, std::mt19937_64& rng);
  Tensor& p(size_t i) { return params_[i].value; }
  Tensor& g(size_t i) { return params_[i].grad; }
  static Tensor ids_tensor(const std::vector<int32_t>& ids);  // a host int32 tensor
  Tensor embed(int64_t n);                  // x = wte[tokens_] + wpe[position]
  void embed_backward(const Tensor& dx);    // dwte, dwpe from dx
  size_t layer_param(int layer, int k) const { return 2 + static_cast<size_t>(layer) * 12 + static_cast<size_t>(k); }

  GptConfig c_;
  std::vector<Param> params_;
  std::mt19937_64 rng_;

 public:
  // The dropout generator's state as text (checkpoints), and back; throws Error on bad text.
  std::string rng_state() const;
  void set_rng_state(const std::string& text);

 private:
  int batch_ = 0;
  bool recompute_ = false;
  Attention attention_ = Attention::kAuto;
  ParamGate* gate_ = nullptr;
  std::vector<int32_t> tokens_, targets_;
  std::vector<LayerActs> acts_;
  Device device_ = Device::kCpu;
  Tensor x_final_, lnf_, lnf_mean_, lnf_rstd_, logits_, dlogits_;
  Tensor tokens_dev_, targets_dev_;  // on the GPU: this step's tokens and targets
};

}  // namespace loom::rt

LOOM_CHOICE(loom::rt::Attention, "--attention", "auto", "full", "flash");


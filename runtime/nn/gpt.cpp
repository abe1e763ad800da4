// gpt.cpp — forward and backward of the character-level GPT. Shapes (N = B*T rows):
//   x = wte[tok] + wpe[t]                                     [N, C]
//   per block: a = LN1(x); qkv = a Wqkv^T + b                 [N, 3C]
//              att = softmax(q k^T / sqrt(hs), causal)         [B, H, T, T] (flash: [B, H, T], gpt.hpp)
//              x += (att v) Wo^T + b
//              x += GELU(LN2(x) Wfc^T + b) Wp^T + b            (hidden 4C)
//   logits = LN_f(x) Wlm^T                                     [N, V]
#include "loom/rt/nn/gpt.hpp"

#include <cmath>
#include <cstring>
#include <sstream>

#include "gpt_cuda.hpp"
#include "gpt_kernels.hpp"
#include "loom/json_text.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/ops.hpp"

namespace loom::rt {

using namespace gptk;

std::string GptConfig::json() const {
  // The dropout as written (0.1, not float's 0.10000000149).
  nlohmann::ordered_json j = {{"type", "gpt"}, {"vocab", vocab}, {"context", context}, {"layers", layers},
                              {"heads", heads}, {"embd", embd}, {"dropout", std::stod(std::to_string(dropout))}};
  if (head_size) j["head_size"] = head_size;
  if (inner) j["inner"] = inner;
  return json_text(j);
}

Attention parse_attention(const std::string& name) { return parse_choice<Attention>(name); }

bool Gpt::flash() const {
  if (attention_ != Attention::kAuto) return attention_ == Attention::kFlash;
  if (device_ == Device::kCpu) return c_.context >= kFlashContext;
  return c_.context >= kFlashContextCuda && c_.hs() <= gpt_cuda::kFlashMaxHeadSize;
}

Gpt::Gpt(GptConfig c, uint64_t seed, bool grads) : c_(c), rng_(seed ^ 0xD1B54A32D192ED03ull) {
  if (c_.vocab <= 0 || c_.context <= 0 || c_.layers <= 0 || c_.heads <= 0 || c_.embd <= 0)
    throw Error("gpt: vocab, context, layers, heads and embd must be positive");
  if (c_.head_size < 0 || c_.inner < 0) throw Error("gpt: head_size and inner must not be negative");
  if (!c_.head_size && c_.embd % c_.heads != 0)
    throw Error("gpt: embd " + std::to_string(c_.embd) + " is not a multiple of heads " + std::to_string(c_.heads));
  if (!(c_.dropout >= 0.0f && c_.dropout < 1.0f)) throw Error("gpt: dropout must be in [0, 1)");
  std::mt19937_64 init(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const int C = c_.embd, A = c_.attn(), F = c_.ff();
  auto add = [&](const std::string& name, std::vector<int64_t> shape, int kind) {  // 0 normal, 1 ones, 2 zeros
    Param p{name, Tensor::empty(shape), grads ? Tensor::zeros(shape) : Tensor()};
    for (int64_t i = 0; i < p.value.numel(); ++i) p.value.f32()[i] = kind == 0 ? normal(init) : kind == 1 ? 1.0f : 0.0f;
    params_.push_back(std::move(p));
  };
  add("wte.weight", {c_.vocab, C}, 0);
  add("wpe.weight", {c_.context, C}, 0);
  for (int l = 0; l < c_.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C}, 1);
    add(h + "ln_1.bias", {C}, 2);
    add(h + "attn.c_attn.weight", {3 * A, C}, 0);
    add(h + "attn.c_attn.bias", {3 * A}, 2);
    add(h + "attn.c_proj.weight", {C, A}, 0);
    add(h + "attn.c_proj.bias", {C}, 2);
    add(h + "ln_2.weight", {C}, 1);
    add(h + "ln_2.bias", {C}, 2);
    add(h + "mlp.c_fc.weight", {F, C}, 0);
    add(h + "mlp.c_fc.bias", {F}, 2);
    add(h + "mlp.c_proj.weight", {C, F}, 0);
    add(h + "mlp.c_proj.bias", {C}, 2);
  }
  add("ln_f.weight", {C}, 1);
  add("ln_f.bias", {C}, 2);
  add("lm_head.weight", {c_.vocab, C}, 0);
}

std::vector<ParamGroup> Gpt::param_groups() const {
  std::vector<ParamGroup> g{{0, 2}};
  for (int l = 0; l < c_.layers; ++l) g.push_back({layer_param(l, 0), layer_param(l + 1, 0)});
  g.push_back({layer_param(c_.layers, 0), params_.size()});
  return g;
}

double Gpt::train_flops(int batch) const {
  const double n = double(batch) * c_.context, C = c_.embd, A = c_.attn(), F = c_.ff();
  double per_layer = 2 * n * (4 * C * A + 2 * C * F) + 4 * n * c_.context * A;  // linears + attention
  return 3 * (c_.layers * per_layer + 2 * n * C * c_.vocab);
}

Tensor Gpt::block_forward(int l, LayerActs& a, bool train, std::mt19937_64& rng) {
  const int T = c_.context, C = c_.embd;
  const int64_t N = a.x_in.dim(0);
  const Tensor& x = a.x_in;
  layernorm_fwd(x, p(layer_param(l, 0)), p(layer_param(l, 1)), a.ln1, a.ln1_mean, a.ln1_rstd);
  linear_fwd(a.ln1, p(layer_param(l, 2)), &p(layer_param(l, 3)), a.qkv);
  attention_fwd(a.qkv, static_cast<int>(N / T), T, c_.heads, c_.attn(), flash(), a.att, a.y);
  Tensor o;
  linear_fwd(a.y, p(layer_param(l, 4)), &p(layer_param(l, 5)), o);
  dropout_fwd(o, a.drop1, c_.dropout, train, rng);
  a.x_mid = Tensor::empty({N, C}, DType::kF32, device_);
  add(x, o, a.x_mid);
  layernorm_fwd(a.x_mid, p(layer_param(l, 6)), p(layer_param(l, 7)), a.ln2, a.ln2_mean, a.ln2_rstd);
  linear_fwd(a.ln2, p(layer_param(l, 8)), nullptr, a.fc);
  bias_gelu_fwd(a.fc, p(layer_param(l, 9)), a.gelu);  // a.fc becomes GELU' of the pre-activation
  Tensor o2;
  linear_fwd(a.gelu, p(layer_param(l, 10)), &p(layer_param(l, 11)), o2);
  dropout_fwd(o2, a.drop2, c_.dropout, train, rng);
  Tensor out = Tensor::empty({N, C}, DType::kF32, device_);
  add(a.x_mid, o2, out);
  return out;
}

double Gpt::forward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, int batch, bool train,
                    int grad_batch, const SoftTargets* soft) {
  const int T = c_.context, V = c_.vocab;
  const int64_t N = int64_t{batch} * T;
  if (static_cast<int64_t>(tokens.size()) != N || static_cast<int64_t>(targets.size()) != N)
    throw Error("gpt: expected " + std::to_string(N) + " tokens and targets");
  batch_ = batch;
  tokens_ = tokens;
  targets_ = targets;
  acts_.resize(static_cast<size_t>(c_.layers));
  for (int32_t tok : tokens)
    if (tok < 0 || tok >= V) throw Error("gpt: token " + std::to_string(tok) + " outside the vocabulary");
  const size_t last = static_cast<size_t>(c_.layers) + 1;  // the head's group
  Tensor x;
  {
    GateScope use(gate_, 0, false);
    x = embed(N);
  }
  for (int l = 0; l < c_.layers; ++l) {
    GateScope use(gate_, static_cast<size_t>(l) + 1, false);
    LayerActs& a = acts_[static_cast<size_t>(l)];
    if (recompute_) a = LayerActs{};  // what an earlier step kept goes
    a.x_in = x;
    a.rng = rng_;
    a.train = train;
    x = block_forward(l, a, train, rng_);
    if (recompute_) {  // keep the input (and the generator state); backward computes the rest again
      LayerActs kept;
      kept.x_in = a.x_in;
      kept.rng = a.rng;
      kept.train = train;
      a = std::move(kept);
    }
  }
  x_final_ = x;
  const size_t f = 2 + static_cast<size_t>(c_.layers) * 12;
  GateScope use(gate_, last, false);
  layernorm_fwd(x, p(f), p(f + 1), lnf_, lnf_mean_, lnf_rstd_);
  linear_fwd(lnf_, p(f + 2), nullptr, logits_);
  ensure(dlogits_, {N, V}, device_);
  const int32_t* labels = targets.data();
  if (soft) {
    if (device_ != Device::kCpu) throw Error("gpt: distillation runs on the CPU in this build");
    return cpu::distill_xent(logits_.f32(), soft->logits, labels, dlogits_.f32(), static_cast<int>(N), V, soft->temperature,
                             soft->alpha, int64_t{grad_batch} * T);
  }
  if (device_ != Device::kCpu) labels = (targets_dev_ = ids_tensor(targets).to(device_)).data<int32_t>();
  return ops::softmax_xent(device_, logits_.f32(), labels, dlogits_.f32(), static_cast<int>(N), V, int64_t{grad_batch} * T);
}

Tensor Gpt::ids_tensor(const std::vector<int32_t>& ids) {
  Tensor t = Tensor::empty({static_cast<int64_t>(ids.size())}, DType::kI32);
  std::copy(ids.begin(), ids.end(), t.data<int32_t>());
  return t;
}

Tensor Gpt::embed(int64_t n) {
  const int T = c_.context, C = c_.embd;
  Tensor x = Tensor::empty({n, C}, DType::kF32, device_);
#ifdef LOOM_HAVE_CUDA  // (without CUDA, to() keeps the model on the CPU)
  if (device_ != Device::kCpu) {
    tokens_dev_ = ids_tensor(tokens_).to(device_);
    gpt_cuda::embed_fwd(tokens_dev_.data<int32_t>(), p(0).f32(), p(1).f32(), x.f32(), n, T, C);
    return x;
  }
#endif
  for (int64_t r = 0; r < n; ++r) {
    const float* e = p(0).f32() + int64_t{tokens_[static_cast<size_t>(r)]} * C;
    const float* pe = p(1).f32() + (r % T) * C;
    for (int k = 0; k < C; ++k) x.f32()[r * C + k] = e[k] + pe[k];
  }
  return x;
}

void Gpt::embed_backward(const Tensor& dx) {
  const int T = c_.context, C = c_.embd;
  const int64_t n = dx.dim(0);
#ifdef LOOM_HAVE_CUDA
  if (device_ != Device::kCpu) {
    gpt_cuda::embed_bwd(tokens_dev_.data<int32_t>(), dx.f32(), g(0).f32(), g(1).f32(), n, T, C, c_.vocab);
    return;
  }
#endif
  g(0).fill(0.0f);
  g(1).fill(0.0f);
  for (int64_t r = 0; r < n; ++r) {
    float* dwte = g(0).f32() + int64_t{tokens_[static_cast<size_t>(r)]} * C;
    float* dwpe = g(1).f32() + (r % T) * C;
    const float* d = dx.f32() + r * C;
    for (int k = 0; k < C; ++k) {
      dwte[k] += d[k];
      dwpe[k] += d[k];
    }
  }
}

void Gpt::to(Device device) {
  if (device == device_) return;
  if (device != Device::kCpu && !ops::cuda_built()) throw Error("this build of Loom has no CUDA support");
  for (auto& prm : params_) {
    prm.value = prm.value.to(device);
    if (prm.grad.defined()) prm.grad = prm.grad.to(device);
  }
  acts_.clear();
  x_final_ = lnf_ = lnf_mean_ = lnf_rstd_ = logits_ = dlogits_ = tokens_dev_ = targets_dev_ = Tensor();
  device_ = device;
}

void Gpt::backward(const std::function<void(size_t)>& ready) {
  const int T = c_.context, C = c_.embd;
  const int64_t N = int64_t{batch_} * T;
  const size_t f = 2 + static_cast<size_t>(c_.layers) * 12;
  auto final = [&](size_t i, size_t j) {  // parameters i and j have their gradients
    if (!ready) return;
    ready(i);
    ready(j);
  };
  auto final_layer = [&](int l, int k) { final(layer_param(l, k), layer_param(l, k + 1)); };
  Tensor dx = Tensor::zeros({N, C}, DType::kF32, device_);
  {
    GateScope use(gate_, static_cast<size_t>(c_.layers) + 1, true);
    Tensor dlnf;
    linear_bwd(dlogits_, lnf_, p(f + 2), g(f + 2), nullptr, &dlnf);
    if (ready) ready(f + 2);
    layernorm_bwd(dlnf, x_final_, lnf_mean_, lnf_rstd_, p(f), dx, g(f), g(f + 1));
    final(f, f + 1);
  }
  for (int l = c_.layers - 1; l >= 0; --l) {
    GateScope use(gate_, static_cast<size_t>(l) + 1, true);
    LayerActs& a = acts_[static_cast<size_t>(l)];
    if (recompute_) {  // the block's forward again, with the dropout masks it drew the first time
      std::mt19937_64 rng = a.rng;
      block_forward(l, a, a.train, rng);
    }
    // MLP branch: x_out = x_mid + drop(proj(gelu(fc(ln2(x_mid)))))
    Tensor d2 = dx.clone();
    dropout_bwd(d2, a.drop2);
    Tensor dgelu;
    linear_bwd(d2, a.gelu, p(layer_param(l, 10)), g(layer_param(l, 10)), &g(layer_param(l, 11)), &dgelu);
    final_layer(l, 10);
    mul(dgelu, a.fc);  // GELU'(fc), kept by bias_gelu_fwd
    Tensor dln2;
    linear_bwd(dgelu, a.ln2, p(layer_param(l, 8)), g(layer_param(l, 8)), &g(layer_param(l, 9)), &dln2);
    final_layer(l, 8);
    layernorm_bwd(dln2, a.x_mid, a.ln2_mean, a.ln2_rstd, p(layer_param(l, 6)), dx, g(layer_param(l, 6)),
                  g(layer_param(l, 7)));
    final_layer(l, 6);
    // Attention branch: x_mid = x_in + drop(proj(attn(qkv(ln1(x_in)))))
    Tensor d1 = dx.clone();
    dropout_bwd(d1, a.drop1);
    Tensor dy, dqkv, dln1;
    linear_bwd(d1, a.y, p(layer_param(l, 4)), g(layer_param(l, 4)), &g(layer_param(l, 5)), &dy);
    final_layer(l, 4);
    attention_bwd(dy, a.qkv, a.att, a.y, batch_, T, c_.heads, c_.attn(), flash(), dqkv);
    linear_bwd(dqkv, a.ln1, p(layer_param(l, 2)), g(layer_param(l, 2)), &g(layer_param(l, 3)), &dln1);
    final_layer(l, 2);
    layernorm_bwd(dln1, a.x_in, a.ln1_mean, a.ln1_rstd, p(layer_param(l, 0)), dx, g(layer_param(l, 0)),
                  g(layer_param(l, 1)));
    final_layer(l, 0);
    if (recompute_) a = LayerActs{};  // this block's activations are done with
  }
  GateScope use(gate_, 0, true);
  embed_backward(dx);
  final(0, 1);
}

std::string Gpt::rng_state() const {
  std::ostringstream os;
  os << rng_;
  return os.str();
}

void Gpt::set_rng_state(const std::string& text) {
  std::istringstream is(text);
  std::mt19937_64 r;
  is >> r;
  if (is.fail()) throw Error("the dropout random-number state is not valid");
  rng_ = r;
}

}  // namespace loom::rt

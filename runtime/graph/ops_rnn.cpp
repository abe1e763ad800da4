// ops_rnn.cpp — the recurrent operators RNN, GRU and LSTM (forward, reverse, bidirectional;
// sequence lengths; initial states; peepholes; layout 0 [seq, batch, ...] or 1 [batch, seq, ...];
// clip; linear_before_reset; the activations ONNX names), float32. The input's projection is one
// GEMM per direction; each step one GEMM of the hidden state, then the gates element-wise.
#include <algorithm>
#include <cmath>
#include <functional>

#include "loom/rt/tensor/kernels.hpp"
#include "ops.hpp"

namespace loom::rt::graph {
namespace {

using Act = std::function<float(float)>;

Act activation(const Node& n, const std::string& name, float alpha, float beta) {
  if (name == "Sigmoid") return [](float v) { return 1.0f / (1.0f + std::exp(-v)); };
  if (name == "Tanh") return [](float v) { return std::tanh(v); };
  if (name == "Relu") return [](float v) { return v > 0 ? v : 0.0f; };
  if (name == "LeakyRelu") return [alpha](float v) { return v < 0 ? alpha * v : v; };
  if (name == "HardSigmoid") return [alpha, beta](float v) { return std::max(0.0f, std::min(1.0f, alpha * v + beta)); };
  if (name == "Affine") return [alpha, beta](float v) { return alpha * v + beta; };
  if (name == "ScaledTanh") return [alpha, beta](float v) { return alpha * std::tanh(beta * v); };
  op_error(n, "activation " + name + " is not supported");
}

struct Cell {
  int gates = 1;  // RNN 1, GRU 3 (z r h), LSTM 4 (i o f c)
  int dirs = 1;
  int64_t hidden = 0;
  size_t per = 1;           // activations per direction
  std::vector<Act> act;     // [direction * per + k]: f, g, h
  float clip = 0;           // 0: none
  bool linear_before_reset = false;
  float clipped(float v) const { return clip > 0 ? std::max(-clip, std::min(clip, v)) : v; }
};

// The cell's activations, from `activations` / `activation_alpha` / `activation_beta` or ONNX's defaults.
void activations_of(const Node& n, Cell* cell) {
  static const std::vector<std::string> rnn = {"Tanh"}, gru = {"Sigmoid", "Tanh"}, lstm = {"Sigmoid", "Tanh", "Tanh"};
  const auto& defaults = cell->gates == 1 ? rnn : cell->gates == 3 ? gru : lstm;
  cell->per = defaults.size();
  auto find = [&](const char* name, Attr::Kind kind) {
    auto it = n.attrs.find(name);
    return it != n.attrs.end() && it->second.kind == kind ? &it->second : nullptr;
  };
  std::vector<std::string> names;
  if (const Attr* a = find("activations", Attr::kStrings)) names = a->strs;
  if (names.empty())
    for (int d = 0; d < cell->dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  if (names.size() != cell->per * static_cast<size_t>(cell->dirs)) op_error(n, "activations must name " + std::to_string(cell->per * cell->dirs) + " functions");
  const Attr *al = find("activation_alpha", Attr::kFloats), *be = find("activation_beta", Attr::kFloats);
  for (size_t k = 0; k < names.size(); ++k) {
    const std::string& f = names[k];
    const float a = al && k < al->floats.size() ? al->floats[k] : f == "LeakyRelu" ? 0.01f : f == "HardSigmoid" ? 0.2f : 1.0f;
    const float b = be && k < be->floats.size() ? be->floats[k] : f == "HardSigmoid" ? 0.5f : f == "ScaledTanh" ? 1.0f : 0.0f;
    cell->act.push_back(activation(n, f, a, b));
  }
}

// Row b's gates after one step, given its input projection p (with W's bias), its recurrence r
// (h R^T) and R's bias rb; h and c updated in place. `R`: the direction's recurrence weights.
void gates(const Cell& cell, const Act* a, const float* p, const float* r, const float* rb, const float* peep, const float* R,
           float* h, float* c, std::vector<float>& tmp) {
  const int64_t H = cell.hidden;
  auto f = [&](int k, float v) { return a[k](cell.clipped(v)); };
  if (cell.gates == 1) {
    for (int64_t j = 0; j < H; ++j) h[j] = f(0, p[j] + r[j] + rb[j]);
  } else if (cell.gates == 3) {  // GRU: tmp = z | r | r . h
    for (int64_t j = 0; j < H; ++j) {
      tmp[static_cast<size_t>(j)] = f(0, p[j] + r[j] + rb[j]);
      tmp[static_cast<size_t>(H + j)] = f(0, p[H + j] + r[H + j] + rb[H + j]);
      tmp[static_cast<size_t>(2 * H + j)] = tmp[static_cast<size_t>(H + j)] * h[j];
    }
    for (int64_t j = 0; j < H; ++j) {
      float hh = 0;
      if (cell.linear_before_reset) {
        hh = f(1, p[2 * H + j] + tmp[static_cast<size_t>(H + j)] * (r[2 * H + j] + rb[2 * H + j]));
      } else {  // (r . h) R_h^T
        float acc = 0;
        for (int64_t k = 0; k < H; ++k) acc += tmp[static_cast<size_t>(2 * H + k)] * R[(2 * H + j) * H + k];
        hh = f(1, p[2 * H + j] + acc + rb[2 * H + j]);
      }
      tmp[static_cast<size_t>(3 * H + j)] = (1 - tmp[static_cast<size_t>(j)]) * hh + tmp[static_cast<size_t>(j)] * h[j];
    }
    std::copy_n(tmp.data() + 3 * H, H, h);
  } else {  // LSTM: i, o, f, c; peepholes i, o, f
    for (int64_t j = 0; j < H; ++j) {
      const float ci = c[j];
      const float ig = f(0, p[j] + r[j] + rb[j] + (peep ? peep[j] * ci : 0));
      const float fg = f(0, p[2 * H + j] + r[2 * H + j] + rb[2 * H + j] + (peep ? peep[2 * H + j] * ci : 0));
      const float cn = fg * ci + ig * f(1, p[3 * H + j] + r[3 * H + j] + rb[3 * H + j]);
      const float og = f(0, p[H + j] + r[H + j] + rb[H + j] + (peep ? peep[H + j] * cn : 0));
      c[j] = cn;
      h[j] = og * a[2](cn);
    }
  }
}

const float* optional_f32(const Node& n, const std::vector<const Tensor*>& in, size_t i, int64_t want) {
  if (i >= in.size() || !in[i] || in[i]->numel() == 0) return nullptr;
  if (in[i]->dtype() != DType::kF32 || in[i]->numel() != want) op_error(n, "input " + std::to_string(i) + " does not have the shape the operator needs");
  return in[i]->f32();
}

struct Run {
  const float *x, *W, *R, *bias, *h0, *c0, *peep;  // x: [T, B, I]
  int64_t T, B, I;
  std::vector<int64_t> lens;
  bool batch_first;
  float *y, *yh, *yc;
};

void direction(const Cell& cell, const Run& run, int d, bool back) {
  const int64_t H = cell.hidden, G = cell.gates * H, T = run.T, B = run.B, I = run.I, D = cell.dirs;
  const float* R = run.R + d * G * H;
  const std::vector<float> zeros(static_cast<size_t>(2 * G), 0.0f);
  const float* wb = run.bias ? run.bias + d * 2 * G : zeros.data();
  const float* rb = run.bias ? run.bias + d * 2 * G + G : zeros.data() + G;
  std::vector<float> pre(static_cast<size_t>(std::max<int64_t>(1, T * B * G))), rec(static_cast<size_t>(B * G)), tmp(static_cast<size_t>(4 * H));
  cpu::gemm(false, true, static_cast<int>(T * B), static_cast<int>(G), static_cast<int>(I), 1.0f, run.x, static_cast<int>(I),
            run.W + d * G * I, static_cast<int>(I), 0.0f, pre.data(), static_cast<int>(G));
  for (int64_t r = 0; r < T * B; ++r)
    for (int64_t j = 0; j < G; ++j) pre[static_cast<size_t>(r * G + j)] += wb[j];
  std::vector<float> h(static_cast<size_t>(B * H), 0.0f), c(static_cast<size_t>(B * H), 0.0f);
  if (run.h0) std::copy_n(run.h0 + d * B * H, B * H, h.data());
  if (run.c0) std::copy_n(run.c0 + d * B * H, B * H, c.data());
  for (int64_t s = 0; s < T; ++s) {
    cpu::gemm(false, true, static_cast<int>(B), static_cast<int>(G), static_cast<int>(H), 1.0f, h.data(), static_cast<int>(H), R,
              static_cast<int>(H), 0.0f, rec.data(), static_cast<int>(G));
    for (int64_t b = 0; b < B; ++b) {
      const int64_t len = run.lens[static_cast<size_t>(b)];
      if (s >= len) continue;  // past this sequence's end: its state stays, its outputs are 0
      const int64_t t = back ? len - 1 - s : s;  // each sequence reversed within its own length
      gates(cell, cell.act.data() + static_cast<size_t>(d) * cell.per, pre.data() + (t * B + b) * G, rec.data() + b * G, rb,
            run.peep ? run.peep + d * 3 * H : nullptr, R, h.data() + b * H, c.data() + b * H, tmp);
      std::copy_n(h.data() + b * H, H, run.y + (run.batch_first ? ((b * T + t) * D + d) * H : ((t * D + d) * B + b) * H));
    }
  }
  for (int64_t b = 0; b < B; ++b) {
    const int64_t at = run.batch_first ? (b * D + d) * H : (d * B + b) * H;
    std::copy_n(h.data() + b * H, H, run.yh + at);
    std::copy_n(c.data() + b * H, H, run.yc + at);
  }
}

}  // namespace

void op_rnn(const Node& n, const std::vector<const Tensor*>& in, std::vector<Tensor>& out) {
  Cell cell;
  cell.gates = n.op == "GRU" ? 3 : n.op == "LSTM" ? 4 : 1;
  const Tensor &x0 = need(n, in, 0), &W = need(n, in, 1), &R = need(n, in, 2);
  if (x0.dtype() != DType::kF32 || W.dtype() != DType::kF32 || R.dtype() != DType::kF32 || x0.ndim() != 3 || W.ndim() != 3 || R.ndim() != 3)
    op_error(n, "X, W and R must be float32 of rank 3");
  if (!x0.numel() || !W.numel() || !R.numel()) op_error(n, "X, W and R must not be empty");
  const std::string dir = attr_s(n, "direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional") op_error(n, "direction " + dir + " is not supported");
  if (attr_i(n, "input_forget", 0)) op_error(n, "input_forget is not supported");
  cell.dirs = dir == "bidirectional" ? 2 : 1;
  Run run{};
  run.batch_first = attr_i(n, "layout", 0) == 1;
  run.T = x0.dim(run.batch_first ? 1 : 0), run.B = x0.dim(run.batch_first ? 0 : 1), run.I = x0.dim(2);
  cell.hidden = R.dim(2);
  const int64_t H = cell.hidden, G = cell.gates * H, T = run.T, B = run.B, I = run.I, D = cell.dirs;
  if (W.dim(0) != D || W.dim(1) != G || W.dim(2) != I || R.dim(0) != D || R.dim(1) != G || attr_i(n, "hidden_size", H) != H)
    op_error(n, "W " + W.shape_str() + " or R " + R.shape_str() + " does not fit X " + x0.shape_str());
  cell.clip = attr_f(n, "clip", 0);
  cell.linear_before_reset = attr_i(n, "linear_before_reset", 0) != 0;
  activations_of(n, &cell);
  run.W = W.f32(), run.R = R.f32(), run.bias = optional_f32(n, in, 3, D * 2 * G);
  run.lens = in.size() > 4 && in[4] && in[4]->numel() ? ints_of(n, *in[4]) : std::vector<int64_t>(static_cast<size_t>(B), T);
  if (static_cast<int64_t>(run.lens.size()) != B) op_error(n, "sequence_lens must have one value per batch entry");
  for (int64_t l : run.lens)
    if (l < 0 || l > T) op_error(n, "a sequence length outside [0, " + std::to_string(T) + "]");
  run.h0 = optional_f32(n, in, 5, D * B * H);
  run.c0 = cell.gates == 4 ? optional_f32(n, in, 6, D * B * H) : nullptr;
  run.peep = cell.gates == 4 ? optional_f32(n, in, 7, D * 3 * H) : nullptr;
  Tensor x = x0;  // as [T, B, I] whatever the layout
  if (run.batch_first) {
    x = Tensor::empty({T, B, I});
    for (int64_t t = 0; t < T; ++t)
      for (int64_t b = 0; b < B; ++b) std::copy_n(x0.f32() + (b * T + t) * I, I, x.f32() + (t * B + b) * I);
  }
  Tensor y = Tensor::zeros(run.batch_first ? Shape{B, T, D, H} : Shape{T, D, B, H});
  const Shape state = run.batch_first ? Shape{B, D, H} : Shape{D, B, H};
  Tensor yh = Tensor::zeros(state), yc = Tensor::zeros(state);
  run.x = x.f32(), run.y = y.f32(), run.yh = yh.f32(), run.yc = yc.f32();
  for (int d = 0; d < D; ++d) direction(cell, run, d, dir == "reverse" || d == 1);
  out[0] = y;
  if (out.size() > 1) out[1] = yh;
  if (out.size() > 2 && cell.gates == 4) out[2] = yc;
}

}  // namespace loom::rt::graph

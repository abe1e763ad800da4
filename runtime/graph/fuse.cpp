// fuse.cpp — the load-time fusions: patterns PyTorch's exporter writes that run faster as one
// kernel. A zero Pad into the Conv or AveragePool that reads it; Gemm/Conv + Relu (ReLU in the producer's epilogue); scalar affine chains (Cast uint8
// -> float, Mul by a constant, Add of a constant: the pixel preprocessing) as one pass; the erf
// GELU subgraph and opset 13's spelled-out LayerNorm as one node each; MatMul + bias row, MatMul / scalar (attention's scale) and
// MatMul + GELU into the GEMM and its epilogue; a scalar scale of an operand into its alpha;
// transposes of rank 3 and 4 around a MatMul as strides (attention's own pattern in fuse_attention.cpp,
// quantized models' in fuse_quant.cpp). A value that several nodes read, or that the graph returns, is never fused away.
#include <algorithm>

#include "fuse.hpp"

namespace loom::rt::graph {
namespace {

int fuse_relu(Graph& g) {
  int n = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& p = g.nodes[i];
    if ((p.op != "Gemm" && p.op != "Conv") || p.out.size() != 1) continue;
    Node* r = g.sole_reader(p.out[0], i);
    if (!r || r->op != "Relu") continue;
    p.attrs["loom.relu"] = Attr::of(int64_t{1});
    p.out[0] = r->out[0];
    r->op.clear();
    ++n;
  }
  return n;
}

// Pad (constant zeros, on height and width only) read by a Conv or an AveragePool alone -> their
// own pads (the pool then counts the padded zeros, as it averaged them): PyTorch's F.pad before a
// convolution, and the Pad its exporter writes for AvgPool2d(count_include_pad=True).
int fuse_pad(Graph& g) {
  int n = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& p = g.nodes[i];
    if (p.op != "Pad" || p.in.size() < 2 || p.out.size() != 1 || attr_s(p, "mode", "constant") != "constant") continue;
    if (p.in.size() > 3 && p.in[3] >= 0) continue;  // axes: left to the kernel
    float zero = 0;
    if (p.in.size() > 2 && p.in[2] >= 0 && (!g.scalar(p.in[2], &zero) || zero != 0)) continue;
    Node* c = g.sole_reader(p.out[0], i);
    if (!c || (c->op != "Conv" && c->op != "AveragePool") || c->in[0] != p.out[0] || attr_s(*c, "auto_pad", "NOTSET") != "NOTSET" || p.in[1] < 0)
      continue;
    const Tensor& t = g.constants[static_cast<size_t>(p.in[1])];
    if (!t.defined() || t.dtype() != DType::kI64 || t.numel() != 8) continue;
    const int64_t* v = t.data<int64_t>();
    if (v[0] || v[1] || v[4] || v[5] || std::any_of(v, v + 8, [](int64_t x) { return x < 0; })) continue;
    std::vector<int64_t> pads = attr_ints(*c, "pads", {0, 0, 0, 0});
    if (pads.size() != 4) continue;
    if (c->op == "AveragePool") {
      if (attr_i(*c, "count_include_pad", 0) == 0 && std::any_of(pads.begin(), pads.end(), [](int64_t x) { return x != 0; })) continue;
      c->attrs["count_include_pad"] = Attr::of(int64_t{1});
    }
    pads = {pads[0] + v[2], pads[1] + v[3], pads[2] + v[6], pads[3] + v[7]};
    c->attrs["pads"] = Attr::of(pads);
    c->in[0] = p.in[0];
    p.op.clear();
    ++n;
  }
  return n;
}

// Mul(x, a) then Add(., b) with scalar constants a and b -> Loom.Affine(x): x * a + b, reading
// x as uint8 when a Cast to float fed the Mul.
int fuse_affine(Graph& g) {
  int n = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& m = g.nodes[i];
    float a, b;
    if (m.op != "Mul" || m.in.size() != 2) continue;
    const int x = g.scalar(m.in[1], &a) ? m.in[0] : g.scalar(m.in[0], &a) ? m.in[1] : -1;
    if (x < 0) continue;
    Node* add = g.sole_reader(m.out[0], i);
    if (!add || add->op != "Add" || add->in.size() != 2) continue;
    const int other = add->in[0] == m.out[0] ? add->in[1] : add->in[0];
    if (!g.scalar(other, &b)) continue;
    Node f;
    f.op = "Loom.Affine";
    f.name = m.name;
    f.fn = op_affine;
    f.in = {x};
    f.out = {add->out[0]};
    f.attrs["loom.scale"] = Attr::of(float{a});
    f.attrs["loom.shift"] = Attr::of(float{b});
    for (size_t j = 0; j < i; ++j) {  // a Cast uint8 -> float read by the Mul alone
      Node& c = g.nodes[j];
      if (c.op == "Cast" && c.out.size() == 1 && c.out[0] == x && g.uses[static_cast<size_t>(x)] == 1 &&
          attr_i(c, "to", 0) == onnx_dtype(DType::kF32)) {
        f.in = c.in;
        f.attrs["loom.from_u8"] = Attr::of(int64_t{1});
        c.op.clear();
        ++n;
      }
    }
    add->op.clear();
    m = std::move(f);
    ++n;
  }
  return n;
}

// The scalar constant beside value `x` among a binary node's two inputs, or false.
bool other_scalar(const Graph& g, const Node& n, int x, float* c) {
  if (n.in.size() != 2) return false;
  if (n.in[0] == x) return g.scalar(n.in[1], c);
  if (n.in[1] == x) return g.scalar(n.in[0], c);
  return false;
}

bool near(float a, float b) { return a > b - 1e-4f && a < b + 1e-4f; }

// The erf GELU as PyTorch exports nn.GELU: Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5,
// or opset 20's Gelu (the same kernel, named so that a MatMul before it takes it in).
int fuse_gelu(Graph& g) {
  int n = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& d = g.nodes[i];
    if (d.op == "Gelu" && attr_s(d, "approximate", "none") == "none") d.op = "Loom.Gelu";
    float c;
    if (d.op != "Div" || d.in.size() != 2 || !g.scalar(d.in[1], &c) || !near(c, 1.41421356f)) continue;
    const int x = d.in[0];
    Node* e = g.sole_reader(d.out[0], i);
    if (!e || e->op != "Erf") continue;
    Node* a = g.sole_reader(e->out[0], i);
    if (!a || a->op != "Add" || !other_scalar(g, *a, e->out[0], &c) || !near(c, 1.0f)) continue;
    Node* m = g.sole_reader(a->out[0], i);
    if (!m || m->op != "Mul" || m->in.size() != 2 || (m->in[0] == a->out[0] ? m->in[1] : m->in[0]) != x) continue;
    Node* h = g.sole_reader(m->out[0], i);
    if (!h || h->op != "Mul" || !other_scalar(g, *h, m->out[0], &c) || !near(c, 0.5f)) continue;
    Node f;
    f.op = "Loom.Gelu";
    f.name = d.name;
    f.fn = op_gelu;
    f.in = {x};
    f.out = h->out;
    e->op.clear(), a->op.clear(), m->op.clear(), h->op.clear();
    d = std::move(f);
    --g.uses[static_cast<size_t>(x)];
    n += 4;
  }
  return n;
}

// GPT-2's tanh GELU as PyTorch exports it (Hugging Face's NewGELUActivation, torch.pow spelled
// out): Pow(x, 3) -> Mul 0.044715 -> Add x -> Mul sqrt(2/pi) -> Tanh -> Add 1 -> Mul by Mul(x, 0.5)
// -> Gelu(x, approximate tanh), one vectorised pass.
int fuse_gelu_tanh(Graph& g) {
  int n = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& p = g.nodes[i];
    float c;
    if (p.op != "Pow" || p.in.size() != 2 || !g.scalar(p.in[1], &c) || c != 3.0f) continue;
    const int x = p.in[0];
    const auto next = [&](const Node* from, const char* op, float k) -> Node* {  // its sole reader, op by a scalar near k
      Node* r = from ? g.sole_reader(from->out[0], i) : nullptr;
      float v;
      return r && r->op == op && other_scalar(g, *r, from->out[0], &v) && near(v, k) ? r : nullptr;
    };
    Node* cube = next(&p, "Mul", 0.044715f);
    Node* sum = cube ? g.sole_reader(cube->out[0], i) : nullptr;
    if (!sum || sum->op != "Add" || sum->in.size() != 2 || (sum->in[0] == cube->out[0] ? sum->in[1] : sum->in[0]) != x) continue;
    Node* scaled = next(sum, "Mul", 0.7978845608f);
    Node* t = scaled ? g.sole_reader(scaled->out[0], i) : nullptr;
    Node* one = t && t->op == "Tanh" ? next(t, "Add", 1.0f) : nullptr;
    Node* out = one ? g.sole_reader(one->out[0], i) : nullptr;
    if (!out || out->op != "Mul" || out->in.size() != 2) continue;
    Node* half = g.producer(out->in[0] == one->out[0] ? out->in[1] : out->in[0], g.nodes.size());
    if (!half || half->op != "Mul" || g.sole_reader(half->out[0], 0) != out || !other_scalar(g, *half, x, &c) || !near(c, 0.5f)) continue;
    Node f;
    f.op = "Gelu", f.name = t->name, f.fn = op_gelu, f.in = {x}, f.out = out->out;
    f.attrs["approximate"] = Attr::of(std::string("tanh"));
    for (Node* d : {&p, cube, sum, scaled, t, one, half}) d->op.clear();
    *out = std::move(f);
    g.uses[static_cast<size_t>(x)] -= 2;
    n += 7;
  }
  return n;
}

bool weight_matmul(const Graph& g, const Node& m) {
  if (m.op != "MatMul" || m.in.size() != 2 || m.out.size() != 1) return false;
  const Tensor& w = g.constants[static_cast<size_t>(m.in[1])];
  return w.defined() && w.ndim() == 2 && w.dtype() == DType::kF32;
}

// MatMul(x, W) then Add of a constant bias row -> the MatMul adds it in its epilogue; ONNX
// Runtime's BiasGelu of one (its optimizer's MatMul -> BiasGelu) adds it and applies GELU there.
int fuse_matmul_bias(Graph& g) {
  int n = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& m = g.nodes[i];
    if (!weight_matmul(g, m)) continue;
    Node* a = g.sole_reader(m.out[0], i);
    const bool gelu = a && a->op == "com.microsoft:BiasGelu" && a->in.size() == 2 && a->in[0] == m.out[0];
    if (!a || (a->op != "Add" && !gelu) || a->in.size() != 2) continue;
    const int b = a->in[0] == m.out[0] ? a->in[1] : a->in[0];
    const Tensor& bias = b >= 0 ? g.constants[static_cast<size_t>(b)] : Tensor();
    const int64_t cols = g.constants[static_cast<size_t>(m.in[1])].dim(1);
    if (!bias.defined() || bias.ndim() != 1 || bias.numel() != cols || bias.dtype() != DType::kF32) continue;
    m.in.push_back(b);
    if (gelu) m.attrs["loom.gelu"] = Attr::of(int64_t{1});
    m.out = a->out;
    a->op.clear();
    ++n;
  }
  return n;
}

// MatMul then Div by (or Mul by) a scalar constant -> the GEMM's alpha (attention's 1/sqrt(d)).
int fuse_matmul_scale(Graph& g) {
  int n = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& m = g.nodes[i];
    if (m.op != "MatMul" || m.in.size() != 2 || m.out.size() != 1) continue;
    Node* d = g.sole_reader(m.out[0], i);
    float c;
    if (!d || (d->op != "Div" && d->op != "Mul") || !other_scalar(g, *d, m.out[0], &c) || c == 0.0f) continue;
    if (d->op == "Div" && d->in[0] != m.out[0]) continue;  // c / MatMul is no scale
    m.attrs["loom.alpha"] = Attr::of(attr_f(m, "loom.alpha", 1.0f) * (d->op == "Div" ? 1.0f / c : c));
    m.out = d->out;
    d->op.clear();
    ++n;
  }
  return n;
}

// A MatMul (or quantize_dynamic's fused chain) whose output only a Loom.Gelu (or ONNX Runtime's Gelu, the same erf form) reads
// applies GELU in its epilogue.
int fuse_matmul_gelu(Graph& g) {
  int n = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& m = g.nodes[i];
    if ((m.op != "MatMul" && m.op != "Loom.MatMulIntegerToFloat") || m.out.size() != 1 || has_attr(m, "loom.gelu")) continue;
    Node* e = g.sole_reader(m.out[0], i);
    if (!e || (e->op != "Loom.Gelu" && e->op != "com.microsoft:Gelu")) continue;
    m.attrs["loom.gelu"] = Attr::of(int64_t{1});
    m.out = e->out;
    e->op.clear();
    ++n;
  }
  return n;
}

bool last_axis_mean(const Node& n) {
  return n.op == "ReduceMean" && n.in.size() == 1 && attr_ints(n, "axes") == std::vector<int64_t>{-1} &&
         attr_i(n, "keepdims", 1) == 1;
}

// A constant 1-D float vector beside value `x` among a binary node's inputs, or -1.
int other_vector(const Graph& g, const Node& n, int x) {
  if (n.in.size() != 2 || (n.in[0] != x && n.in[1] != x)) return -1;
  const int o = n.in[0] == x ? n.in[1] : n.in[0];
  const Tensor& t = o >= 0 ? g.constants[static_cast<size_t>(o)] : Tensor();
  return t.defined() && t.ndim() == 1 && t.dtype() == DType::kF32 ? o : -1;
}

// LayerNorm as opset 13/14 spells it out: ReduceMean(x) -> Sub -> Pow 2 -> ReduceMean -> Add
// eps -> Sqrt -> Div -> Mul gamma [-> Add beta], all over the last axis -> LayerNormalization.
int fuse_layer_norm(Graph& g) {
  int n = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& r1 = g.nodes[i];
    if (!last_axis_mean(r1)) continue;
    const int x = r1.in[0];
    Node* s = g.sole_reader(r1.out[0], i);
    if (!s || s->op != "Sub" || s->in.size() != 2 || s->in[0] != x || s->in[1] != r1.out[0]) continue;
    const int d = s->out[0];
    const auto rd = g.readers(d, i);
    if (g.uses[static_cast<size_t>(d)] != 2 || rd.size() != 2) continue;
    Node* p = rd[0]->op == "Pow" ? rd[0] : rd[1];
    Node* dv = rd[0]->op == "Pow" ? rd[1] : rd[0];
    float c, eps;
    if (p->op != "Pow" || p->in[0] != d || !g.scalar(p->in[1], &c) || c != 2.0f) continue;
    if (dv->op != "Div" || dv->in.size() != 2 || dv->in[0] != d) continue;
    Node* r2 = g.sole_reader(p->out[0], i);
    if (!r2 || !last_axis_mean(*r2)) continue;
    Node* a = g.sole_reader(r2->out[0], i);
    if (!a || a->op != "Add" || !other_scalar(g, *a, r2->out[0], &eps)) continue;
    Node* q = g.sole_reader(a->out[0], i);
    if (!q || q->op != "Sqrt" || g.sole_reader(q->out[0], i) != dv || dv->in[1] != q->out[0]) continue;
    Node* mul = g.sole_reader(dv->out[0], i);
    const int gamma = mul && mul->op == "Mul" ? other_vector(g, *mul, dv->out[0]) : -1;
    if (gamma < 0) continue;
    Node* add = g.sole_reader(mul->out[0], i);
    const int beta = add && add->op == "Add" ? other_vector(g, *add, mul->out[0]) : -1;
    Node f;
    f.op = "LayerNormalization";
    f.name = r1.name;
    f.fn = op_layer_norm;
    f.in = {x, gamma};
    if (beta >= 0) f.in.push_back(beta);
    f.out = beta >= 0 ? add->out : mul->out;
    f.attrs["axis"] = Attr::of(int64_t{-1});
    f.attrs["epsilon"] = Attr::of(float{eps});
    for (Node* k : {s, p, dv, r2, a, q, mul}) k->op.clear();
    if (beta >= 0) add->op.clear();
    r1 = std::move(f);
    --g.uses[static_cast<size_t>(x)];
    n += beta >= 0 ? 8 : 7;
  }
  return n;
}

// A transpose of rank 3 or 4 (the same rank as `rank` once one is set): its perm, and where the
// last axis goes in the rank-4 view (a leading 1 before a rank-3 one). Not a perm that is no
// permutation (the Transpose's kernel refuses it; fused, it would index past the shape).
bool fusable_perm(const Node& t, size_t* rank, std::vector<int64_t>* perm, std::vector<int64_t>* perm4) {
  *perm = attr_ints(t, "perm");
  if ((perm->size() != 3 && perm->size() != 4) || (*rank && perm->size() != *rank)) return false;
  std::vector<int64_t> sorted = *perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i)
    if (sorted[i] != static_cast<int64_t>(i)) return false;
  *perm4 = *perm;
  if (perm->size() == 3) {
    for (auto& p : *perm4) ++p;
    perm4->insert(perm4->begin(), 0);
  }
  *rank = perm->size();
  return true;
}

// Transposes of rank 3 or 4 around a MatMul become strides of its GEMMs: an operand whose last
// or second-to-last axis stays the input's last (BLAS reads it as is or transposed), and an
// output transpose that keeps the last axis ([T, N·heads, d] read as [N·heads, T, d] without a
// copy). Only when the MatMul has no epilogue; the kernel falls back to copies when an operand's
// rank at run time is not the transposes' (one the fusion could not see).
int fuse_matmul_transposes(Graph& g) {
  int n = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& m = g.nodes[i];
    if (m.op != "MatMul" || m.in.size() != 2 || m.out.size() != 1 || has_attr(m, "loom.gelu")) continue;
    std::vector<int64_t> perm, perm4;
    size_t rank = 0;
    for (int k = 0; k < 2; ++k) {
      Node* t = g.producer(m.in[static_cast<size_t>(k)], i);
      const size_t before = rank;
      if (!t || t->op != "Transpose" || g.uses[static_cast<size_t>(t->out[0])] != 1 || !fusable_perm(*t, &rank, &perm, &perm4))
        continue;
      if (perm4[3] != 3 && perm4[2] != 3) {
        rank = before;
        continue;
      }
      m.attrs[k == 0 ? "loom.perm_a" : "loom.perm_b"] = Attr::of(perm);
      m.in[static_cast<size_t>(k)] = t->in[0];
      t->op.clear();
      ++n;
    }
    Node* t = g.sole_reader(m.out[0], i);
    if (t && t->op == "Transpose" && fusable_perm(*t, &rank, &perm, &perm4) && perm4[3] == 3) {
      m.attrs["loom.perm_y"] = Attr::of(perm);
      m.out = t->out;
      t->op.clear();
      ++n;
    }
  }
  return n;
}

// A scalar constant that scales a MatMul's operand (Div(q, sqrt(d)) before attention's Q K^T)
// -> the GEMM's alpha, so that the operand's producer (a transpose) can meet the MatMul.
int fuse_matmul_prescale(Graph& g) {
  int n = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& m = g.nodes[i];
    if (m.op != "MatMul" || m.in.size() != 2 || m.out.size() != 1) continue;
    for (size_t k = 0; k < 2; ++k) {
      Node* d = g.producer(m.in[k], i);
      float c;
      if (!d || (d->op != "Div" && d->op != "Mul") || g.uses[static_cast<size_t>(m.in[k])] != 1) continue;
      const int x = d->in.size() == 2 ? d->in[0] : -1, s = d->in.size() == 2 ? d->in[1] : -1;
      const int scalar = d->op == "Div" || g.scalar(s, &c) ? s : x;  // Div: x / c only; Mul: either side
      const int data = scalar == s ? x : s;
      if (!g.scalar(scalar, &c) || c == 0.0f || g.constants[static_cast<size_t>(scalar)].ndim() > 1) continue;
      m.attrs["loom.alpha"] = Attr::of(attr_f(m, "loom.alpha", 1.0f) * (d->op == "Div" ? 1.0f / c : c));
      m.in[k] = data;
      d->op.clear();
      ++n;
    }
  }
  return n;
}

}  // namespace

int fuse_nodes(std::vector<Node>& nodes, const std::vector<Tensor>& constants, const std::vector<int>& output_ids,
               const std::vector<Node>& folded) {
  Graph g{nodes, constants, std::vector<int>(constants.size(), 0), folded};
  for (const Node& n : nodes)
    for (int v : n.in)
      if (v >= 0) ++g.uses[static_cast<size_t>(v)];
  for (int v : output_ids) g.uses[static_cast<size_t>(v)] += 1000;
  int fused = fuse_pad(g);
  fused += fuse_relu(g);
  fused += fuse_affine(g);
  fused += fuse_gelu(g);
  fused += fuse_gelu_tanh(g);
  fused += fuse_layer_norm(g);
  fused += fuse_quantized(g);
  fused += fuse_matmul_bias(g);
  fused += fuse_matmul_scale(g);
  fused += fuse_matmul_gelu(g);
  fused += fuse_matmul_prescale(g);
  fused += fuse_matmul_transposes(g);
  fused += fuse_attention(g);
  nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [](const Node& n) { return n.op.empty(); }), nodes.end());
  return fused;
}

}  // namespace loom::rt::graph

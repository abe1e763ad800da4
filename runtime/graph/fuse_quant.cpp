// fuse_quant.cpp — the load-time fusions of onnxruntime.quantization's models: quantize_dynamic's
// MatMulInteger -> Cast -> Mul by the scales (-> Add of the bias) as one GEMM whose weight is held
// in the layout its kernel takes, quantize_static's QDQ pairs (a QuantizeLinear read by
// DequantizeLinear nodes alone) as one pass each, moved past the transposes beside them, and
// QLinearConv's float weights made once. The
// fused kernels round every step as the nodes they replace.
#include <utility>

#include "fuse.hpp"
#include "quant.hpp"

namespace loom::rt::graph {
namespace {

bool int8(const Tensor* t) { return t && (t->dtype() == DType::kU8 || t->dtype() == DType::kI8); }

// The constant float bias row of N values beside value x in an Add, or -1.
int bias_row(const Graph& g, const Node& add, int x, int64_t N) {
  if (add.op != "Add" || add.in.size() != 2) return -1;
  const int b = add.in[0] == x ? add.in[1] : add.in[0];
  const Tensor* t = g.constant(b);
  return t && b != x && t->dtype() == DType::kF32 && t->ndim() == 1 && t->numel() == N ? b : -1;
}

// The Mul that makes value v, read by nothing else, when it multiplies a value by a float constant
// of one value or N (the activation's scale by the weight's), the constant put second; else null.
Node* scales_product(Graph& g, int v, int64_t N) {
  Node* p = v >= 0 && g.uses[static_cast<size_t>(v)] == 1 ? g.producer(v, g.nodes.size()) : nullptr;
  if (!p || p->op != "Mul" || p->in.size() != 2) return nullptr;
  for (int k : {1, 0}) {
    const Tensor* c = g.constant(p->in[static_cast<size_t>(k)]);
    if (c && c->dtype() == DType::kF32 && (c->numel() == 1 || c->numel() == N) && !g.constant(p->in[static_cast<size_t>(1 - k)])) {
      if (k == 0) std::swap(p->in[0], p->in[1]);
      return p;
    }
  }
  return nullptr;
}

// MatMulInteger(a, W, a_zero, W_zero), W and W_zero constants, read by a Cast to float alone, read
// by a Mul alone (the product of the activation's and the weight's scales), then maybe an Add of a
// bias row: Loom.MatMulIntegerToFloat in the place of the last of them (where every input is ready),
// taking in the Mul of the two scales too.
int fuse_matmul_integer(Graph& g) {
  int n = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& m = g.nodes[i];
    if (m.op != "MatMulInteger" || m.in.size() < 2 || m.out.size() != 1) continue;
    const Tensor *w = g.constant(m.in[1]), *wz = m.in.size() > 3 ? g.constant(m.in[3]) : nullptr;
    if (!int8(w) || w->ndim() != 2 || (m.in.size() > 3 && m.in[3] >= 0 && (!int8(wz) || (wz->numel() != 1 && wz->numel() != w->dim(1)))))
      continue;
    Node* c = g.sole_reader(m.out[0], i);
    if (!c || c->op != "Cast" || attr_i(*c, "to", 0) != onnx_dtype(DType::kF32)) continue;
    Node* mul = g.sole_reader(c->out[0], i);
    if (!mul || mul->op != "Mul" || mul->in.size() != 2 || mul->in[0] == mul->in[1]) continue;
    Node f;
    f.op = "Loom.MatMulIntegerToFloat";
    f.name = m.name;
    f.fn = op_matmul_integer_to_float;
    const int scale = mul->in[0] == c->out[0] ? mul->in[1] : mul->in[0];
    f.in = {m.in[0], m.in.size() > 2 ? m.in[2] : -1, scale};
    matmul_integer_weights(m, *w, wz, &f.attrs);
    Node* last = mul;
    if (Node* add = g.sole_reader(mul->out[0], i); add && bias_row(g, *add, mul->out[0], w->dim(1)) >= 0) {
      f.in.push_back(bias_row(g, *add, mul->out[0], w->dim(1)));
      mul->op.clear();
      last = add;
      ++n;
    }
    f.in.resize(4, -1);
    if (Node* s = scales_product(g, scale, w->dim(1))) {  // the activation's scale by the weight's, in the kernel
      f.in[2] = s->in[0], f.in.push_back(s->in[1]);
      s->op.clear();
      ++n;
    }
    f.out = last->out;
    m.op.clear();
    c->op.clear();
    *last = std::move(f);
    n += 2;
  }
  return n;
}

// QuantizeLinear(x, scale, zero) whose output DequantizeLinear nodes of the same scale, zero
// point and axis alone read: each of them Loom.QuantizeDequantize(x, scale, zero).
int fuse_quantize_dequantize(Graph& g) {
  int n = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& q = g.nodes[i];
    if (q.op != "QuantizeLinear" || q.in.size() < 2 || q.out.size() != 1 || q.out[0] < 0) continue;
    if (has_attr(q, "output_dtype") || has_attr(q, "block_size") || has_attr(q, "saturate")) continue;
    const int v = q.out[0];
    const std::vector<Node*> rd = g.readers(v, i);
    const auto same = [&](const Node* d) {
      return d->op == "DequantizeLinear" && d->in.size() == q.in.size() && d->in[0] == v && d->in[1] == q.in[1] &&
             (q.in.size() < 3 || d->in[2] == q.in[2]) && attr_i(*d, "axis", 1) == attr_i(q, "axis", 1) && !has_attr(*d, "block_size");
    };
    if (rd.empty() || static_cast<int>(rd.size()) != g.uses[static_cast<size_t>(v)] || !std::all_of(rd.begin(), rd.end(), same)) continue;
    for (Node* d : rd) {
      d->op = "Loom.QuantizeDequantize";
      d->fn = op_quantize_dequantize;
      d->in = q.in;
      d->attrs = q.attrs;
      ++g.uses[static_cast<size_t>(q.in[0])];
    }
    for (int in : q.in)  // read by the DequantizeLinear nodes now, not by the QuantizeLinear
      if (in >= 0) --g.uses[static_cast<size_t>(in)];
    g.uses[static_cast<size_t>(v)] = 0;
    q.op.clear(), q.in.clear();
    ++n;
  }
  return n;
}

// The nodes a (writing value v, read by b alone) and b swapped in the chain x -a-> v -b-> y:
// x -b-> v -a-> y, each node keeping its other inputs and attributes.
void swap_in_chain(Node& a, Node& b) {
  const int x = a.in[0], v = a.out[0], y = b.out[0];
  std::swap(a, b);
  a.in[0] = x, a.out[0] = v;
  b.in[0] = v, b.out[0] = y;
}

// A QDQ model puts a fake quantization of one scale between a Transpose and the MatMul that reads
// it, or between a MatMul and the Transpose of its product (attention's heads): the two swapped,
// so that the transposes meet the MatMuls and become their strides (fuse_matmul_transposes).
int commute_qdq_transposes(Graph& g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& d = g.nodes[i];
    if (!scalar_qdq(g, d) || d.in[0] < 0) continue;
    Node* t = g.producer(d.in[0], i);
    Node* r = g.sole_reader(d.out[0], i);
    if (t && t->op == "Transpose" && t->in.size() == 1 && g.uses[static_cast<size_t>(d.in[0])] == 1 && r && r->op == "MatMul") {
      swap_in_chain(*t, d);  // Transpose -> QDQ -> MatMul: QDQ -> Transpose -> MatMul
    } else if (t && t->op == "MatMul" && g.uses[static_cast<size_t>(d.in[0])] == 1 && r && r->op == "Transpose" && r->in.size() == 1) {
      swap_in_chain(d, *r);  // MatMul -> QDQ -> Transpose: MatMul -> Transpose -> QDQ
    }
  }
  return 0;  // no node went
}

// An int8 weight that a folded DequantizeLinear made into constant v: the weight, its zero point
// (null: 0) and its scale's value id; false unless one scale or one per column (axis 1).
struct Int8Weight {
  const Tensor *w = nullptr, *zero = nullptr;
  int scale = -1;
};
bool int8_weight(const Graph& g, int v, Int8Weight* d) {
  const Node* dq = g.folded_producer(v);
  if (!dq || dq->op != "DequantizeLinear" || dq->in.size() < 2 || attr_i(*dq, "block_size", 0) != 0) return false;
  const Tensor *w = g.constant(dq->in[0]), *s = g.constant(dq->in[1]);
  const bool has_zero = dq->in.size() > 2 && dq->in[2] >= 0;
  const Tensor* z = has_zero ? g.constant(dq->in[2]) : nullptr;
  if (!int8(w) || w->ndim() != 2 || !s || s->dtype() != DType::kF32 || (has_zero && (!int8(z) || z->numel() != s->numel()))) return false;
  const int64_t axis = attr_i(*dq, "axis", 1);
  if (s->numel() != 1 && (s->ndim() != 1 || s->numel() != w->dim(1) || (axis != 1 && axis != -1))) return false;
  *d = {w, z, dq->in[1]};
  return true;
}

// Weights of fewer values stay on the float GEMM: below about 128 x 128 (a GPT-2 block 32 wide:
// 1.2x the time at batch 32), quantizing the activation and the int8 GEMM's packing cost more
// than its faster products save; a BERT 256 wide runs 1.8x faster on int8 GEMMs.
constexpr int64_t kInt8GemmWeights = 1 << 14;

// A QDQ model's MatMul of a fake-quantized activation (one scale and zero point) by the int8
// weight of a folded DequantizeLinear: Loom.MatMulIntegerToFloat on the int8 GEMM, as ONNX Runtime
// runs it, quantizing the activation itself (loom.quantize_a); the QuantizeDequantize stays for
// its other readers (a residual Add), or goes when none is left.
int fuse_qdq_matmuls(Graph& g) {
  int n = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& a = g.nodes[i];
    if (a.op != "Loom.QuantizeDequantize" || a.out.size() != 1 || !scalar_qdq(g, a) || a.in[0] < 0) continue;
    const int x = a.out[0];
    for (Node* m : g.readers(x, i)) {
      Int8Weight w;
      if (m->op != "MatMul" || m->in.size() != 2 || m->in[0] != x || m->in[1] == x || m->out.size() != 1 || !int8_weight(g, m->in[1], &w))
        continue;
      if (w.w->numel() < kInt8GemmWeights) continue;  // the float GEMM it is
      Node f;
      f.op = "Loom.MatMulIntegerToFloat", f.name = m->name, f.fn = op_matmul_integer_to_float, f.out = m->out;
      f.in = {a.in[0], a.in.size() > 2 ? a.in[2] : -1, a.in[1], -1, w.scale};
      matmul_integer_weights(*m, *w.w, w.zero, &f.attrs);
      f.attrs["loom.quantize_a"] = Attr::of(int64_t{1});
      for (int v : f.in)
        if (v >= 0) ++g.uses[static_cast<size_t>(v)];
      for (int v : m->in) --g.uses[static_cast<size_t>(v)];
      *m = std::move(f);
    }
    if (g.uses[static_cast<size_t>(x)] == 0) {
      for (int v : a.in)
        if (v >= 0) --g.uses[static_cast<size_t>(v)];
      a.op.clear(), a.in.clear();
      ++n;
    }
  }
  return n;
}

// QLinearConv whose weight, its scale and zero point, x_scale and bias are constants: its float
// weight and bias made once (qlinear_conv_weights), so that each call neither makes them nor
// prepares a convolution for them; the node no longer reads the int8 ones.
int prepare_qlinear_conv(Graph& g) {
  for (Node& c : g.nodes) {
    if (c.op != "QLinearConv" || c.in.size() < 7 || c.attrs.count("loom.weights")) continue;
    std::vector<const Tensor*> in(c.in.size(), nullptr);
    bool constants = true;
    for (size_t k : {size_t{1}, size_t{3}, size_t{4}, size_t{5}, size_t{8}}) {
      if (k >= c.in.size() || c.in[k] < 0) continue;
      in[k] = g.constant(c.in[k]);
      constants = constants && in[k];
    }
    if (!constants || !in[1] || !in[3] || !in[4]) continue;
    qlinear_conv_weights(c, in, &c.attrs);
    for (size_t k : {size_t{3}, size_t{4}, size_t{5}, size_t{8}})  // held as floats now: the int8 ones can go
      if (k < c.in.size() && c.in[k] >= 0) --g.uses[static_cast<size_t>(c.in[k])], c.in[k] = -1;
  }
  return 0;  // no node went
}

}  // namespace

bool scalar_qdq(const Graph& g, const Node& d, std::vector<float>* q) {
  if (d.op != "Loom.QuantizeDequantize" || d.in.size() < 2 || d.out.size() != 1) return false;
  const Tensor* s = g.constant(d.in[1]);
  const bool has_zero = d.in.size() > 2 && d.in[2] >= 0;
  const Tensor* z = has_zero ? g.constant(d.in[2]) : nullptr;
  if (!s || s->dtype() != DType::kF32 || s->numel() != 1 || (has_zero && (!int8(z) || z->numel() != 1))) return false;
  const bool s8 = z && z->dtype() == DType::kI8;
  if (q) *q = {s->f32()[0], z ? static_cast<float>(int_at(*z, 0)) : 0.0f, s8 ? -128.0f : 0.0f, s8 ? 127.0f : 255.0f};
  return true;
}

int fuse_quantized(Graph& g) {
  const int n = fuse_matmul_integer(g) + fuse_quantize_dequantize(g) + fuse_qdq_matmuls(g) + prepare_qlinear_conv(g);
  return n + commute_qdq_transposes(g);
}

}  // namespace loom::rt::graph

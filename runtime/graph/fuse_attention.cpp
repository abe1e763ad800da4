// fuse_attention.cpp — attention as one Loom.Attention node (ops_attention.cpp), whatever exporter
// wrote it: the scores' MatMul (through its fused transposes and scale) and the Softmax's product
// by V, with what the exporters put between them: nn.MultiheadAttention's and BERT's mask Add,
// GPT-2's Where over a causal condition, PyTorch 2's SDPA guard against rows masked whole, and a
// quantize_static QDQ model's fake quantization of the scores and the probabilities. Each
// intermediate is read by the next alone.
#include <utility>
#include <vector>

#include "fuse.hpp"

namespace loom::rt::graph {
namespace {

// The scores' Where(cond, scores, c) or Where(cond, c, scores) with c a scalar constant (GPT-2's
// causal mask through a lower-triangular buffer): the Where, or null; *keep whether a true
// condition keeps the score.
Node* causal_where(Graph& g, int scores, size_t after, float* fill, bool* keep) {
  Node* w = g.sole_reader(scores, after);
  if (!w || w->op != "Where" || w->in.size() != 3 || w->out.size() != 1 || w->in[0] == scores) return nullptr;
  *keep = w->in[1] == scores;
  return g.scalar(*keep ? w->in[2] : w->in[1], fill) && w->in[1] != w->in[2] ? w : nullptr;
}

// Softmax's probabilities p through Where(IsNaN(p), c, p) with c a scalar constant (PyTorch 2's
// exporter writes SDPA so: a row masked whole becomes c): the Where, or null; *isnan the IsNaN.
Node* nan_guard(Graph& g, int p, size_t after, float* fill, Node** isnan) {
  if (p < 0 || g.uses[static_cast<size_t>(p)] != 2) return nullptr;
  const std::vector<Node*> rd = g.readers(p, after);
  if (rd.size() != 2) return nullptr;
  Node* in = rd[0]->op == "IsNaN" ? rd[0] : rd[1];
  Node* w = in == rd[0] ? rd[1] : rd[0];
  if (in->op != "IsNaN" || in->out.size() != 1 || w->op != "Where" || w->in.size() != 3 || w->out.size() != 1) return nullptr;
  if (g.sole_reader(in->out[0], after) != w || w->in[0] != in->out[0] || w->in[2] != p || !g.scalar(w->in[1], fill)) return nullptr;
  *isnan = in;
  return w;
}

// The node that reads value v alone when it fake-quantizes with one scale (scalar_qdq): the
// node, *q its {scale, zero, lo, hi}; else null.
Node* qdq_reader(Graph& g, int v, size_t after, std::vector<float>* q) {
  Node* d = g.sole_reader(v, after);
  return d && d->in[0] == v && scalar_qdq(g, *d, q) ? d : nullptr;
}

// A Div of value v by a scalar constant, or a Mul of it by one, read from v alone: the node,
// *c the constant; else null.
Node* scalar_scale(Graph& g, int v, size_t after, float* c) {
  Node* d = g.sole_reader(v, after);
  if (!d || (d->op != "Div" && d->op != "Mul") || d->in.size() != 2 || d->out.size() != 1) return nullptr;
  const int other = d->in[0] == v ? d->in[1] : d->in[0];
  if (other == v || (d->op == "Div" && d->in[0] != v)) return nullptr;
  const Tensor* t = g.constant(other);
  return t && t->ndim() <= 1 && g.scalar(other, c) ? d : nullptr;
}

// What lies between the scores' MatMul and the product by V: the score steps (AttentionStep, each
// optional, in any order, one Where and one mask at most), the Softmax, then its steps.
struct Chain {
  std::vector<Node*> gone;  // the nodes the fused one stands for, but the MatMuls
  std::vector<int64_t> steps;
  std::vector<float> consts, p_q;
  Node *where = nullptr, *add = nullptr, *guard = nullptr, *qdq_p = nullptr, *pv = nullptr;
  float fill = 0.0f, nan_fill = 0.0f;
  bool keep = true;
  int mask = -1;
};

// The score step that reads value v, recorded in c: the node, or null.
Node* score_step(Graph& g, int v, size_t i, Chain* c) {
  std::vector<float> q;
  float k = 1.0f;
  if (Node* d = qdq_reader(g, v, i, &q)) {
    c->steps.push_back(kStepQdq), c->consts.insert(c->consts.end(), q.begin(), q.end());
    return d;
  }
  if (Node* d = scalar_scale(g, v, i, &k)) {
    c->steps.push_back(d->op == "Div" ? kStepDiv : kStepMul), c->consts.push_back(k);
    return d;
  }
  if (!c->where && (c->where = causal_where(g, v, i, &c->fill, &c->keep))) {
    c->steps.push_back(kStepWhere);
    return c->where;
  }
  Node* n = c->add ? nullptr : g.sole_reader(v, i);
  if (n && n->op == "Add" && n->in.size() == 2 && n->out.size() == 1 && n->in[0] != n->in[1]) {
    c->add = n, c->mask = n->in[0] == v ? n->in[1] : n->in[0];
    c->steps.push_back(kStepMask);
    return n;
  }
  return nullptr;
}

// The chain from qk (node i) to the MatMul by V: true when it is all there.
bool attention_chain(Graph& g, const Node& qk, size_t i, Chain* c) {
  int v = qk.out[0];
  while (Node* n = score_step(g, v, i, c)) c->gone.push_back(n), v = n->out[0];
  Node* sm = g.sole_reader(v, i);
  if (!sm || sm->op != "Softmax" || attr_i(*sm, "axis", -1) != -1 || sm->in[0] != v || sm->out.size() != 1) return false;
  c->gone.push_back(sm), v = sm->out[0];
  Node* isnan = nullptr;
  if ((c->guard = nan_guard(g, v, i, &c->nan_fill, &isnan))) c->gone.push_back(isnan), c->gone.push_back(c->guard), v = c->guard->out[0];
  if ((c->qdq_p = qdq_reader(g, v, i, &c->p_q))) c->gone.push_back(c->qdq_p), v = c->qdq_p->out[0];
  Node* pv = g.sole_reader(v, i);
  if (!pv || pv->op != "MatMul" || pv->in.size() != 2 || pv->in[0] != v || has_attr(*pv, "loom.perm_a") ||
      has_attr(*pv, "loom.gelu") || has_attr(*pv, "loom.alpha"))
    return false;
  c->pv = pv;
  return true;
}

Attr floats(std::vector<float> v) {
  Attr a;
  a.kind = Attr::kFloats, a.floats = std::move(v);
  return a;
}

// The Loom.Attention node standing for qk and its chain.
Node attention_node(const Node& qk, const Chain& c) {
  Node f = *c.pv;
  f.op = "Loom.Attention";
  f.fn = op_attention;
  f.in = {qk.in[0], qk.in[1], c.mask, c.pv->in[1]};
  f.attrs.clear();
  auto carry = [&](const Node& from, const char* key, const char* as) {
    if (has_attr(from, key)) f.attrs[as] = from.attrs.at(key);
  };
  carry(qk, "loom.alpha", "loom.alpha"), carry(qk, "loom.perm_a", "loom.qk_perm_a"), carry(qk, "loom.perm_b", "loom.qk_perm_b");
  carry(*c.pv, "loom.perm_b", "loom.perm_v"), carry(*c.pv, "loom.perm_y", "loom.perm_y");
  f.attrs["loom.score_steps"] = Attr::of(c.steps);
  if (!c.consts.empty()) f.attrs["loom.score_consts"] = floats(c.consts);
  if (c.where) {
    f.in.push_back(c.where->in[0]);
    f.attrs["loom.fill"] = Attr::of(c.fill);
    f.attrs["loom.keep"] = Attr::of(int64_t{c.keep});
  }
  if (c.guard) f.attrs["loom.nan_fill"] = Attr::of(c.nan_fill);
  if (c.qdq_p) f.attrs["loom.p_qdq"] = floats(c.p_q);
  return f;
}

}  // namespace

int fuse_attention(Graph& g) {
  int n = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& qk = g.nodes[i];
    if (qk.op != "MatMul" || qk.in.size() != 2 || qk.out.size() != 1 || has_attr(qk, "loom.gelu") || has_attr(qk, "loom.perm_y"))
      continue;
    Chain c;
    if (!attention_chain(g, qk, i, &c)) continue;
    Node f = attention_node(qk, c);
    *c.pv = std::move(f);
    qk.op.clear();
    for (Node* gone : c.gone) gone->op.clear();
    ++n;
  }
  return n;
}

}  // namespace loom::rt::graph

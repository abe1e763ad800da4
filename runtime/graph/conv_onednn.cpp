// conv_onednn.cpp — Conv on oneDNN's direct convolution primitives (JIT kernels for the CPU's
// vector width, no im2col): one primitive per weight and input shape, cached, its weights
// reordered once into the blocked layout it asked for, the bias and a fused Relu in its epilogue;
// the activations reordered from and to NCHW around it.
#include "conv_onednn.hpp"

#ifdef LOOM_HAVE_DNNL
#include <dnnl.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "loom/rt/tensor/kernels.hpp"

namespace loom::rt::graph {

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

struct Prim {
  Tensor w, b;  // held: the cache is keyed by their addresses
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  dnnl::memory weights, bias;
  dnnl::reorder to_src, from_dst;  // NCHW to the layout the primitive takes, and back (empty: the same)
  // The descriptors a call uses, asked of oneDNN once: at batch 1 a small convolution's queries
  // and descriptor setup were a fifth of its time.
  dnnl::memory::desc user_src, user_dst, src, dst, scratch;
};

using Key = std::tuple<const void*, const void*, std::vector<int64_t>>;

std::shared_ptr<Prim> make(const ConvShape& c, const Tensor& w, const Tensor* bias) {
  auto p = std::make_shared<Prim>();
  p->w = w;
  const dnnl::memory::dims src{c.n, c.c, c.h, c.w}, dst{c.n, c.m, c.oh, c.ow};
  const dnnl::memory::dims wd = c.groups == 1 ? dnnl::memory::dims{c.m, c.c, c.kh, c.kw}
                                              : dnnl::memory::dims{c.groups, c.m / c.groups, c.c / c.groups, c.kh, c.kw};
  const dnnl::memory::desc src_any(src, dt::f32, tag::any), dst_any(dst, dt::f32, tag::any), w_any(wd, dt::f32, tag::any),
      b_desc({c.m}, dt::f32, tag::a);
  const dnnl::memory::dims strides{c.sh, c.sw}, dil{c.dh - 1, c.dw - 1}, pl{c.pt, c.pl}, pr{c.pb, c.pr};
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (c.relu) {
    dnnl::post_ops po;
    po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(po);
  }
  const auto d = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_any,
                                                        w_any, b_desc, dst_any, strides, dil, pl, pr)
                      : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_any,
                                                        w_any, dst_any, strides, dil, pl, pr);
  p->pd = dnnl::convolution_forward::primitive_desc(d, attr, engine());
  p->prim = dnnl::convolution_forward(p->pd);
  dnnl::memory user(dnnl::memory::desc(wd, dt::f32, c.groups == 1 ? tag::oihw : tag::goihw), engine(), const_cast<float*>(w.f32()));
  p->weights = dnnl::memory(p->pd.weights_desc(), engine());
  dnnl::stream s(engine());
  dnnl::reorder(user, p->weights).execute(s, user, p->weights);
  s.wait();
  p->user_src = dnnl::memory::desc(src, dt::f32, tag::nchw), p->user_dst = dnnl::memory::desc(dst, dt::f32, tag::nchw);
  p->src = p->pd.src_desc(), p->dst = p->pd.dst_desc(), p->scratch = p->pd.scratchpad_desc();
  if (p->src != p->user_src) p->to_src = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), p->user_src, engine(), p->src));
  if (p->dst != p->user_dst) p->from_dst = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), p->dst, engine(), p->user_dst));
  if (bias) {
    p->b = *bias;
    p->bias = dnnl::memory(b_desc, engine(), const_cast<float*>(bias->f32()));
  }
  return p;
}

std::shared_ptr<Prim> get(const ConvShape& c, const Tensor& w, const Tensor* bias) {
  static std::mutex mu;
  static std::map<Key, std::shared_ptr<Prim>> cache;
  // oneDNN's kernels and reorders fix their threads when made: one made alone runs alone.
  Key key{w.f32(), bias ? bias->f32() : nullptr,
          {c.n, c.c, c.h, c.w, c.m, c.kh, c.kw, c.sh, c.sw, c.dh, c.dw, c.pt, c.pl, c.pb, c.pr, c.groups, c.relu, cpu::threads()}};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= 4096) cache.clear();  // shapes that keep changing: start again
  return cache[key] = make(c, w, bias);
}

}  // namespace

bool conv_onednn(const ConvShape& c, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  // Convolutions gain from a second thread from a quarter of a million multiply-adds (a ResNet's
  // 8 x 8 maps of 16 channels at batch 32), and are made (below) as they run.
  const cpu::AloneBelow small(c.n * c.m * c.oh * c.ow * (c.c / c.groups) * c.kh * c.kw, int64_t{1} << 18);
  std::shared_ptr<Prim> p;
  try {
    p = get(c, w, bias);
  } catch (const dnnl::error&) {
    return false;  // a shape oneDNN has no primitive for: the caller's im2col path runs it
  }
  dnnl::engine& eng = engine();
  thread_local dnnl::stream s(eng);
  dnnl::memory user_src(p->user_src, eng, const_cast<float*>(x.f32()));
  dnnl::memory user_dst(p->user_dst, eng, y.f32());
  dnnl::memory src = user_src, dst = user_dst;
  thread_local std::vector<float> src_buf, dst_buf;  // the blocked copies, per thread
  if (p->to_src) {
    src_buf.resize(p->src.get_size() / sizeof(float) + 1);
    src = dnnl::memory(p->src, eng, src_buf.data());
    p->to_src.execute(s, user_src, src);
  }
  if (p->from_dst) {
    dst_buf.resize(p->dst.get_size() / sizeof(float) + 1);
    dst = dnnl::memory(p->dst, eng, dst_buf.data());
  }
  thread_local std::vector<uint8_t> scratch;  // per thread: runs may be concurrent
  if (scratch.size() < p->scratch.get_size()) scratch.resize(p->scratch.get_size());
  thread_local std::unordered_map<int, dnnl::memory> args;
  args.clear();
  args[DNNL_ARG_SRC] = src, args[DNNL_ARG_WEIGHTS] = p->weights, args[DNNL_ARG_DST] = dst;
  args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(p->scratch, eng, scratch.data());
  if (bias) args[DNNL_ARG_BIAS] = p->bias;
  p->prim.execute(s, args);
  if (p->from_dst) p->from_dst.execute(s, dst, user_dst);
  s.wait();
  args.clear();
  return true;
}

}  // namespace loom::rt::graph

#else

namespace loom::rt::graph {
bool conv_onednn(const ConvShape&, const Tensor&, const Tensor&, const Tensor*, Tensor&) { return false; }
}  // namespace loom::rt::graph

#endif

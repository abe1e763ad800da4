// packed_linear.cpp — PackedLinear (packed_linear.hpp): oneDNN's matmul with a run-time row
// count and weights in the layout it asked for, or gemm() over the weights as given.
#include "loom/rt/tensor/packed_linear.hpp"

#ifdef LOOM_HAVE_DNNL
#include <dnnl.hpp>
#endif

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/rt/error.hpp"
#include "loom/rt/tensor/kernels.hpp"

namespace loom::rt {

struct PackedLinear::Impl {
  std::vector<float> w, bias;  // the gemm() path's weights [out, in]; the bias for both paths
#ifdef LOOM_HAVE_DNNL
  dnnl::engine eng;
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  dnnl::memory weights, bias_mem;
#endif
  bool packed = false;
};

PackedLinear::PackedLinear(const Tensor& w, const Tensor* bias) : impl_(std::make_unique<Impl>()) {
  if (w.ndim() != 2 || w.dim(0) <= 0 || w.dim(1) <= 0) throw Error("packed linear: weights must be a non-empty matrix [out, in]");
  n_ = static_cast<int>(w.dim(0));
  k_ = static_cast<int>(w.dim(1));
  if (bias && bias->numel() != n_)
    throw Error("packed linear: a bias of " + std::to_string(bias->numel()) + " for " + std::to_string(n_) + " outputs");
  if (bias) impl_->bias.assign(bias->f32(), bias->f32() + n_);
#ifdef LOOM_HAVE_DNNL
  if (std::string(cpu::gemm_backend()) == "onednn") {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    Impl& m = *impl_;
    m.eng = dnnl::engine(dnnl::engine::kind::cpu, 0);
    const dnnl::memory::dim N = n_, K = k_, M = DNNL_RUNTIME_DIM_VAL;
    dnnl::memory::desc src({M, K}, dt::f32, tag::ab), wei_any({K, N}, dt::f32, tag::any), wei_user({K, N}, dt::f32, tag::ba),
        bia({1, N}, dt::f32, tag::ab), dst({M, N}, dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    m.pd = dnnl::matmul::primitive_desc(bias ? dnnl::matmul::desc(src, wei_any, bia, dst) : dnnl::matmul::desc(src, wei_any, dst), attr, m.eng);
    m.prim = dnnl::matmul(m.pd);
    dnnl::memory user(wei_user, m.eng, const_cast<float*>(w.f32()));
    m.weights = dnnl::memory(m.pd.weights_desc(), m.eng);
    dnnl::stream s(m.eng);
    dnnl::reorder(user, m.weights).execute(s, user, m.weights);
    s.wait();
    if (bias) m.bias_mem = dnnl::memory(bia, m.eng, m.bias.data());
    m.packed = true;
    return;
  }
#endif
  impl_->w.assign(w.f32(), w.f32() + w.numel());
}

PackedLinear::~PackedLinear() = default;

const char* PackedLinear::path() const { return impl_->packed ? "onednn" : "gemm"; }

void PackedLinear::run(const float* x, int rows, float* y) const {
  if (rows <= 0) return;
  const Impl& m = *impl_;
#ifdef LOOM_HAVE_DNNL
  if (m.packed) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    thread_local std::vector<uint8_t> scratch;  // per thread: calls may run concurrently
    const size_t pad_bytes = m.pd.scratchpad_desc().get_size();
    if (scratch.size() < pad_bytes) scratch.resize(pad_bytes);
    dnnl::memory src({{rows, k_}, dt::f32, tag::ab}, m.eng, const_cast<float*>(x)), dst({{rows, n_}, dt::f32, tag::ab}, m.eng, y);
    dnnl::memory pad(m.pd.scratchpad_desc(), m.eng, scratch.data());
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, m.weights}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, pad}};
    if (m.bias_mem) args[DNNL_ARG_BIAS] = m.bias_mem;
    dnnl::stream s(m.eng);
    m.prim.execute(s, args);
    s.wait();
    return;
  }
#endif
  cpu::gemm(false, true, rows, n_, k_, 1.0f, x, k_, m.w.data(), k_, 0.0f, y, n_);
  if (!m.bias.empty()) cpu::bias_act(y, m.bias.data(), rows, n_, cpu::Act::kNone);
}

}  // namespace loom::rt

// kernels_test.cpp — every CUDA kernel of libloomrt against its CPU twin on the same random
// inputs; prints the largest difference of each. Exits 77 (skip) without a usable GPU.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "loom/rt/tensor/int8.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/kernels_cuda.hpp"
#include "loom/rt/tensor/tensor.hpp"

namespace {

using namespace loom::rt;

int failures = 0;

struct Dev {
  void* p;
  size_t bytes;
  template <typename T>
  explicit Dev(const std::vector<T>& host) : p(cuda::device_alloc(sizeof(T) * host.size())), bytes(sizeof(T) * host.size()) {
    cuda::to_device(p, host.data(), bytes);
  }
  ~Dev() { cuda::device_free(p, bytes); }
  template <typename T>
  T* as() const { return static_cast<T*>(p); }
  template <typename T>
  std::vector<T> host() const {
    std::vector<T> v(bytes / sizeof(T));
    cuda::to_host(v.data(), p, bytes);
    return v;
  }
};

void report(const char* what, double worst, double tol) {
  bool ok = worst <= tol;
  std::printf("kernels_test: %-14s largest difference %.3g (tolerance %.1g) %s\n", what, worst, tol, ok ? "ok" : "FAIL");
  failures += !ok;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double w = 0;
  for (size_t i = 0; i < a.size(); ++i) w = std::fmax(w, std::fabs(a[i] - b[i]));
  return w;
}

}  // namespace

int main() {
  std::string why;
  if (!cuda::available(&why)) {
    std::printf("SKIP: no usable CUDA device (%s)\n", why.c_str());
    return 77;
  }
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> u(-1, 1);
  auto rand_vec = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = u(rng);
    return v;
  };
  const int m = 129, n = 67, k = 301;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      auto a = rand_vec(size_t{m} * k), b = rand_vec(size_t{k} * n), c = rand_vec(size_t{m} * n);
      Dev da(a), db(b), dc(c);
      cpu::gemm(ta, tb, m, n, k, 1.5f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.5f, c.data(), n);
      cuda::gemm(ta, tb, m, n, k, 1.5f, da.as<float>(), ta ? m : k, db.as<float>(), tb ? k : n, 0.5f, dc.as<float>(), n);
      std::string name = std::string("gemm ") + (ta ? "T" : "N") + (tb ? "T" : "N");
      report(name.c_str(), max_diff(c, dc.host<float>()), 1e-3);
    }
  {  // two threads at once (threads-as-ranks): each its own cuBLAS handle, the same products
    auto a = rand_vec(size_t{m} * k), b = rand_vec(size_t{k} * n), c0 = rand_vec(size_t{m} * n);
    std::vector<float> c = c0;
    cpu::gemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), n);
    double worst[2] = {0, 0};
    std::string errors[2];
    auto run = [&](int t) {
      try {
        Dev da(a), db(b), dc(c0);
        for (int rep = 0; rep < 50; ++rep)
          cuda::gemm(false, true, m, n, k, 1.0f, da.as<float>(), k, db.as<float>(), k, 0.0f, dc.as<float>(), n);
        worst[t] = max_diff(c, dc.host<float>());
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    };
    std::thread one(run, 0), two(run, 1);
    one.join();
    two.join();
    for (int t = 0; t < 2; ++t)
      if (!errors[t].empty()) std::printf("kernels_test: gemm from thread %d: %s\n", t, errors[t].c_str());
    report("gemm 2 threads", errors[0].empty() && errors[1].empty() ? std::fmax(worst[0], worst[1]) : INFINITY, 1e-3);
  }
  {  // batched, strided as attention's heads: 3 products of 40x24 by 24x40 inside wider rows
    const int count = 3, rows = 40, inner = 24, ld = count * inner;
    auto a = rand_vec(size_t{rows} * ld), c = rand_vec(size_t{count} * rows * rows);
    Dev da(a), dc(c);
    for (int i = 0; i < count; ++i)
      cpu::gemm(false, true, rows, rows, inner, 0.5f, a.data() + i * inner, ld, a.data() + i * inner, ld, 0.25f,
                c.data() + static_cast<size_t>(i) * rows * rows, rows);
    cuda::gemm_batched(false, true, rows, rows, inner, 0.5f, da.as<float>(), ld, inner, da.as<float>(), ld, inner, 0.25f,
                       dc.as<float>(), rows, int64_t{rows} * rows, count);
    report("gemm batched", max_diff(c, dc.host<float>()), 1e-3);
  }
  for (auto act : {cpu::Act::kNone, cpu::Act::kRelu, cpu::Act::kGelu}) {
    auto y = rand_vec(size_t{m} * n), bias = rand_vec(n);
    Dev dy(y), dbias(bias);
    cpu::bias_act(y.data(), bias.data(), m, n, act);
    cuda::bias_act(dy.as<float>(), dbias.as<float>(), m, n, act);
    report(act == cpu::Act::kNone ? "bias" : act == cpu::Act::kRelu ? "bias+relu" : "bias+gelu",
           max_diff(y, dy.host<float>()), 1e-6);
  }
  {
    auto dy = rand_vec(size_t{m} * n), y = rand_vec(size_t{m} * n);
    Dev ddy(dy), dyy(y);
    cpu::relu_backward(dy.data(), y.data(), int64_t{m} * n);
    cuda::relu_backward(ddy.as<float>(), dyy.as<float>(), int64_t{m} * n);
    report("relu backward", max_diff(dy, ddy.host<float>()), 0);
  }
  {
    auto dy = rand_vec(size_t{m} * n), db = rand_vec(n);
    Dev ddy(dy), ddb(db);
    cpu::bias_grad(dy.data(), db.data(), m, n);
    cuda::bias_grad(ddy.as<float>(), ddb.as<float>(), m, n);
    report("bias grad", max_diff(db, ddb.host<float>()), 1e-4);
  }
  {
    auto x = rand_vec(size_t{m} * n);
    std::vector<int32_t> labels(m);
    for (int i = 0; i < m; ++i) labels[i] = (i * 7) % n;
    std::vector<float> d(x.size());
    Dev dx(x), dl(labels), dd(d);
    double loss = cpu::softmax_xent(x.data(), labels.data(), d.data(), m, n);
    double dloss = cuda::softmax_xent(dx.as<float>(), dl.as<int32_t>(), dd.as<float>(), m, n);
    report("xent loss", std::fabs(loss - dloss), 1e-5);
    report("xent grad", max_diff(d, dd.host<float>()), 1e-6);
    std::vector<int32_t> p(m), out(m);
    Dev dout(out);
    cpu::argmax_rows(x.data(), m, n, p.data());
    cuda::argmax_rows(dx.as<float>(), m, n, dout.as<int32_t>());
    auto got = dout.host<int32_t>();
    int wrong = 0;
    for (int i = 0; i < m; ++i) wrong += got[i] != p[i];
    report("argmax", wrong, 0);
  }
  // Mixed precision: GEMMs on tensor cores (operands rounded by cuBLAS) against the CPU's GEMM of
  // the rounded operands (exact products, fp32 sums in another order), then back to plain fp32.
  for (int low : {0, 1}) {
    auto a = rand_vec(size_t{m} * k), b = rand_vec(size_t{k} * n), c = rand_vec(size_t{m} * n);
    Dev da(a), db(b), dc(c);
    for (auto* v : {&a, &b})
      for (auto& x : *v) x = low ? bf16_to_float(float_to_bf16(x)) : half_to_float(float_to_half(x));
    cpu::gemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), n);
    cuda::set_gemm_precision(low);
    cuda::gemm(false, true, m, n, k, 1.0f, da.as<float>(), k, db.as<float>(), k, 0.0f, dc.as<float>(), n);
    cuda::set_gemm_precision(-1);
    report(low ? "gemm bf16 TC" : "gemm fp16 TC", max_diff(c, dc.host<float>()), 1e-3);
  }
  {  // the rounding, a gradient's pass (with an overflow) and the gradient exchange's packing: exact
    auto x = rand_vec(4099);
    x[17] = 3e4f;  // times the loss scale 2^16: beyond fp16, so inf
    for (int bf16 : {0, 1}) {
      std::vector<float> want = x, flag{0};
      Dev dx(x), dflag(flag);
      cuda::round_low(dx.as<float>(), static_cast<int64_t>(x.size()), bf16);
      for (auto& v : want) v = bf16 ? bf16_to_float(float_to_bf16(v)) : half_to_float(float_to_half(v));
      report(bf16 ? "round bf16" : "round fp16", max_diff(want, dx.host<float>()), 0);
      Dev dg(x);
      const float scale = bf16 ? 1.0f : 65536.0f;
      cuda::amp_grad(dg.as<float>(), static_cast<int64_t>(x.size()), scale, bf16, dflag.as<float>());
      std::vector<float> g = dg.host<float>(), grad_want = x;
      for (auto& v : grad_want) v = bf16 ? bf16_to_float(float_to_bf16(v)) : half_to_float(float_to_half(v * scale)) * (1.0f / scale);
      int mismatched = 0;
      for (size_t i = 0; i < g.size(); ++i) mismatched += !(g[i] == grad_want[i] || (std::isinf(g[i]) && std::isinf(grad_want[i])));
      report(bf16 ? "amp grad bf16" : "amp grad fp16", mismatched, 0);
      report(bf16 ? "amp flag bf16" : "amp flag fp16", std::fabs(dflag.host<float>()[0] - (bf16 ? 0.0f : 1.0f)), 0);
    }
    std::vector<float> scaled(x.size()), back(x.size());
    std::vector<uint16_t> halves(x.size()), want_h(x.size());
    Dev dx(x), ds(scaled), dh(halves), db(back);
    cuda::scale_copy(ds.as<float>(), dx.as<float>(), 0.3f, static_cast<int64_t>(x.size()));
    cuda::to_half(dh.as<uint16_t>(), dx.as<float>(), static_cast<int64_t>(x.size()));
    cuda::from_half(db.as<float>(), dh.as<uint16_t>(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) scaled[i] = 0.3f * x[i], want_h[i] = float_to_half(x[i]);
    halves_to_floats(want_h.data(), back.data(), back.size());
    report("pack scale", max_diff(scaled, ds.host<float>()), 0);
    report("pack fp16", static_cast<double>(dh.host<uint16_t>() != want_h), 0);
    report("unpack fp16", max_diff(back, db.host<float>()), 0);
  }
  // The int8 linear layer (cuBLASLt) against the CPU's exact reference, for the three outputs.
  for (auto [m, n, k] : std::vector<std::tuple<int, int, int>>{{37, 53, 128}, {256, 512, 784}, {8, 10, 512}, {3, 5, 7}}) {
    std::mt19937 rng(11);
    std::vector<uint8_t> x(static_cast<size_t>(m) * k);
    std::vector<int8_t> w(static_cast<size_t>(n) * k);
    for (auto& v : x) v = static_cast<uint8_t>(rng() % (int8::kActMax + 1));
    for (auto& v : w) v = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
    std::vector<int32_t> rowsum(static_cast<size_t>(n), 0);
    for (int j = 0; j < n; ++j)
      for (int t = 0; t < k; ++t) rowsum[static_cast<size_t>(j)] += w[static_cast<size_t>(j) * k + t];
    const int zp = 3;
    int8::Epilogue e;
    for (int j = 0; j < n; ++j) e.scale.push_back(2e-3f * (1 + j % 5)), e.bias.push_back(0.1f * (j % 3) - 0.1f);
    e.relu = true;
    Dev dx(x), dw(w), drs(rowsum), dscale(e.scale), dbias(e.bias);
    const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    for (int kind = 0; kind < 3; ++kind) {
      e.out = kind == 0 ? int8::Out::kS32 : kind == 1 ? int8::Out::kF32 : int8::Out::kU8;
      int8::Linear ref(n, k, w.data(), zp, e);
      const size_t esize = kind == 2 ? 1 : 4;
      std::vector<uint8_t> want(static_cast<size_t>(m) * n * esize), got(want.size());
      ref.run_reference(x.data(), m, want.data());
      Dev dy(got);
      cuda::int8_linear(m, n, k, dx.as<int8_t>(), zp, dw.as<int8_t>(), drs.as<int32_t>(), dscale.as<float>(),
                        dbias.as<float>(), true, kind, 0, int8::kActMax, dy.as<void>());
      got = dy.host<uint8_t>();
      double worst = 0;
      for (size_t i = 0; i < static_cast<size_t>(m) * n; ++i) {
        double a = 0, b = 0;
        if (kind == 0) a = reinterpret_cast<int32_t*>(want.data())[i], b = reinterpret_cast<int32_t*>(got.data())[i];
        if (kind == 1) a = reinterpret_cast<float*>(want.data())[i], b = reinterpret_cast<float*>(got.data())[i];
        if (kind == 2) a = want[i], b = got[i];
        worst = std::max(worst, std::fabs(a - b) / (kind == 1 ? 1 + std::fabs(a) : 1));
      }
      const std::string name = "int8 " + shape + (kind == 0 ? " s32" : kind == 1 ? " f32" : " u8") +
                               (cuda::int8_used_cublaslt() ? " (cuBLASLt)" : " (plain kernel)");
      report(name.c_str(), worst, kind == 0 ? 0 : kind == 1 ? 1e-5 : 1);
    }
  }
  cuda::synchronize();
  std::printf("kernels_test: %s\n", failures ? "FAILED" : "all kernels match the CPU");
  return failures ? 1 : 0;
}

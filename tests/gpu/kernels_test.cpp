// kernels_test.cpp — every CUDA kernel of libloomrt against its CPU twin on the same random
// inputs; prints the largest difference of each. Exits 77 (skip) without a usable GPU.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/kernels_cuda.hpp"

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
  cuda::synchronize();
  std::printf("kernels_test: %s\n", failures ? "FAILED" : "all kernels match the CPU");
  return failures ? 1 : 0;
}

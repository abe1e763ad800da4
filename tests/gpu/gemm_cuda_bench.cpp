// gemm_cuda_bench.cpp — the GEMMs Loom runs on a GPU, timed at a GPT's shapes: fp32
// (cublasSgemm, TF32 off), fp16 and bf16 on tensor cores (cuda::gemm after
// set_gemm_precision: fp32 operands rounded by cuBLAS, fp32 accumulation), and INT8
// (cuda::int8_linear: cuBLASLt's int8 tensor-core GEMM, int32 accumulation). Each shape is
// Y[m, n] = X[m, k] W[n, k]^T, a Linear layer's forward at m tokens. One JSON line per shape
// and precision: {"m","n","k","precision","ms","tflops","cublaslt"}. tests/gpu/gemm_peer.py runs
// this program and torch.matmul at the same shapes on the same GPU and prints the ratios.
// Usage: gemm_cuda_bench [--tokens M] [--embd C] [--vocab V] [--reps R]. Exits 77 without a GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "loom/rt/tensor/kernels_cuda.hpp"

namespace {

using namespace loom::rt;

struct Shape {
  int m, n, k;
  const char* layer;
};

// The median of `reps` timed runs of `run` (each `inner` calls, synchronized), in ms per call.
template <typename F>
double median_ms(F&& run, int reps, int inner) {
  run();  // warm-up: handles, workspaces, the heuristics' first choice
  cuda::synchronize();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < inner; ++i) run();
    cuda::synchronize();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / inner);
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

void print(const Shape& s, const char* precision, double ms, bool lt) {
  const double tflops = 2.0 * s.m * s.n * s.k / (ms * 1e-3) / 1e12;
  std::printf("{\"layer\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"precision\":\"%s\",\"ms\":%.4f,\"tflops\":%.2f,\"cublaslt\":%s}\n",
              s.layer, s.m, s.n, s.k, precision, ms, tflops, lt ? "true" : "false");
  std::fflush(stdout);
}

int arg(int argc, char** argv, const char* name, int def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (!cuda::available(&why)) {
    std::printf("SKIP: no usable CUDA device (%s)\n", why.c_str());
    return 77;
  }
  const int m = arg(argc, argv, "--tokens", 8192), c = arg(argc, argv, "--embd", 768);
  const int vocab = arg(argc, argv, "--vocab", 50304), reps = arg(argc, argv, "--reps", 7);
  const std::vector<Shape> shapes{{m, 3 * c, c, "attn.c_attn"}, {m, c, c, "attn.c_proj"}, {m, 4 * c, c, "mlp.c_fc"},
                                  {m, c, 4 * c, "mlp.c_proj"}, {m, vocab, c, "lm_head"}};
  size_t most = 0;
  for (const auto& s : shapes) most = std::max(most, size_t(s.m) * s.k + size_t(s.n) * s.k + size_t(s.m) * s.n);
  // Random-looking, non-zero data (zeros run faster than real data on tensor cores).
  std::vector<float> host(most);
  for (size_t i = 0; i < most; ++i) host[i] = static_cast<float>((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
  auto* buf = static_cast<float*>(cuda::device_alloc(most * sizeof(float)));
  cuda::to_device(buf, host.data(), most * sizeof(float));
  std::vector<int8_t> host8(most);
  for (size_t i = 0; i < most; ++i) host8[i] = static_cast<int8_t>((i * 2654435761u) % 255 - 127);
  auto* buf8 = static_cast<int8_t*>(cuda::device_alloc(most));
  cuda::to_device(buf8, host8.data(), most);
  auto* acc = static_cast<int32_t*>(cuda::device_alloc(size_t(m) * std::max(vocab, 4 * c) * sizeof(int32_t)));
  std::vector<int32_t> rowsum(std::max(vocab, 4 * c), 0);
  auto* d_rowsum = static_cast<int32_t*>(cuda::device_alloc(rowsum.size() * sizeof(int32_t)));
  cuda::to_device(d_rowsum, rowsum.data(), rowsum.size() * sizeof(int32_t));

  for (const auto& s : shapes) {
    const float* x = buf;
    const float* w = buf + size_t(s.m) * s.k;
    float* y = buf + size_t(s.m) * s.k + size_t(s.n) * s.k;
    const int inner = std::max(1, static_cast<int>(2e11 / (2.0 * s.m * s.n * s.k)));  // ~0.2 TFLOP a timing
    const struct {
      const char* name;
      int low;
    } modes[] = {{"fp32", -1}, {"fp16", 0}, {"bf16", 1}};
    for (const auto& mode : modes) {
      cuda::set_gemm_precision(mode.low);
      const double ms = median_ms([&] { cuda::gemm(false, true, s.m, s.n, s.k, 1, x, s.k, w, s.k, 0, y, s.n); }, reps,
                                  mode.low < 0 ? std::max(1, inner / 8) : inner);
      print(s, mode.name, ms, false);
    }
    cuda::set_gemm_precision(-1);
    const int8_t* x8 = buf8;
    const int8_t* w8 = buf8 + size_t(s.m) * s.k;
    const double ms = median_ms(
        [&] { cuda::int8_linear(s.m, s.n, s.k, x8, 0, w8, d_rowsum, nullptr, nullptr, false, 0, 0, 0, acc); }, reps,
        inner);
    print(s, "int8", ms, cuda::int8_used_cublaslt());
  }
  cuda::device_free(d_rowsum, rowsum.size() * sizeof(int32_t));
  cuda::device_free(acc, size_t(m) * std::max(vocab, 4 * c) * sizeof(int32_t));
  cuda::device_free(buf8, most);
  cuda::device_free(buf, most * sizeof(float));
  return 0;
}

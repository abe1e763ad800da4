// bench_gpt.cpp — loom-bench train --model gpt: loom-train's GPT against the same model in
// PyTorch (tests/parity/gpt_parity.py's module, same shape, AdamW, batch and threads, windows of
// the same text), on the CPU or (--device cuda) both on the GPU, and the GFLOP/s reached against
// the GEMM library's own on the model's GEMM shapes (cblas_sgemm; cuBLAS's SGEMM on the GPU).
// --precision fp16|bf16 (GPU): loom-train's tensor-core GEMMs against torch.autocast, and the
// model FLOP rate as a fraction of cuBLAS's own tensor-core rate on 4096^3 GEMMs (MFU).
// Defaults: context 64, 4 layers, 4 heads, width 128, batch 32, 2 threads.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "loom/rt/error.hpp"
#include "loom/rt/tensor/kernels.hpp"
#ifdef LOOM_HAVE_CUDA
#include "loom/rt/tensor/kernels_cuda.hpp"
#endif
#include "loom/rt/train/trainer.hpp"
#include "bench_args.hpp"
#include "progress.hpp"
#include "python_peer.hpp"
#include "sgemm_peer.hpp"

namespace {

const char* kTorchGpt = R"PY(
import math, sys, time
import torch
from torch import nn
path, T, L, H, C, B, threads, steps = sys.argv[1], *[int(v) for v in sys.argv[2:9]]
dev, prec, nv = sys.argv[9], sys.argv[10], int(sys.argv[11])
torch.set_num_threads(threads); torch.manual_seed(1); torch.backends.cuda.matmul.allow_tf32 = False
low = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(prec)  # torch.autocast, as AMP users run it
scaler = torch.cuda.amp.GradScaler(enabled=prec == "fp16")
if path.startswith("tokens:"):  # llm.c's token files (GPT-2's uint16, or Llama 3's uint32), as loom-train reads them
    import glob, numpy as np
    parts = []
    for f in sorted(glob.glob(path[7:])):
        head = np.fromfile(f, dtype=np.int32, count=256)
        wide = head[0] == 20240801
        parts.append(np.fromfile(f, dtype=np.uint32 if wide else np.uint16, offset=1024)[: int(head[2])].astype(np.int64))
    ids = torch.from_numpy(np.concatenate(parts)).to(dev)
else:  # a text: its distinct bytes are the vocabulary, the first 90% trains
    data = open(path, "rb").read()
    vocab = sorted(set(data)); index = {b: i for i, b in enumerate(vocab)}; nv = len(vocab)
    ids = torch.tensor([index[b] for b in data[: len(data) * 9 // 10]], dtype=torch.long, device=dev)
class Attn(nn.Module):
    def __init__(s):
        super().__init__(); s.c_attn = nn.Linear(C, 3 * C); s.c_proj = nn.Linear(C, C)
    def forward(s, x):
        b, t, c = x.shape
        q, k, v = [z.view(b, t, H, c // H).transpose(1, 2) for z in s.c_attn(x).split(c, dim=2)]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // H)
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool, device=dev), 1), float("-inf")).softmax(-1)
        return s.c_proj((att @ v).transpose(1, 2).reshape(b, t, c))
class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln_1, s.attn, s.ln_2 = nn.LayerNorm(C), Attn(), nn.LayerNorm(C)
        s.c_fc, s.c_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
    def forward(s, x):
        x = x + s.attn(s.ln_1(x))
        return x + s.c_proj(nn.functional.gelu(s.c_fc(s.ln_2(x))))
class Gpt(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(nv, C), nn.Embedding(T, C)
        s.h = nn.ModuleList([Block() for _ in range(L)]); s.ln_f = nn.LayerNorm(C)
        s.lm_head = nn.Linear(C, nv, bias=False)
    def forward(s, idx):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1], device=dev))
        for blk in s.h: x = blk(x)
        return s.lm_head(s.ln_f(x))
m = Gpt().to(dev); opt = torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.0)
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
def run(n):
    t0 = time.perf_counter()
    for _ in range(n):
        s = torch.randint(0, len(ids) - T - 1, (B,)).tolist()
        x = torch.stack([ids[i:i + T] for i in s]); y = torch.stack([ids[i + 1:i + T + 1] for i in s])
        opt.zero_grad()
        with torch.autocast(dev, dtype=low, enabled=low is not None):
            loss = nn.functional.cross_entropy(m(x).view(-1, nv), y.view(-1))
        scaler.scale(loss).backward()
        scaler.step(opt); scaler.update()
    sync()
    return time.perf_counter() - t0
run(5); sync()
print(steps * B / run(steps))
)PY";

// One training step's GEMMs (forward, weight gradient and input gradient of every linear layer)
// through `gemm`, on buffers a, w, y of buffer_floats(...) floats each; GFLOP/s over 20 steps.
size_t buffer_floats(int n, int c, int vocab) {
  // activations n x (in or out), weights out x in: in <= 4c, out <= max(4c, vocab)
  const int widest = std::max(4 * c, vocab);
  return static_cast<size_t>(std::max(n, 4 * c)) * widest;
}

template <class Gemm, class Sync>
double step_gemm_gflops(int n, int c, int vocab, int layers, const float* a, const float* w, float* y, Gemm gemm,
                        Sync sync) {
  struct Shape { int out, in; };
  const std::vector<Shape> shapes{{3 * c, c}, {c, c}, {4 * c, c}, {c, 4 * c}};
  double flops = 0;
  auto step = [&] {
    flops = 0;
    for (int l = 0; l <= layers; ++l)
      for (const Shape& s : l < layers ? shapes : std::vector<Shape>{{vocab, c}}) {
        gemm(false, true, n, s.out, s.in, 1, a, s.in, w, s.in, 0, y, s.out);
        gemm(true, false, s.out, s.in, n, 1, a, s.out, a, s.in, 0, y, s.in);
        gemm(false, false, n, s.in, s.out, 1, a, s.out, w, s.in, 0, y, s.in);
        flops += 6.0 * n * s.out * s.in;
      }
  };
  for (int i = 0; i < 3; ++i) step();
  sync();
  const int reps = 20;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) step();
  sync();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return flops * reps / s / 1e9;
}

// The GEMM library's own rate: on the CPU the faster of OpenBLAS's cblas_sgemm and oneDNN's
// dnnl_sgemm (where built; it is faster on AVX-512, and loom-train's default there), named in
// *which; on the GPU cuBLAS's SGEMM.
// With mixed precision (`low` 0: fp16, 1: bf16) on the GPU: cuBLAS on tensor cores, as loom-train
// runs it (cuda::set_gemm_precision).
double sgemm_gflops(int n, int c, int vocab, int layers, int threads, bool gpu, int low, std::string* which) {
  using namespace loom::rt;
  const size_t floats = buffer_floats(n, c, vocab);
  if (gpu) {
#ifdef LOOM_HAVE_CUDA
    float* buf = static_cast<float*>(cuda::device_alloc(3 * floats * sizeof(float)));
    cuda::fill(buf, 0.01f, static_cast<int64_t>(3 * floats));
    cuda::set_gemm_precision(low);
    const double r = step_gemm_gflops(n, c, vocab, layers, buf, buf + floats, buf + 2 * floats, cuda::gemm, cuda::synchronize);
    cuda::set_gemm_precision(-1);
    cuda::device_free(buf, 3 * floats * sizeof(float));
    return r;
#else
    throw Error("this build of Loom has no CUDA support");
#endif
  }
  std::vector<float> a(floats, 0.01f), w(floats, 0.02f), y(floats);
  return best_cpu_sgemm(
      threads, [&] { return step_gemm_gflops(n, c, vocab, layers, a.data(), w.data(), y.data(), cpu::gemm, [] {}); }, which);
}

// The tensor cores' rate as cuBLAS reaches it: 4096^3 GEMMs (fp32 tensors, FAST_16F/16BF), the
// measured peak that the model's FLOP rate is a fraction of (MFU).
double tensor_core_gflops(int low) {
#ifdef LOOM_HAVE_CUDA
  using namespace loom::rt;
  const int d = 4096;
  const size_t floats = size_t{d} * d;
  float* buf = static_cast<float*>(cuda::device_alloc(3 * floats * sizeof(float)));
  cuda::fill(buf, 0.01f, static_cast<int64_t>(3 * floats));
  cuda::set_gemm_precision(low);
  auto run = [&](int reps) {
    for (int i = 0; i < reps; ++i) cuda::gemm(false, false, d, d, d, 1, buf, d, buf + floats, d, 0, buf + 2 * floats, d);
    cuda::synchronize();
  };
  run(3);
  const auto t0 = std::chrono::steady_clock::now();
  run(20);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cuda::set_gemm_precision(-1);
  cuda::device_free(buf, 3 * floats * sizeof(float));
  return 2.0 * d * d * d * 20 / s / 1e9;
#else
  (void)low;
  throw loom::rt::Error("this build of Loom has no CUDA support");
#endif
}

int usage() {
  std::fprintf(stderr,
               "usage: loom-bench train --model gpt [--data text:FILE | tokens:FILE-OR-GLOB [--vocab N]] [--steps N] [--batch B] [--threads T] [--context T]\n"
               "                        [--n-layer L] [--n-head H] [--n-embd C] [--device cpu|cuda] [--precision fp32|fp16|bf16]\n"
               "                        [--attention auto|full|flash] [--format text|json]\n");
  return 2;
}

}  // namespace

int bench_train_gpt(int argc, char** argv) {
  loom::rt::TrainConfig c;
  c.model = loom::rt::ModelKind::kGpt;
  c.text_path = "/usr/share/common-licenses/GPL-3";
  c.context = 64;
  c.gpt_layers = 4;
  c.heads = 4;
  c.embd = 128;
  c.global_batch = 32;
  c.threads = 2;
  c.steps = 60;
  c.optim.kind = loom::rt::OptimKind::kAdamw;
  c.lr = 3e-4f;
  c.device = loom::rt::DeviceChoice::kCpu;
  c.evaluate = false;
  c.log_every = 1 << 30;
  std::string format = "text";
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const std::string v = argv[++i];
    if (a == "--model") { if (v != "gpt") return usage(); }
    else if (a == "--data" && v.rfind("text:", 0) == 0) c.text_path = v.substr(5), c.token_files.clear();
    else if (a == "--data" && v.rfind("tokens:", 0) == 0) c.token_files = v.substr(7), c.text_path.clear();
    else if (a == "--vocab") c.vocab = bench_int(a, v);
    else if (a == "--steps") c.steps = bench_whole(a, v, 1);
    else if (a == "--batch") c.global_batch = bench_int(a, v);
    else if (a == "--threads") c.threads = bench_int(a, v);
    else if (a == "--context") c.context = bench_int(a, v);
    else if (a == "--n-layer") c.gpt_layers = bench_int(a, v);
    else if (a == "--n-head") c.heads = bench_int(a, v);
    else if (a == "--n-embd") c.embd = bench_int(a, v);
    else if (a == "--format") format = v;
    else if (a == "--device" && (v == "cpu" || v == "cuda")) c.device = loom::parse_choice<loom::rt::DeviceChoice>(v);
    else if (a == "--precision" && (v == "fp32" || v == "fp16" || v == "bf16")) c.precision = loom::parse_choice<loom::rt::Precision>(v);
    else if (a == "--attention" && (v == "auto" || v == "full" || v == "flash")) c.attention = loom::parse_choice<loom::rt::Attention>(v);
    else return usage();
  }
  if (c.precision != loom::rt::Precision::kFp32 && c.device != loom::rt::DeviceChoice::kCuda) {
    std::fprintf(stderr, "loom-bench train: --precision %s is for --device cuda (the CPU emulates it by rounding: there "
                         "is no speed to measure)\n", loom::word_of(c.precision));
    return 2;
  }
  const int low = c.precision == loom::rt::Precision::kFp16 ? 0 : c.precision == loom::rt::Precision::kBf16 ? 1 : -1;
  try {
    bench_progress("loom-train gpt, " + std::to_string(c.steps) + " steps");
    const loom::rt::TrainResult r = loom::rt::train(c, [](const std::string&) {});
    const bool gpu = c.device == loom::rt::DeviceChoice::kCuda;
    std::string gemm_name = !gpu ? "cblas_sgemm and dnnl_sgemm" : low < 0 ? "cuBLAS SGEMM"
                            : std::string("cuBLAS GemmEx on tensor cores (FAST_") + (low ? "16BF)" : "16F)");
    bench_progress(gemm_name + " at the model's GEMM shapes");
    // The vocabulary: --vocab for token files; for a text, its distinct bytes (as loom-train and
    // the peer both build it).
    int vocab = c.token_files.empty() ? 0 : c.vocab;
    std::FILE* f = c.token_files.empty() ? std::fopen(c.text_path.c_str(), "rb") : nullptr;
    bool seen[256] = {false};
    for (int ch; f && (ch = std::fgetc(f)) != EOF;) vocab += !seen[ch], seen[ch] = true;
    if (f) std::fclose(f);
    const double peak = sgemm_gflops(c.global_batch * c.context, c.embd, vocab, c.gpt_layers, c.threads, gpu, low, &gemm_name);
    const double tc_peak = low >= 0 ? tensor_core_gflops(low) : 0;
    bench_progress("the PyTorch peer, " + std::to_string(c.steps) + " steps");
    std::string setup;
    const double torch = python_best_figure(
        kTorchGpt,
        {c.token_files.empty() ? c.text_path : "tokens:" + c.token_files, std::to_string(c.context), std::to_string(c.gpt_layers), std::to_string(c.heads), std::to_string(c.embd),
         std::to_string(c.global_batch), std::to_string(c.threads), std::to_string(c.steps), loom::word_of(c.device), loom::word_of(c.precision),
         std::to_string(vocab)},
        &setup);
    const double ratio = torch > 0 ? r.samples_per_s / torch : 0;
    const double tokens = r.samples_per_s * c.context;
    if (format == "json") {
      std::printf("{\"bench\":\"train\",\"model\":\"gpt\",\"device\":\"%s\",\"vocab\":%d,\"context\":%d,\"layers\":%d,\"heads\":%d,\"embd\":%d,\"batch\":%d,"
                  "\"threads\":%d,\"steps\":%lld,\"loom_tokens_per_s\":%.1f,\"torch_tokens_per_s\":%.1f,\"ratio\":%.3f,"
                  "\"loom_gflops\":%.2f,\"sgemm_gflops\":%.2f,\"sgemm_library\":\"%s\",\"torch_setup\":\"%s\","
                  "\"precision\":\"%s\",\"attention\":\"%s\",\"tensor_core_gflops\":%.1f,\"mfu\":%.4f}\n",
                  r.device.c_str(), vocab, c.context, c.gpt_layers, c.heads, c.embd, c.global_batch, c.threads,
                  static_cast<long long>(c.steps), tokens,
                  torch * c.context, ratio, r.gflops, peak, gemm_name.c_str(), setup.c_str(), loom::word_of(c.precision),
                  loom::word_of(c.attention), tc_peak,
                  tc_peak > 0 ? r.gflops / tc_peak : 0.0);
    } else {
      std::printf("loom-bench train: gpt on %s, vocabulary %d, context %d, %d layers, %d heads, width %d, batch %d, AdamW, "
                  "%d threads, %lld steps, attention %s\n",
                  r.device.c_str(), vocab, c.context, c.gpt_layers, c.heads, c.embd, c.global_batch, c.threads, static_cast<long long>(c.steps),
                  loom::word_of(c.attention));
      std::printf("  loom-train        %10.0f tokens/s  (%.1f GFLOP/s)\n", tokens, r.gflops);
      if (torch > 0)
        std::printf("  PyTorch peer      %10.0f tokens/s  (%s, torch.set_num_threads(%d), on %s) -> ratio %.2fx (target >= %s)\n",
                    torch * c.context, setup.c_str(), c.threads, loom::word_of(c.device), ratio, gpu ? "1.0x" : "1.5x");
      else
        std::printf("  PyTorch peer unavailable (/usr/bin/python3 or $LOOM_PYTHON with torch needed)\n");
      std::printf("  %s at the model's GEMM shapes %.1f GFLOP/s -> loom reaches %.0f%% of it\n", gemm_name.c_str(), peak,
                  100 * r.gflops / peak);
      if (tc_peak > 0)
        std::printf("  tensor cores (cuBLAS, 4096^3, %s) %.1f GFLOP/s -> MFU %.1f%%\n", loom::word_of(c.precision), tc_peak,
                    100 * r.gflops / tc_peak);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom-bench: %s\n", e.what());
    return 1;
  }
}

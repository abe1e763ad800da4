// bench_int8.cpp — `loom-bench gemm` (the int8 GEMM against sgemm, the same shape, one run) and
// `loom-bench infer` (a float model file against its INT8 version, rows per second).
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "best_of.hpp"
#include "bench_args.hpp"
#include "loom/rt/io/quant_model.hpp"
#include "loom/rt/tensor/int8.hpp"
#include "loom/rt/tensor/kernels.hpp"

namespace {

using loom::bench::best_of;

struct Args {
  std::vector<std::pair<std::string, std::string>> kv;
  bool ok = true;
  Args(int argc, char** argv) {
    for (int i = 2; i < argc; i += 2) {
      if (i + 1 >= argc || std::string(argv[i]).rfind("--", 0) != 0) ok = false;
      else kv.emplace_back(argv[i] + 2, argv[i + 1]);
    }
  }
};

int bad(const char* cmd, const std::string& what) {
  std::fprintf(stderr, "loom-bench %s: %s\n", cmd, what.c_str());
  return 2;
}

}  // namespace

int bench_gemm(int argc, char** argv) {
  int m = 1024, n = 1024, k = 1024, threads = 1, reps = 5;
  std::string format = "text";
  Args a(argc, argv);
  if (!a.ok) return bad("gemm", "options come as --name value pairs");
  for (const auto& [key, v] : a.kv) {
    if (key == "m") m = bench_int("--m", v);
    else if (key == "n") n = bench_int("--n", v);
    else if (key == "k") k = bench_int("--k", v);
    else if (key == "threads") threads = bench_int("--threads", v);
    else if (key == "reps") reps = bench_int("--reps", v);
    else if (key == "format") format = v;
    else return bad("gemm", "unknown option --" + key + " (--m --n --k --threads --reps --format)");
  }
  if (format != "text" && format != "json") return bad("gemm", "--format must be text or json");
  loom::rt::cpu::set_threads(threads);
  std::mt19937 rng(1);
  std::vector<float> af(static_cast<size_t>(m) * k), bf(static_cast<size_t>(n) * k), cf(static_cast<size_t>(m) * n);
  std::vector<uint8_t> a8(af.size());
  std::vector<int8_t> b8(bf.size());
  std::vector<int32_t> c32(cf.size());
  for (size_t i = 0; i < af.size(); ++i) a8[i] = static_cast<uint8_t>(rng() % 128), af[i] = a8[i];
  for (size_t i = 0; i < bf.size(); ++i) b8[i] = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128), bf[i] = b8[i];
  const double ts = best_of(reps, [&] {
    loom::rt::cpu::gemm(false, true, m, n, k, 1.0f, af.data(), k, bf.data(), k, 0.0f, cf.data(), n);
  });
  loom::rt::int8::Linear lin(n, k, b8.data(), 0, {});
  const double ti = best_of(reps, [&] { lin.run(a8.data(), m, c32.data()); });
  const double ops = 2.0 * m * n * k;
  const double sg = ops / ts / 1e9, ig = ops / ti / 1e9;
  if (format == "json")
    std::printf("{\"m\":%d,\"n\":%d,\"k\":%d,\"threads\":%d,\"sgemm\":\"%s\",\"int8\":\"%s\",\"sgemm_gflops\":%.1f,"
                "\"int8_gops\":%.1f,\"ratio\":%.2f}\n",
                m, n, k, threads, loom::rt::cpu::gemm_backend(), loom::rt::int8::backend(), sg, ig, ig / sg);
  else
    std::printf("gemm %dx%dx%d, %d thread(s): sgemm (%s) %.1f GFLOP/s, int8 u8s8s32 (%s) %.1f GOP/s, ratio %.2fx\n", m, n,
                k, threads, loom::rt::cpu::gemm_backend(), sg, loom::rt::int8::backend(), ig, ig / sg);
  return 0;
}

int bench_infer_onnx(const std::string& onnx, const std::string& h5, int batch, int seq, int int_max, int threads, int reps,
                     const std::string& format);

int bench_infer(int argc, char** argv) {
  std::string fp32, int8, onnx, format = "text";
  int batch = 256, threads = 1, reps = 20, seq = 128, int_max = 100;
  Args a(argc, argv);
  if (!a.ok) return bad("infer", "options come as --name value pairs");
  for (const auto& [key, v] : a.kv) {
    if (key == "model") fp32 = v;
    else if (key == "compare") int8 = v;
    else if (key == "batch") batch = bench_int("--batch", v);
    else if (key == "threads") threads = bench_int("--threads", v);
    else if (key == "reps") reps = bench_int("--reps", v);
    else if (key == "format") format = v;
    else if (key == "onnx") onnx = v;
    else if (key == "seq") seq = bench_int("--seq", v);
    else if (key == "int-max") int_max = bench_int("--int-max", v);
    else return bad("infer", "unknown option --" + key + " (--model --compare --onnx --batch --seq --int-max --threads --reps --format)");
  }
  if (format != "text" && format != "json") return bad("infer", "--format must be text or json");
  if (!onnx.empty()) {
    if (!int8.empty()) return bad("infer", "--onnx compares with --model FILE.h5, not --compare");
    try {
      return bench_infer_onnx(onnx, fp32, batch, seq, int_max, threads, reps, format);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loom-bench infer: %s\n", e.what());
      return 1;
    }
  }
  if (fp32.empty() || int8.empty()) return bad("infer", "needs --model FP32.h5 --compare INT8.h5, or --onnx FILE.onnx [--model FILE.h5]");
  try {
    loom::rt::cpu::set_threads(threads);
    loom::rt::Mlp m = loom::rt::load_mlp(fp32);
    const loom::rt::ModelFile f = loom::rt::load_model(int8);
    const loom::rt::QuantMlp q = loom::rt::load_quant_mlp(int8, f);
    if (q.widths().front() != m.widths().front())
      throw loom::rt::Error("the two models take different inputs");
    loom::rt::Tensor x = loom::rt::Tensor::empty({batch, m.widths().front()});
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = u(rng);
    const double tf = best_of(reps, [&] { m.forward(x); });
    const double ti = best_of(reps, [&] { q.forward(x); });
    const double rf = batch / tf, ri = batch / ti;
    if (format == "json")
      std::printf("{\"batch\":%d,\"threads\":%d,\"fp32_rows_per_s\":%.0f,\"int8_rows_per_s\":%.0f,\"ratio\":%.2f}\n", batch,
                  threads, rf, ri, ri / rf);
    else
      std::printf("infer batch %d, %d thread(s): fp32 %.0f rows/s, int8 %.0f rows/s, ratio %.2fx\n", batch, threads, rf, ri,
                  ri / rf);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom-bench infer: %s\n", e.what());
    return 1;
  }
}

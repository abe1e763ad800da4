// bench_onnx.cpp — `loom-bench infer --onnx FILE.onnx`: the runtime's ONNX executor timed on
// generated inputs (FP32 uniform, UINT8 pixels, INT64 ids below --int-max, masks of ones, boolean
// masks all false: PyTorch's key_padding_mask padding nothing), and with --model FILE.h5 side by side with the native MLP path on the same rows and threads
// (the HDF5 side includes the UINT8 preprocessing the served model does in decoding).
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "best_of.hpp"
#include "loom/rt/io/model_io.hpp"
#include "loom/rt/tensor/kernels.hpp"

#ifdef LOOM_HAVE_ONNX
#include "loom/rt/graph/graph.hpp"
#endif

namespace {

using loom::bench::best_of;

}  // namespace

int bench_infer_onnx(const std::string& onnx, const std::string& h5, int batch, int seq, int int_max, int threads, int reps,
                     const std::string& format) {
#ifndef LOOM_HAVE_ONNX
  (void)onnx, (void)h5, (void)batch, (void)seq, (void)int_max, (void)threads, (void)reps, (void)format;
  std::fprintf(stderr, "loom-bench infer: --onnx needs a build with ONNX (libonnx-dev)\n");
  return 1;
#else
  using loom::rt::DType;
  using loom::rt::Tensor;
  loom::rt::cpu::set_threads(threads);
  const auto g = loom::rt::graph::Model::load(onnx);
  std::mt19937 rng(1);
  std::vector<Tensor> in;
  for (const auto& ti : g.inputs()) {
    std::vector<int64_t> shape = ti.shape;
    for (size_t d = 0; d < shape.size(); ++d)
      if (shape[d] < 0) shape[d] = d == 0 ? batch : seq;
    Tensor t = Tensor::empty(shape, ti.dtype);
    const bool mask = ti.name.find("mask") != std::string::npos;
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (ti.dtype == DType::kF32) t.f32()[i] = std::uniform_real_distribution<float>(0, 1)(rng);
      else if (ti.dtype == DType::kU8) t.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 256);
      else if (ti.dtype == DType::kI64) t.data<int64_t>()[i] = mask ? 1 : static_cast<int64_t>(rng() % static_cast<unsigned>(int_max));
      else if (ti.dtype == DType::kBool) t.data<uint8_t>()[i] = 0;  // PyTorch's key_padding_mask: true pads
      else throw loom::rt::Error("input '" + ti.name + "': no generator for " + loom::rt::dtype_name(ti.dtype));
    }
    in.push_back(t);
  }
  auto run_onnx = [&] { g.run(in); };
  std::function<void()> run_h5;
  std::unique_ptr<loom::rt::Mlp> m;
  Tensor x;
  if (!h5.empty()) {
    m = std::make_unique<loom::rt::Mlp>(loom::rt::load_mlp(h5));
    if (in.size() != 1 || in[0].ndim() != 2 || in[0].dim(1) != m->widths().front())
      throw loom::rt::Error("--model and --onnx take different inputs");
    x = Tensor::empty(in[0].shape());
    run_h5 = [&] {
      const Tensor& px = in[0];
      float* dst = x.f32();
      const int64_t count = x.numel();
      if (px.dtype() == DType::kU8) {  // decode_input's preprocessing, as served
        const uint8_t* src = px.data<uint8_t>();
        for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<float>(src[i]) * (1.0f / 255.0f);
      } else {
        std::copy_n(px.f32(), count, dst);
      }
      m->forward(x);
    };
  }
  // Interleaved rounds, the best of each side: drift of the machine's speed hits both alike.
  double t_onnx = 1e30, t_h5 = run_h5 ? 1e30 : 0;
  for (int round = 0; round < 5; ++round) {
    t_onnx = std::min(t_onnx, best_of(std::max(1, reps / 5), run_onnx));
    if (run_h5) t_h5 = std::min(t_h5, best_of(std::max(1, reps / 5), run_h5));
  }
  const double r_onnx = batch / t_onnx, r_h5 = t_h5 > 0 ? batch / t_h5 : 0;
  if (format == "json") {
    std::printf("{\"batch\":%d,\"seq\":%d,\"threads\":%d,\"nodes\":%zu,\"folded\":%d,\"fused\":%d,\"onnx_ms\":%.3f,"
                "\"onnx_rows_per_s\":%.0f",
                batch, seq, threads, g.node_count(), g.folded(), g.fused(), t_onnx * 1e3, r_onnx);
    if (t_h5 > 0) std::printf(",\"hdf5_rows_per_s\":%.0f,\"onnx_over_hdf5\":%.3f", r_h5, r_onnx / r_h5);
    std::printf("}\n");
  } else {
    std::printf("infer %s batch %d (seq %d), %d thread(s): onnx %.3f ms, %.0f rows/s (%zu nodes, %d folded, %d fused)", onnx.c_str(),
                batch, seq, threads, t_onnx * 1e3, r_onnx, g.node_count(), g.folded(), g.fused());
    if (t_h5 > 0) std::printf("; hdf5 %.0f rows/s; onnx/hdf5 %.3fx", r_h5, r_onnx / r_h5);
    std::printf("\n");
  }
  return 0;
#endif
}

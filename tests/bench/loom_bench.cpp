// loom_bench.cpp — `loom-bench`: each subcommand measures Loom and a peer in the same run and
// prints both and the ratio. Built so far: `train` (loom-train's MLP against PyTorch 1.13 on the
// same model, batch, threads and data; achieved GFLOP/s against cblas_sgemm at the same shapes).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "config.h"
#ifdef LOOM_HAVE_MPI
#include <mpi.h>
#endif
#include "bench_args.hpp"
#include "progress.hpp"
#include "loom/rt/train/checkpoint_writer.hpp"
#include "loom/rt/comm/comm.hpp"
#if defined(LOOM_HAVE_NCCL) && defined(LOOM_HAVE_CUDA) && defined(LOOM_HAVE_MPI)
#include <cuda_runtime.h>

#include "loom/rt/comm/comm_nccl.hpp"
#endif
#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/nn/mlp.hpp"
#include "loom/rt/io/model_io.hpp"
#include "loom/rt/train/trainer.hpp"
#include "python_peer.hpp"
#include "sgemm_peer.hpp"

namespace {

// The PyTorch peer: the same MLP, SGD with momentum, batch and thread count, on Fashion-MNIST
// held as tensors; prints training samples per second (warm-up steps excluded).
const char* kTorchPeer = R"PY(
import gzip, sys, time
import numpy as np, torch
layers, batch, threads, steps = [int(v) for v in sys.argv[1].split(",")], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
dev = torch.device(sys.argv[6])
torch.set_num_threads(threads); torch.manual_seed(1)
raw = gzip.open(sys.argv[5] + "/train-images-idx3-ubyte.gz").read()
x = torch.from_numpy(np.frombuffer(raw, np.uint8, offset=16).reshape(-1, 784).astype(np.float32) / 255)
y = torch.from_numpy(np.frombuffer(gzip.open(sys.argv[5] + "/train-labels-idx1-ubyte.gz").read(), np.uint8, offset=8).astype(np.int64))
x, y = x.to(dev), y.to(dev)
mods = []
for i in range(len(layers) - 1):
    mods.append(torch.nn.Linear(layers[i], layers[i + 1]))
    if i + 2 < len(layers): mods.append(torch.nn.ReLU())
m = torch.nn.Sequential(*mods).to(dev)
opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
perm = torch.randperm(x.shape[0], device=dev)
def run(n, start):
    t = time.perf_counter()
    for s in range(start, start + n):
        idx = perm[(s * batch) % (x.shape[0] - batch):][:batch]
        opt.zero_grad(); torch.nn.functional.cross_entropy(m(x[idx]), y[idx]).backward(); opt.step()
    if dev.type == "cuda": torch.cuda.synchronize()
    return time.perf_counter() - t
run(20, 0)
print(steps * batch / run(steps, 20))
)PY";

}  // namespace

double python_figure(const char* script, const std::vector<std::string>& args, const char* env) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    // The peer runs with its libraries' defaults, except OpenBLAS's kernels for this CPU, which
    // it needs as much as Loom does (PyTorch's Linear layers are OpenBLAS's sgemm here).
    const char* set = std::getenv("LOOM_LIBRARY_ENV");
    if (set && std::strstr(set, "GOMP_SPINCOUNT")) unsetenv("GOMP_SPINCOUNT");
    if (*env) putenv(const_cast<char*>(env));
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    // LOOM_PYTHON: another interpreter with torch (the GPU machine's; run.sh points it at one
    // that does not see the bundle's LD_LIBRARY_PATH).
    const char* py = std::getenv("LOOM_PYTHON") ? std::getenv("LOOM_PYTHON") : "/usr/bin/python3";
    std::vector<char*> argv{const_cast<char*>("python3"), const_cast<char*>("-c"), const_cast<char*>(script)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(py, argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return std::strtod(out.c_str(), nullptr);
}

double python_best_figure(const char* script, const std::vector<std::string>& args, std::string* setup) {
  double best = -1;
  for (const char* env : {"", "OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1"}) {
    double v = python_figure(script, args, env);
    if (v > best) best = v, *setup = *env ? env : "default threads";
  }
  return best;
}

namespace {

double torch_samples_per_s(const std::string& layers, int batch, int threads, int steps, const std::string& data,
                           const std::string& device, std::string* setup) {
  return python_best_figure(kTorchPeer, {layers, std::to_string(batch), std::to_string(threads), std::to_string(steps), data, device},
                            setup);
}

// The GEMMs of one training step (forward, weight gradient, input gradient) through cpu::gemm.
double sgemm_gflops(const std::vector<int>& w, int batch) {
  using namespace loom::rt;
  int mx = *std::max_element(w.begin(), w.end());
  std::vector<float> a(static_cast<size_t>(batch) * mx, 0.01f), b(static_cast<size_t>(mx) * mx, 0.02f),
      c(static_cast<size_t>(std::max(batch, mx)) * mx);
  auto step = [&]() {
    for (size_t l = 0; l + 1 < w.size(); ++l) {
      int in = w[l], out = w[l + 1];
      cpu::gemm(false, true, batch, out, in, 1, a.data(), in, b.data(), in, 0, c.data(), out);
      cpu::gemm(true, false, out, in, batch, 1, a.data(), out, a.data(), in, 1, c.data(), in);
      cpu::gemm(false, false, batch, in, out, 1, a.data(), out, b.data(), in, 0, c.data(), in);
    }
  };
  for (int i = 0; i < 10; ++i) step();
  int reps = 200;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) step();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double flops = 0;
  for (size_t l = 0; l + 1 < w.size(); ++l) flops += 6.0 * batch * w[l] * w[l + 1];
  return flops * reps / s / 1e9;
}

#ifdef LOOM_HAVE_MPI

// loom-bench allreduce: Loom's ring allreduce (over MPI point-to-point) against MPI_Allreduce on
// the same ranks and data; busbw as nccl-tests define it (algbw * 2(p-1)/p). Results are
// checked against each other before timing.
// With --backend nccl, Loom's side is the NCCL communicator on GPU buffers (one GPU per rank).
int bench_allreduce(const std::vector<size_t>& sizes, int iters, const std::string& format, const std::string& backend,
                    bool flat) {
  MPI_Init(nullptr, nullptr);
  int rank = 0, p = 1, rc = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  // Refusals every rank reaches alike end cleanly (no MPI_Abort banner): one rank has nothing to
  // reduce (the bus bandwidth would be 0/0), and NCCL needs a GPU.
  std::string refused;
  if (p < 2) refused = "allreduce needs at least 2 ranks (mpirun -np 2 loom-bench allreduce, or srun -n 2)";
#if defined(LOOM_HAVE_NCCL) && defined(LOOM_HAVE_CUDA)
  int gpus_seen = 0;
  if (refused.empty() && backend == "nccl" && (cudaGetDeviceCount(&gpus_seen) != cudaSuccess || gpus_seen == 0))
    refused = "--backend nccl: no usable CUDA device on this node";
#endif
  if (!refused.empty()) {
    if (rank == 0) std::fprintf(stderr, "loom-bench: %s\n", refused.c_str());
    MPI_Finalize();
    return p < 2 ? 2 : 1;
  }
  try {
    loom::rt::Communicator ring(loom::rt::make_mpi_transport(), 60.0);
    // As loom-train does: hierarchical when the ranks span nodes evenly (--flat: one ring).
    ring.set_nodes(loom::rt::mpi_node_ids(), !flat);
    std::function<void(float*, size_t)> loom_allreduce = [&](float* h, size_t n) { ring.allreduce_sum(h, n); };
    std::string label = "loom ring";
#if defined(LOOM_HAVE_NCCL) && defined(LOOM_HAVE_CUDA)
    std::unique_ptr<loom::rt::NcclCommunicator> nccl;
    void* dev = nullptr;
    size_t dev_bytes = 0;
    if (backend == "nccl") {
      loom::rt::NcclCommunicator::select_device();  // the plugin's own GPU, else the node-local rank's
      nccl = loom::rt::NcclCommunicator::create(60.0);
      label = "loom nccl";
      loom_allreduce = [&](float* h, size_t n) {  // the data lives on the GPU; h is only for checking
        if (dev_bytes < n * sizeof(float)) {
          if (dev) cudaFree(dev);
          if (cudaMalloc(&dev, n * sizeof(float)) != cudaSuccess) throw loom::rt::Error("cudaMalloc failed");
          dev_bytes = n * sizeof(float);
          cudaMemcpy(dev, h, n * sizeof(float), cudaMemcpyHostToDevice);
          nccl->allreduce_sum(static_cast<float*>(dev), n);
          cudaMemcpy(h, dev, n * sizeof(float), cudaMemcpyDeviceToHost);
          return;
        }
        nccl->allreduce_sum(static_cast<float*>(dev), n);
      };
    }
#endif
    if (backend != "loom" && label == "loom ring") throw loom::rt::Error("--backend " + backend + ": not built (loom, nccl)");
    for (size_t bytes : sizes) {
      const size_t n = bytes / sizeof(float);
      std::vector<float> a(n), b(n);
      for (size_t i = 0; i < n; ++i) a[i] = b[i] = static_cast<float>((i * 31 + static_cast<size_t>(rank) * 7) % 101) * 0.01f;
      loom_allreduce(a.data(), n);
      MPI_Allreduce(MPI_IN_PLACE, b.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double worst = 0;
      for (size_t i = 0; i < n; ++i) worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])) / (std::fabs(b[i]) + 1e-6));
      double all_worst = 0;
      MPI_Allreduce(&worst, &all_worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (all_worst > 1e-5) {
        if (rank == 0) std::fprintf(stderr, "loom-bench: allreduce of %zu bytes differs from MPI_Allreduce by %.3g\n", bytes, all_worst);
        rc = 1;
      }
      // Each iteration timed on its own (the slowest rank's time) and the median kept: one stall
      // of a shared machine moves a mean of 5 by a fifth of the stall, the median not at all.
      auto time = [&](auto fn) {
        for (int i = 0; i < 2; ++i) fn();
        std::vector<double> times(static_cast<size_t>(iters));
        for (double& slowest : times) {
          MPI_Barrier(MPI_COMM_WORLD);
          double t0 = MPI_Wtime();
          fn();
          double t = MPI_Wtime() - t0;
          MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        }
        std::sort(times.begin(), times.end());
        return times[times.size() / 2];
      };
      double tl = time([&] { loom_allreduce(a.data(), n); });
      double tm = time([&] { MPI_Allreduce(MPI_IN_PLACE, b.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
      const double factor = 2.0 * (p - 1) / p;
      double loom_bw = bytes / tl * factor / 1e9, mpi_bw = bytes / tm * factor / 1e9;
      if (rank == 0) {
        if (format == "json")
          std::printf("{\"bench\":\"allreduce\",\"backend\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"loom_busbw_gbps\":%.3f,"
                      "\"mpi_busbw_gbps\":%.3f,\"ratio\":%.3f,\"max_rel_diff\":%.3g,\"loom_s\":%.6f,\"layout\":\"%s\"}\n",
                      backend.c_str(), p, bytes, loom_bw, mpi_bw, loom_bw / mpi_bw, all_worst, tl,
                      backend == "nccl" ? "nccl" : ring.describe().c_str());
        else
          std::printf("loom-bench allreduce: %d ranks, %10zu bytes: %s (%s) %7.3f GB/s busbw, peer MPI_Allreduce %7.3f GB/s, ratio %.2f\n",
                      p, bytes, label.c_str(), backend == "nccl" ? "nccl" : ring.describe().c_str(), loom_bw, mpi_bw, loom_bw / mpi_bw);
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom-bench: rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
#endif

// loom-bench checkpoint: a training state of N bytes (64 MiB tensors) written by Loom's
// checkpoint writer (HDF5, Fletcher32, fsync, rename) against `dd conv=fsync` of the same size
// into the same folder (best of `reps`). Then what --ckpt-async costs: the writer's copy of the
// state into its reused buffers (the first, into fresh ones, too), and end to end, the training
// time lost per checkpoint by loom-train's own loop (an AdamW MLP whose parameters and two
// moments make about N bytes, 25 steps, a checkpoint every 6 and the last, synchronous in both)
// against what a synchronous checkpoint costs the same loop.
int bench_checkpoint(size_t bytes, const std::string& dir, int reps, const std::string& format) {
  using Clock = std::chrono::steady_clock;
  auto secs = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  const size_t per = size_t{64} << 20, floats_total = bytes / sizeof(float);
  loom::rt::Checkpoint k;
  k.model_config = "{\"type\":\"bench\"}";
  k.train_config = "{}";
  k.state_json = "{\"step\":0}";
  for (size_t at = 0, i = 0; at < floats_total; ++i) {
    const size_t n = std::min(per / sizeof(float), floats_total - at);
    loom::rt::Tensor t = loom::rt::Tensor::empty({static_cast<int64_t>(n)});
    for (size_t j = 0; j < n; ++j) t.f32()[j] = static_cast<float>((j * 2654435761u) % 1000) * 1e-3f;
    k.params.emplace_back("t" + std::to_string(i), t);
    at += n;
  }
  auto clean = [](const std::string& d) {
    for (const auto& f : loom::rt::CheckpointWriter::list(d)) std::remove(f.second.c_str());
    rmdir(d.c_str());
  };
  const std::string file = dir + "/loom-bench-ckpt.h5", ddfile = dir + "/loom-bench-dd.bin";
  double best_loom = 1e30, best_dd = 1e30, best_copy = 1e30, first_copy = -1;
  {
    loom::rt::TrainConfig tc;
    tc.ckpt_dir = dir + "/loom-bench-async";
    tc.ckpt_async = true;
    tc.ckpt_keep = 1;
    tc.resume = "never";
    loom::rt::CheckpointState state;
    state.model_config = k.model_config;
    state.train_config = k.train_config;
    state.state_json = k.state_json;
    for (const auto& p : k.params) state.tensors.push_back({"params", p.first, p.second});
    {
      loom::rt::CheckpointWriter writer(tc, nullptr, [](const std::string&, const loom::LogFields&) {});
      for (int r = 0; r < reps + 1; ++r) {
        bench_progress("copying the state for an async checkpoint, " + std::to_string(r + 1) + " of " + std::to_string(reps + 1));
        auto t0 = Clock::now();
        writer.save(state, r + 1, /*sync=*/false);
        writer.wait_copied();  // at once: the whole copy, none of it hidden behind a training step
        const double copy = secs(t0);
        if (r == 0) first_copy = copy;
        else best_copy = std::min(best_copy, copy);
        writer.finish();
      }
    }
    clean(tc.ckpt_dir);
  }
  for (int r = 0; r < reps; ++r) {
    bench_progress("writing the checkpoint and the dd peer, " + std::to_string(r + 1) + " of " + std::to_string(reps));
    auto t0 = Clock::now();
    loom::rt::save_checkpoint(file, k);
    best_loom = std::min(best_loom, secs(t0));
    t0 = Clock::now();
    // The peer writes the same bytes: a copy of the file just written (still in the page cache),
    // not zeros, which a thin-provisioned disk may never store.
    const std::string cmd = "dd if='" + file + "' of='" + ddfile + "' bs=4M conv=fsync status=none";
    if (std::system(cmd.c_str()) != 0) throw loom::rt::Error("dd failed: " + cmd);
    best_dd = std::min(best_dd, secs(t0));
  }
  struct stat st {};
  const double file_bytes = stat(file.c_str(), &st) == 0 ? static_cast<double>(st.st_size) : static_cast<double>(bytes);
  std::remove(file.c_str());
  std::remove(ddfile.c_str());
  k = loom::rt::Checkpoint();

  // The training loop, three ways, best of `reps` each.
  // 12 bytes (weight, two moments) per parameter: 12 (W^2 + 794 W) ~= bytes.
  const int width = std::max(64, static_cast<int>((std::sqrt(794.0 * 794.0 + static_cast<double>(bytes) / 3.0) - 794.0) / 2));
  const int64_t steps = 25, every = 6, n_async = (steps - 1) / every, n_sync = n_async + 1;
  double loop[3] = {1e30, 1e30, 1e30};  // none, sync, async
  for (int r = 0; r < reps; ++r) {
    for (int mode = 0; mode < 3; ++mode) {
      bench_progress(std::string("training loop ") + (mode == 0 ? "without checkpoints" : mode == 1 ? "with sync checkpoints" : "with async checkpoints") +
                     ", " + std::to_string(r + 1) + " of " + std::to_string(reps));
      loom::rt::TrainConfig c;
      c.layers = {784, width, width, 10};
      c.optim.kind = loom::rt::OptimKind::kAdamw;
      c.lr = 1e-3f;
      c.global_batch = 32;
      c.steps = steps;
      // One core is left to the writer (as to data loading and I/O on a real node): on a machine
      // whose every core computes, a background write can only take compute time.
      c.threads = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()) - 1);
      c.device = loom::rt::DeviceChoice::kCpu;
      c.evaluate = false;
      c.log_every = 1000000;
      if (mode > 0) {
        c.ckpt_dir = dir + "/loom-bench-loop";
        c.ckpt_every = every;
        c.ckpt_keep = 1;
        c.ckpt_async = mode == 2;
        c.resume = "never";
      }
      auto res = loom::rt::train(c, [](const std::string&) {});
      loop[mode] = std::min(loop[mode], res.loop_seconds);
      if (mode > 0) clean(c.ckpt_dir);
    }
  }
  const double sync_lost = (loop[1] - loop[0]) / static_cast<double>(n_sync);
  const double async_lost = (loop[2] - loop[0] - sync_lost) / static_cast<double>(n_async);
  const double state_mib = 12.0 * (784.0 * width + double(width) * width + 10.0 * width) / 1048576.0;

  const double gib = static_cast<double>(bytes) / (1u << 30);
  const double loom_gbps = file_bytes / best_loom / 1e9, dd_gbps = file_bytes / best_dd / 1e9;
  if (format == "json")
    std::printf("{\"bench\":\"checkpoint\",\"bytes\":%zu,\"loom_write_gbps\":%.3f,\"dd_write_gbps\":%.3f,\"ratio\":%.3f,"
                "\"sync_write_s\":%.4f,\"async_copy_s\":%.4f,\"async_first_copy_s\":%.4f,\"loop_state_mib\":%.1f,"
                "\"loop_none_s\":%.4f,\"loop_sync_lost_s\":%.4f,\"loop_async_lost_s\":%.4f,\"async_lost_ratio\":%.4f}\n",
                bytes, loom_gbps, dd_gbps, loom_gbps / dd_gbps, best_loom, best_copy, first_copy, state_mib, loop[0],
                sync_lost, async_lost, async_lost / sync_lost);
  else
    std::printf("loom-bench checkpoint: %.2f GiB to %s: loom %.3f GB/s (%.2f s), peer dd conv=fsync %.3f GB/s, ratio %.2f\n"
                "loom-bench checkpoint: --ckpt-async copies the state in %.3f s (%.3f s the first time, into fresh buffers)\n"
                "loom-bench checkpoint: training loop (MLP 784,%d,%d,10 AdamW, %.0f MiB of state, %d threads, %lld steps, %lld checkpoints): "
                "%.2f s without checkpoints; a synchronous checkpoint costs it %.3f s, an asynchronous one %.3f s: %.3fx\n",
                gib, dir.c_str(), loom_gbps, best_loom, dd_gbps, loom_gbps / dd_gbps, best_copy, first_copy, width, width,
                state_mib, static_cast<int>(std::max(2u, std::thread::hardware_concurrency()) - 1),
                static_cast<long long>(steps), static_cast<long long>(n_sync), loop[0], sync_lost, async_lost,
                async_lost / sync_lost);
  return 0;
}

int usage(std::FILE* to = stderr) {
  std::fprintf(to,
               "usage: loom-bench train [--steps N] [--batch B] [--threads T] [--layers W,W,...] [--gemm auto|openblas|onednn] [--device cpu|cuda]\n"
               "                        [--data FASHION-MNIST-DIR]\n"
               "       loom-bench train --model gpt [--data text:FILE] [--steps N] [--batch B] [--threads T] [--context T] ...\n"
               "                        [--format text|json]\n"
               "       mpirun -np N loom-bench allreduce [--bytes N[,N...]] [--iters K] [--format text|json] [--backend loom|nccl] [--flat]\n"
               "       loom-bench checkpoint [--bytes N] [--dir D] [--reps R] [--format text|json]\n"
               "       loom-bench serve [--server PATH] [--seconds S] [--threads T] [--format text|json]\n"
               "       loom-bench generate --url HOST:PORT --model NAME [--concurrency N] [--requests R] [--prompt-len N]\n"
               "                  [--output-len N] [--shared-prefix N --prefix-share F] [--vocab V] [--seed S] [--format text|json]\n"
               "       loom-bench gemm [--m M] [--n N] [--k K] [--threads T] [--reps R] [--format text|json]\n"
               "       loom-bench infer --model FP32.h5 --compare INT8.h5 [--batch B] [--threads T] [--format text|json]\n"
               "       loom-bench pipeline --spec PIPELINE.yaml --addr HOST:PORT [--requests N] [--batch B] [--seq T]\n"
               "       loom-bench infer --onnx FILE.onnx [--model FILE.h5] [--batch B] [--seq T] [--int-max V] [--threads T]\n"
               "       loom-bench peer-env   (the settings a PyTorch peer runs with: OpenBLAS's kernels for this CPU)\n"
               "Any of them with --mllog FILE appends its figures to FILE as MLPerf-style :::MLLOG lines.\n");
  return 2;
}

}  // namespace

int bench_gemm(int argc, char** argv);
int bench_infer(int argc, char** argv);
int bench_train_gpt(int argc, char** argv);  // bench_gpt.cpp
#ifdef LOOM_BENCH_SERVE
int bench_serve(int argc, char** argv, const std::string& self);
int bench_pipeline(int argc, char** argv);
int bench_generate(int argc, char** argv);  // bench_generate.cpp
#endif

int bench_with_mllog(const std::string& path, const std::string& cmd, const std::function<int()>& run);

namespace {

int run_bench(int argc, char** argv);

// --mllog FILE (anywhere after the subcommand) is taken out here: the subcommand runs with
// --format json and its figures go to FILE as :::MLLOG events (bench_mllog.cpp).
// A bad option value (bench_args.hpp) is answered with its message and exit 2.
int run_checked(int argc, char** argv) {
  try {
    return run_bench(argc, argv);
  } catch (const BenchUsage& e) {
    std::fprintf(stderr, "loom-bench: %s\n", e.what());
    return 2;
  }
}

int main_with_mllog(int argc, char** argv) {
  std::vector<char*> args;
  std::string path;
  bool text = false;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (i >= 2 && a == "--mllog" && i + 1 < argc) {
      path = argv[++i];
      continue;
    }
    if (i >= 2 && a == "--format" && i + 1 < argc && std::string(argv[i + 1]) == "text") text = true;
    args.push_back(argv[i]);
  }
  if (path.empty()) return run_checked(argc, argv);
  if (text) {
    std::fprintf(stderr, "loom-bench: --mllog records the JSON figures: leave out --format text\n");
    return 2;
  }
  static char fmt[] = "--format", json[] = "json";
  args.push_back(fmt);
  args.push_back(json);
  args.push_back(nullptr);
  try {
    return bench_with_mllog(path, argv[1], [&] { return run_checked(static_cast<int>(args.size() - 1), args.data()); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom-bench: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // OpenMP waits that do not starve a busy node, those loom-serve sets for the inference
  // benchmarks and loom-train's for the rest; OpenBLAS kernels for this CPU.
  bool inference = false;
  for (const char* cmd : {"infer", "serve", "pipeline", "generate"}) inference = inference || (argc > 1 && std::strcmp(argv[1], cmd) == 0);
  loom::rt::cpu::settle_library_env(argv, inference ? loom::rt::cpu::kInferenceSpin : loom::rt::cpu::kTrainingSpin);
  return main_with_mllog(argc, argv);
}

namespace {

int run_bench(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    usage(stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("loom-bench (Loom) %s\n", PACKAGE_VERSION);
    return 0;
  }
  if (cmd == "gemm") return bench_gemm(argc, argv);
  if (cmd == "infer") return bench_infer(argc, argv);
  if (cmd == "peer-env") {  // for the scripts' own peers: what python_figure's peers get
    const char* core = std::getenv("OPENBLAS_CORETYPE");
    const char* set = std::getenv("LOOM_LIBRARY_ENV");
    if (core && set && std::strstr(set, "OPENBLAS_CORETYPE")) std::printf("OPENBLAS_CORETYPE=%s\n", core);
    return 0;
  }
  if (cmd == "pipeline") {
#ifdef LOOM_BENCH_SERVE
    try {
      return bench_pipeline(argc, argv);
    } catch (const BenchUsage&) {
      throw;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loom-bench pipeline: %s\n", e.what());
      return 1;
    }
#else
    std::fprintf(stderr, "loom-bench pipeline: this build has no gRPC\n");
    return 1;
#endif
  }
  if (cmd == "generate") {
#ifdef LOOM_BENCH_SERVE
    return bench_generate(argc, argv);
#else
    std::fprintf(stderr, "loom-bench generate: this build has no loom-serve (Boost.Beast missing)\n");
    return 1;
#endif
  }
  if (cmd == "serve") {
#ifdef LOOM_BENCH_SERVE
    try {
      char self[4096];
      const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
      return bench_serve(argc, argv, n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string(argv[0]));
    } catch (const BenchUsage&) {
      throw;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loom-bench serve: %s\n", e.what());
      return 1;
    }
#else
    std::fprintf(stderr, "loom-bench serve: this build has no loom-serve with gRPC (yaml-cpp, Boost.Beast or gRPC missing)\n");
    return 1;
#endif
  }
  if (cmd == "checkpoint") {
    size_t bytes = size_t{1} << 30;
    std::string dir = ".", format = "text";
    int reps = 2;
    for (int i = 2; i + 1 < argc; i += 2) {
      std::string a = argv[i], v = argv[i + 1];
      if (a == "--bytes") bytes = static_cast<size_t>(bench_whole(a, v, 1));
      else if (a == "--dir") dir = v;
      else if (a == "--reps") reps = bench_int(a, v);
      else if (a == "--format") format = v;
      else return usage();
    }
    if (bytes < (size_t{4} << 20)) {
      std::fprintf(stderr, "loom-bench: --bytes must be at least 4 MiB\n");
      return 2;
    }
    try {
      return bench_checkpoint(bytes, dir, reps, format);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loom-bench: %s\n", e.what());
      return 1;
    }
  }
  if (cmd == "allreduce") {
#ifdef LOOM_HAVE_MPI
    std::vector<size_t> sizes{1u << 20, 4u << 20, 16u << 20, 64u << 20};
    int iters = 10;
    std::string format = "text", backend = "loom";
    bool flat = false;
    for (int i = 2; i < argc; i += 2) {
      std::string a = argv[i];
      if (a == "--flat") {
        flat = true;
        --i;
        continue;
      }
      if (i + 1 >= argc) return usage();
      std::string v = argv[i + 1];
      if (a == "--bytes") sizes = bench_sizes(a, v);
      else if (a == "--iters") iters = bench_int(a, v);
      else if (a == "--format") format = v;
      else if (a == "--backend") backend = v;
      else return usage();
    }
    return bench_allreduce(sizes, iters, format, backend, flat);
#else
    std::fprintf(stderr, "loom-bench: allreduce needs a build with MPI\n");
    return 1;
#endif
  }
  if (cmd == "train")
    for (int i = 2; i + 1 < argc; ++i)
      if (std::string(argv[i]) == "--model" && std::string(argv[i + 1]) == "gpt") return bench_train_gpt(argc, argv);
  if (cmd != "train") {
    std::fprintf(stderr, "loom-bench: unknown or not yet built subcommand '%s'\n", cmd.c_str());
    return usage();
  }
  loom::rt::TrainConfig c;
  c.steps = 400;
  c.threads = 2;
  c.log_every = 1 << 30;
  c.device = loom::rt::DeviceChoice::kCpu;  // the CPU figure unless --device cuda asks (auto would pick a GPU unannounced)
  std::string format = "text", layers = "784,512,512,10";
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    std::string v = argv[++i];
    if (a == "--steps") c.steps = bench_whole(a, v, 1);
    else if (a == "--batch") c.global_batch = bench_int(a, v);
    else if (a == "--threads") c.threads = bench_int(a, v);
    else if (a == "--layers") layers = v;
    else if (a == "--format") format = v;
    else if (a == "--gemm" && (v == "auto" || v == "openblas" || v == "onednn")) c.gemm = loom::parse_choice<loom::rt::GemmChoice>(v);
    else if (a == "--device" && (v == "auto" || v == "cpu" || v == "cuda")) c.device = loom::parse_choice<loom::rt::DeviceChoice>(v);
    else if (a == "--data") c.data_dir = v;  // a Fashion-MNIST folder (the bundle's on the GPU machine)
    else return usage();
  }
  try {
    c.layers = loom::rt::parse_widths(layers);
    bench_progress("loom-train, " + std::to_string(c.steps) + " steps");
    loom::rt::TrainResult r = loom::rt::train(c, [](const std::string&) {});
    bench_progress("cblas_sgemm and dnnl_sgemm at the same shapes");
    const bool gpu = r.device == "cuda";
    std::string sgemm;
    const double peak = gpu ? 0 : best_cpu_sgemm(c.threads, [&] { return sgemm_gflops(c.layers, c.global_batch); }, &sgemm);
    std::string setup;
    bench_progress("the PyTorch peer, " + std::to_string(c.steps) + " steps");
    double torch = torch_samples_per_s(layers, c.global_batch, c.threads, static_cast<int>(c.steps), c.data_dir, r.device, &setup);
    double ratio = torch > 0 ? r.samples_per_s / torch : 0;
    if (format == "json") {
      std::printf("{\"bench\":\"train\",\"device\":\"%s\",\"model\":\"mlp %s\",\"batch\":%d,\"threads\":%d,\"steps\":%lld,"
                  "\"loom_samples_per_s\":%.1f,\"torch_samples_per_s\":%.1f,\"ratio\":%.3f,"
                  "\"loom_gflops\":%.1f,\"sgemm_gflops\":%.1f,\"sgemm_library\":\"%s\",\"gemm_efficiency\":%.3f,\"torch_setup\":\"%s\"}\n",
                  r.device.c_str(), layers.c_str(), c.global_batch, c.threads, static_cast<long long>(c.steps), r.samples_per_s, torch,
                  ratio, r.gflops, peak, sgemm.c_str(), peak > 0 ? r.gflops / peak : 0.0, setup.c_str());
    } else {
      std::printf("loom-bench train: MLP %s, batch %d, %d threads, %lld steps, Fashion-MNIST, on %s\n", layers.c_str(),
                  c.global_batch, c.threads, static_cast<long long>(c.steps), r.device.c_str());
      std::printf("  loom-train        %10.1f samples/s  (%.1f GFLOP/s, GEMM %s)\n", r.samples_per_s, r.gflops,
                  loom::word_of(c.gemm));
      if (torch > 0)
        std::printf("  PyTorch peer      %10.1f samples/s  (on %s, %s, torch.set_num_threads(%d)) -> ratio %.2fx (target >= %s)\n",
                    torch, r.device.c_str(), setup.c_str(), c.threads, ratio, gpu ? "1.0x" : "1.5x");
      else std::printf("  PyTorch peer unavailable (/usr/bin/python3 or $LOOM_PYTHON with torch needed)\n");
      if (!gpu)
        std::printf("  %s at the same GEMM shapes %.1f GFLOP/s -> loom reaches %.0f%% of it\n", sgemm.c_str(), peak,
                    100 * r.gflops / peak);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom-bench: %s\n", e.what());
    return 1;
  }
}

}  // namespace

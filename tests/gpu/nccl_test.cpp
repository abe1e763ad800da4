// nccl_test.cpp — the NCCL communicator on real GPUs: allreduce (fp32 and fp16), reduce-scatter,
// allgather, broadcast and barrier against the values every rank can compute; under
// `mpirun -np N` (one GPU per rank), or alone without MPI as one NCCL rank (NCCL refuses two
// ranks on one GPU; the bare GPU machine has no MPI). Then the trainer's gradient exchange on
// CUDA gradients, summed by NCCL in device memory and staged through host memory, overlapped
// with a backward that reports its gradients last first, and ZeRO-1's sharded step on the GPU;
// and that the trainer's wait for its compute does not wait for a collective's stream.
// Exits 77 (skip) without a usable GPU.
#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "loom/rt/comm/comm_nccl.hpp"
#include "loom/rt/comm/grad_exchange.hpp"
#include "loom/rt/nn/optim.hpp"
#include "loom/rt/tensor/ops.hpp"
#include "loom/rt/tensor/tensor.hpp"
#include "loom/rt/train/zero.hpp"

namespace {

int failures = 0;

void expect(bool ok, const char* what, double got, double want) {
  if (ok) return;
  std::printf("FAIL: %s: got %g, expected %g\n", what, got, want);
  ++failures;
}

template <typename T>
T* to_device(const std::vector<T>& h) {
  void* d = nullptr;
  if (cudaMalloc(&d, sizeof(T) * h.size()) != cudaSuccess) return nullptr;
  cudaMemcpy(d, h.data(), sizeof(T) * h.size(), cudaMemcpyHostToDevice);
  return static_cast<T*>(d);
}

template <typename T>
std::vector<T> to_host(const T* d, size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), d, sizeof(T) * n, cudaMemcpyDeviceToHost);
  return h;
}

// Gradients of six sizes on the GPU (rank r's differ from the others'), exchanged in 4 KiB
// buckets as backward would report them, on the device (NCCL) and staged; against the sum of
// the weighted gradients computed here. One rank: exact (fp16 on the device: rounded once, as NCCL sends it).
void exchange_checks(loom::rt::NcclCommunicator& nccl, int me, int p) {
  using namespace loom::rt;
  auto host = p == 1 ? std::move(make_inproc_group(1)[0]) : make_mpi_transport();
  Communicator comm(std::move(host), 60);
  const std::vector<int64_t> sizes{300, 20, 5000, 40, 1, 2048};
  auto grad_of = [](int r, int64_t k) { return static_cast<float>((k % 9) * (r + 1)) * 0.37f + 0.013f; };
  const float w = 1.0f / static_cast<float>(p);
  for (const char* kind : {"none", "fp16"})
    for (bool device : {true, false}) {
      CompressConfig cfg;
      cfg.kind = kind;
      GradExchange ex(cfg, 0.004);
      if (device) ex.set_device_comm(&nccl);
      for (int step = 0; step < 2; ++step) {
        std::vector<Param> ps;
        for (int64_t n : sizes) {
          std::vector<float> g(static_cast<size_t>(n));
          for (int64_t k = 0; k < n; ++k) g[static_cast<size_t>(k)] = w * grad_of(me, k);  // weighted, as a task leaves them
          Tensor t = Tensor::empty({n}, DType::kF32, Device::kCuda);
          cudaMemcpy(t.f32(), g.data(), g.size() * sizeof(float), cudaMemcpyHostToDevice);
          ps.push_back({"p" + std::to_string(ps.size()), Tensor(), t});
        }
        ex.begin(comm, ps);
        for (size_t i = ps.size(); i-- > 0;) ex.ready(i);
        std::vector<float> extras{w};
        ex.finish(extras, step);
        double worst = 0;
        for (size_t i = 0; i < ps.size(); ++i) {
          auto got = to_host(ps[i].grad.f32(), static_cast<size_t>(sizes[i]));
          for (int64_t k = 0; k < sizes[i]; ++k) {
            double want = 0;
            for (int r = 0; r < p; ++r) want += static_cast<double>(w * grad_of(r, k));
            if (p == 1 && device && std::string(kind) == "fp16") want = half_to_float(float_to_half(static_cast<float>(want)));
            worst = std::max(worst, std::fabs(got[static_cast<size_t>(k)] - want) / std::max(1.0, std::fabs(want)));
          }
        }
        const double tol = p == 1 ? 0 : std::string(kind) == "fp16" ? 2e-3 : 1e-6;
        const std::string what = std::string("gradient exchange ") + kind + (device ? " on the device (NCCL)" : " staged through the host");
        expect(worst <= tol && extras[0] == 1.0f, what.c_str(), worst, tol);
      }
    }
}

// ZeRO-1 with the gradients reduce-scattered by NCCL in device memory: moments and packed
// weights on the GPU, AdamW and clipping, 2 steps; against the unsharded step (allreduce, then
// Optimizer::step on the same GPU). One rank: the same kernels on the same values, up to the
// clip's norm, whose sum runs in another order.
void zero_checks(loom::rt::NcclCommunicator& nccl, int me, int p) {
  using namespace loom::rt;
  auto host = p == 1 ? std::move(make_inproc_group(1)[0]) : make_mpi_transport();
  Communicator comm(std::move(host), 60);
  const std::vector<int64_t> sizes{300, 20, 5000, 40, 1, 2048};
  auto params = [&] {
    std::vector<Param> ps;
    for (int64_t n : sizes) {
      std::vector<float> w(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) w[static_cast<size_t>(k)] = 0.01f * static_cast<float>(k % 13) - 0.05f;
      Tensor t = Tensor::empty({n}, DType::kF32, Device::kCuda);
      cudaMemcpy(t.f32(), w.data(), w.size() * sizeof(float), cudaMemcpyHostToDevice);
      ps.push_back({"p" + std::to_string(ps.size()), t, Tensor::empty({n}, DType::kF32, Device::kCuda)});
    }
    return ps;
  };
  auto set_grads = [&](std::vector<Param>& ps, int step) {
    for (size_t i = 0; i < ps.size(); ++i) {
      std::vector<float> g(static_cast<size_t>(sizes[i]));
      for (int64_t k = 0; k < sizes[i]; ++k)
        g[static_cast<size_t>(k)] = (static_cast<float>((k + step) % 9 * (me + 1)) * 0.37f - 1.0f) / static_cast<float>(p);
      cudaMemcpy(ps[i].grad.f32(), g.data(), g.size() * sizeof(float), cudaMemcpyHostToDevice);
    }
  };
  OptimConfig oc;
  oc.kind = OptimKind::kAdamw;
  oc.weight_decay = 0.01f;
  Optimizer sharded_opt(oc), whole_opt(oc);
  GradExchange sharded(CompressConfig{}, 0.004), whole(CompressConfig{}, 0.004);
  sharded.set_sharded();
  sharded.set_device_comm(&nccl);
  whole.set_device_comm(&nccl);
  ZeroOptimizer zero(sharded, comm);
  auto a = params(), b = params();
  double worst = 0;
  for (int step = 0; step < 2; ++step) {
    std::vector<float> extras{0.0f};
    set_grads(a, step);
    sharded.begin(comm, a);
    for (size_t i = a.size(); i-- > 0;) sharded.ready(i);
    sharded.finish(extras, step);
    zero.step(sharded_opt, a, 0.01f, 5.0f);
    set_grads(b, step);
    whole.begin(comm, b);
    for (size_t i = b.size(); i-- > 0;) whole.ready(i);
    whole.finish(extras, step);
    clip_grad_norm(b, 5.0f);
    whole_opt.step(b, 0.01f);
    for (size_t i = 0; i < a.size(); ++i) {
      auto x = to_host(a[i].value.f32(), static_cast<size_t>(sizes[i])), y = to_host(b[i].value.f32(), static_cast<size_t>(sizes[i]));
      for (size_t k = 0; k < x.size(); ++k) worst = std::max(worst, static_cast<double>(std::fabs(x[k] - y[k])));
    }
  }
  expect(worst <= 1e-6, "ZeRO-1 on the GPU (NCCL reduce-scatter, allgather) against the unsharded step", worst, 1e-6);
  const size_t whole_state = (300 + 20 + 5000 + 40 + 1 + 2048) * 2 * sizeof(float);
  expect(zero.state_bytes() <= whole_state / static_cast<size_t>(p) + sharded.buckets() * 2 * sizeof(float),
         "ZeRO-1 on the GPU: optimizer bytes on this rank", static_cast<double>(zero.state_bytes()),
         static_cast<double>(whole_state) / p);
}

// The balancer times each rank's compute with ops::wait_compute. Work on another non-blocking
// stream (NCCL's, waiting there for a slower rank's bucket; here a host function that sleeps
// 400 ms) must not count, or a fast rank measures the slow one's time and the shares stay equal.
void wait_compute_checks() {
  cudaStream_t other = nullptr;
  cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
  auto seconds = [](auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  cudaLaunchHostFunc(other, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(400)); }, nullptr);
  const double compute = seconds([] { loom::rt::ops::wait_compute(loom::rt::Device::kCuda); });
  const double device = seconds([] { cudaDeviceSynchronize(); });  // the rest of the 400 ms
  std::printf("wait_compute: %.3f s with 400 ms queued on another stream (a device-wide sync: %.3f s)\n", compute, device);
  expect(compute < 0.2, "wait_compute waited for another stream (s)", compute, 0);
  expect(device > 0.2, "the other stream's sleep did not hold the device (s)", device, 0.4);
  cudaStreamDestroy(other);
}

}  // namespace

int main(int argc, char** argv) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::printf("SKIP: no usable CUDA device\n");
    return 77;
  }
  const bool mpi = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK");
  int me = 0, p = 1;
  if (mpi) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
  }
  try {
    const int dev = loom::rt::NcclCommunicator::select_device();  // the plugin's own GPU, else the local rank's
    std::printf("rank %d: CUDA device %d\n", me, dev);
    auto comm = loom::rt::NcclCommunicator::create(60);
    std::printf("rank %d: %s\n", me, comm->describe().c_str());
    const int r = comm->rank();
    const size_t n = 1 << 20;
    std::vector<float> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = static_cast<float>((r + 1) * static_cast<int>(i % 7));
    float* d = to_device(h);
    comm->allreduce_sum(d, n);
    auto out = to_host(d, n);
    const float ranks = static_cast<float>(p * (p + 1) / 2);
    double worst = 0;
    for (size_t i = 0; i < n; ++i) worst = std::max(worst, static_cast<double>(std::fabs(out[i] - ranks * static_cast<float>(i % 7))));
    expect(worst == 0, "allreduce fp32", worst, 0);

    std::vector<uint16_t> hh(n);
    for (size_t i = 0; i < n; ++i) hh[i] = loom::rt::float_to_half(0.5f * static_cast<float>(i % 5));
    uint16_t* dh = to_device(hh);
    comm->allreduce_sum_half(dh, n);
    auto oh = to_host(dh, n);
    worst = 0;
    for (size_t i = 0; i < n; ++i)
      worst = std::max(worst, std::fabs(loom::rt::half_to_float(oh[i]) - 0.5 * (i % 5) * p));
    expect(worst == 0, "allreduce fp16", worst, 0);

    const size_t chunk = n / static_cast<size_t>(p);
    float* rs = nullptr;
    cudaMalloc(&rs, sizeof(float) * chunk);
    float* src = to_device(h);
    comm->reduce_scatter_sum(src, rs, chunk);
    float* ag = nullptr;
    cudaMalloc(&ag, sizeof(float) * chunk * p);
    comm->allgather(rs, ag, chunk);
    auto back = to_host(ag, chunk * static_cast<size_t>(p));
    worst = 0;
    for (size_t i = 0; i < back.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(back[i] - ranks * static_cast<float>(i % 7))));
    expect(worst == 0, "reduce-scatter + allgather", worst, 0);
    comm->reduce_scatter_chunks(src, chunk);  // in place, NCCL's layout: chunk r at r * chunk (src still holds h)
    comm->allgather_chunks(src, chunk);
    back = to_host(src, chunk * static_cast<size_t>(p));
    worst = 0;
    for (size_t i = 0; i < back.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(back[i] - ranks * static_cast<float>(i % 7))));
    expect(worst == 0, "reduce-scatter + allgather in place", worst, 0);

    std::vector<int> b(1000, r == 0 ? 42 : -1);
    int* db = to_device(b);
    comm->broadcast(db, sizeof(int) * b.size(), 0);
    auto bb = to_host(db, b.size());
    expect(bb[0] == 42 && bb[999] == 42, "broadcast", bb[999], 42);
    comm->barrier();
    exchange_checks(*comm, me, p);
    zero_checks(*comm, me, p);
    wait_compute_checks();
    cudaFree(d);
    cudaFree(dh);
    cudaFree(rs);
    cudaFree(ag);
    cudaFree(src);
    cudaFree(db);
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    ++failures;
  }
  std::printf("nccl_test: rank %d of %d: %s\n", me, p, failures ? "FAILED" : "all checks passed");
  if (mpi) MPI_Finalize();
  return failures ? 1 : 0;
}

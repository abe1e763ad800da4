// nccl_test.cpp — the NCCL communicator on real GPUs: allreduce (fp32 and fp16), reduce-scatter,
// allgather, broadcast and barrier against the values every rank can compute; under
// `mpirun -np N` (one GPU per rank), or alone without MPI as one NCCL rank (NCCL refuses two
// ranks on one GPU; the bare GPU machine has no MPI). Exits 77 (skip) without a usable GPU.
#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "loom/rt/dist/comm_nccl.hpp"
#include "loom/rt/tensor/tensor.hpp"

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

    std::vector<int> b(1000, r == 0 ? 42 : -1);
    int* db = to_device(b);
    comm->broadcast(db, sizeof(int) * b.size(), 0);
    auto bb = to_host(db, b.size());
    expect(bb[0] == 42 && bb[999] == 42, "broadcast", bb[999], 42);
    comm->barrier();
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

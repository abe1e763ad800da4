// comm_nccl.cpp — NcclCommunicator: NCCL collectives on the rank's CUDA stream, the unique id
// broadcast through MPI, non-blocking NCCL (config.blocking = 0) so that every wait can be
// bounded by a deadline and a hung peer aborts the communicator instead of hanging the job.
#include "loom/rt/comm/comm_nccl.hpp"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "../tensor/cuda_check.cuh"
#include "loom/rt/comm/comm.hpp"

namespace loom::rt {

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t queued = nullptr;  // recorded on the default stream before each collective
  bool ring_from_plugin = false;
  std::vector<int> nccl_rank;  // of each MPI rank (the ring's order)
  // One collective per chunk of `counts` (a chunk of 0 elements skipped), grouped: op(at, n, the
  // NCCL rank that owns it).
  template <class Op>
  void per_chunk(const std::vector<size_t>& counts, Op op);
  // The NCCL stream is non-blocking: without this it would not wait for the kernels (on the
  // default stream) that wrote the buffer it is about to reduce. `after`: a mark recorded on the
  // default stream right after those kernels (work queued later need not finish first).
  void after_default_stream(void* after = nullptr);
};

namespace {

bool nccl_ok(ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; }

#define LOOM_CHECK_NCCL(call) LOOM_CHECK_CALL(call, nccl_ok, ncclGetErrorString)

// Position of this task's GPU (LOOM_GPU) in its node's ring (LOOM_RING "0,3,2,1"); -1 when the
// plugin did not say.
int ring_position() {
  const char* ring = std::getenv("LOOM_RING");
  const char* gpu = std::getenv("LOOM_GPU");
  if (!ring || !gpu || !*ring || !*gpu) return -1;
  std::stringstream ss(ring);
  std::string item;
  for (int pos = 0; std::getline(ss, item, ','); ++pos)
    if (item == gpu) return pos;
  return -1;
}

}  // namespace

void NcclCommunicator::Impl::after_default_stream(void* after) {
  cudaEvent_t e = after ? static_cast<cudaEvent_t>(after) : queued;
  if (!after) LOOM_CHECK_CUDA(cudaEventRecord(queued, cudaStreamLegacy));
  LOOM_CHECK_CUDA(cudaStreamWaitEvent(stream, e, 0));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(double timeout_s) {
  int init = 0;
  MPI_Initialized(&init);
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->impl_ = std::make_unique<Impl>();
  c->timeout_s_ = timeout_s;
  if (!init) {  // no MPI: one rank (a single GPU; the bare GPU machine has no MPI to launch with)
    ncclUniqueId id;
    LOOM_CHECK_NCCL(ncclGetUniqueId(&id));
    c->impl_->nccl_rank = {0};
    c->init_comm(1, &id, 0);
    return c;
  }
  int mpi_rank = 0, mpi_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
  // NCCL ranks in ring order: by node, then by the GPU's place in the plugin's ring.
  const std::vector<int> nodes = mpi_node_ids();
  int pos = ring_position();
  std::vector<int> positions(static_cast<size_t>(mpi_size));
  MPI_Allgather(&pos, 1, MPI_INT, positions.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::vector<std::pair<int, int>> place;
  for (int r = 0; r < mpi_size; ++r) {
    place.emplace_back(nodes[static_cast<size_t>(r)], positions[static_cast<size_t>(r)]);
    c->impl_->ring_from_plugin = c->impl_->ring_from_plugin || positions[static_cast<size_t>(r)] >= 0;
  }
  c->impl_->nccl_rank = ring_rank_order(place);
  c->rank_ = c->impl_->nccl_rank[static_cast<size_t>(mpi_rank)];
  c->size_ = mpi_size;

  ncclUniqueId id;
  if (mpi_rank == 0) LOOM_CHECK_NCCL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  c->init_comm(mpi_size, &id, c->rank_);
  return c;
}

void NcclCommunicator::init_comm(int size, const void* unique_id, int rank) {
  rank_ = rank;
  size_ = size;
  LOOM_CHECK_CUDA(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
  LOOM_CHECK_CUDA(cudaEventCreateWithFlags(&impl_->queued, cudaEventDisableTiming));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once; wait() bounds the time
  ncclUniqueId copy;
  std::memcpy(&copy, unique_id, sizeof copy);
  LOOM_CHECK_NCCL(ncclCommInitRankConfig(&impl_->comm, size, copy, rank, &config));
  wait("communicator set-up");
}

NcclCommunicator::~NcclCommunicator() {
  if (!impl_) return;
  if (impl_->comm) ncclCommDestroy(impl_->comm);
  if (impl_->queued) cudaEventDestroy(impl_->queued);
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
}

int NcclCommunicator::select_device() {
  int gpus = 0;
  LOOM_CHECK_CUDA(cudaGetDeviceCount(&gpus));
  if (gpus == 0) throw Error("no CUDA device is visible to this rank");
  int dev = 0;
  const char* own = std::getenv("LOOM_GPU");
  int mpi = 0;
  MPI_Initialized(&mpi);
  if ((!own || !*own) && mpi) {  // no plugin: one GPU per rank on the node, in node-local rank order
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    int local_rank = 0;
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_free(&local);
    dev = local_rank % gpus;
  }
  LOOM_CHECK_CUDA(cudaSetDevice(dev));
  return dev;
}

std::string NcclCommunicator::shared_gpu() {
  int init = 0;
  MPI_Initialized(&init);
  if (!init) return {};
  int dev = 0, me = 0, size = 1;
  LOOM_CHECK_CUDA(cudaGetDevice(&dev));
  char bus[32] = {0};  // "0000:3b:00.0": the GPU itself, whatever CUDA_VISIBLE_DEVICES numbers it
  LOOM_CHECK_CUDA(cudaDeviceGetPCIBusId(bus, sizeof bus - 1, dev));
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<char> all(sizeof bus * static_cast<size_t>(size));
  MPI_Allgather(bus, sizeof bus, MPI_CHAR, all.data(), sizeof bus, MPI_CHAR, MPI_COMM_WORLD);
  const std::vector<int> nodes = mpi_node_ids();
  for (int a = 0; a < size; ++a)
    for (int b = a + 1; b < size; ++b) {
      const char* x = all.data() + sizeof bus * static_cast<size_t>(a);
      if (nodes[static_cast<size_t>(a)] == nodes[static_cast<size_t>(b)] &&
          std::strncmp(x, all.data() + sizeof bus * static_cast<size_t>(b), sizeof bus) == 0)
        return "ranks " + std::to_string(a) + " and " + std::to_string(b) + " both drive GPU " + x + " on one node";
    }
  return {};
}

void NcclCommunicator::wait(const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                              std::chrono::duration<double>(timeout_s_));
  for (int polls = 0;; ++polls) {
    ncclResult_t async = ncclSuccess;
    if (impl_->comm) ncclCommGetAsyncError(impl_->comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      ncclCommAbort(impl_->comm);
      impl_->comm = nullptr;
      throw Error(std::string("NCCL ") + what + " failed: " + ncclGetErrorString(async));
    }
    cudaError_t q = cudaStreamQuery(impl_->stream);
    if (q != cudaSuccess && q != cudaErrorNotReady) check_failed(__FILE__, __LINE__, what, cudaGetErrorString(q));
    if (q == cudaSuccess && async == ncclSuccess) return;
    if (std::chrono::steady_clock::now() > deadline) {
      ncclCommAbort(impl_->comm);
      impl_->comm = nullptr;
      throw Error("rank " + std::to_string(rank_) + ": NCCL " + what + " did not complete within " +
                  std::to_string(static_cast<int>(timeout_s_)) + " s (a peer hung or died); communicator aborted");
    }
    // A bucket on NVLink takes tens of microseconds: poll (yielding the core) for a while before
    // sleeping, or every bucket would cost a sleep's granularity on the communication thread,
    // which sends the buckets one after another. After that, sleep: a hung peer costs no core.
    if (polls < 2000) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclCommunicator::allreduce_sum(float* d, size_t n, void* after) {
  if (!impl_->comm) throw Error("the NCCL communicator was aborted");
  impl_->after_default_stream(after);
  LOOM_CHECK_NCCL(ncclAllReduce(d, d, n, ncclFloat32, ncclSum, impl_->comm, impl_->stream));
  wait("allreduce");
}

void NcclCommunicator::allreduce_sum_half(void* d, size_t n, void* after) {
  if (!impl_->comm) throw Error("the NCCL communicator was aborted");
  impl_->after_default_stream(after);
  LOOM_CHECK_NCCL(ncclAllReduce(d, d, n, ncclFloat16, ncclSum, impl_->comm, impl_->stream));
  wait("allreduce (fp16)");
}

void NcclCommunicator::reduce_scatter_sum(const float* send, float* recv, size_t recv_count, void* after) {
  if (!impl_->comm) throw Error("the NCCL communicator was aborted");
  impl_->after_default_stream(after);
  LOOM_CHECK_NCCL(ncclReduceScatter(send, recv, recv_count, ncclFloat32, ncclSum, impl_->comm, impl_->stream));
  wait("reduce-scatter");
}

void NcclCommunicator::allgather(const float* send, float* recv, size_t send_count) {
  if (!impl_->comm) throw Error("the NCCL communicator was aborted");
  impl_->after_default_stream();
  LOOM_CHECK_NCCL(ncclAllGather(send, recv, send_count, ncclFloat32, impl_->comm, impl_->stream));
  wait("allgather");
}

// In place, as NCCL defines it: this rank's chunk is at rank * chunk of the whole buffer.
void NcclCommunicator::reduce_scatter_chunks(float* d, size_t chunk, void* after) {
  reduce_scatter_sum(d, d + static_cast<size_t>(rank_) * chunk, chunk, after);
}

void NcclCommunicator::allgather_chunks(float* d, size_t chunk) { allgather(d + static_cast<size_t>(rank_) * chunk, d, chunk); }

template <class Op>
void NcclCommunicator::Impl::per_chunk(const std::vector<size_t>& counts, Op op) {
  if (!comm) throw Error("the NCCL communicator was aborted");
  if (counts.size() != nccl_rank.size())
    throw Error(std::to_string(counts.size()) + " chunk counts for " + std::to_string(nccl_rank.size()) + " ranks");
  after_default_stream();
  LOOM_CHECK_NCCL(ncclGroupStart());
  size_t at = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r]) {
      const ncclResult_t e = op(at, counts[r], nccl_rank[r]);
      if (!nccl_ok(e)) {
        ncclGroupEnd();
        throw Error(std::string("NCCL: ") + ncclGetErrorString(e));
      }
    }
    at += counts[r];
  }
  LOOM_CHECK_NCCL(ncclGroupEnd());
}

void NcclCommunicator::allgather_v(float* d, const std::vector<size_t>& counts) {
  impl_->per_chunk(counts, [&](size_t at, size_t n, int owner) {
    return ncclBroadcast(d + at, d + at, n, ncclFloat32, owner, impl_->comm, impl_->stream);
  });
  wait("allgather (uneven chunks)");
}

void NcclCommunicator::reduce_scatter_sum_v(float* d, const std::vector<size_t>& counts) {
  impl_->per_chunk(counts, [&](size_t at, size_t n, int owner) {
    return ncclReduce(d + at, d + at, n, ncclFloat32, ncclSum, owner, impl_->comm, impl_->stream);
  });
  wait("reduce-scatter (uneven chunks)");
}

void NcclCommunicator::broadcast(void* d, size_t bytes, int root) {
  if (!impl_->comm) throw Error("the NCCL communicator was aborted");
  if (root < 0 || root >= size_) throw Error("broadcast root " + std::to_string(root) + " is not a rank");
  impl_->after_default_stream();
  LOOM_CHECK_NCCL(ncclBroadcast(d, d, bytes, ncclUint8, root, impl_->comm, impl_->stream));
  wait("broadcast");
}

void NcclCommunicator::barrier() {
  float* d = nullptr;
  LOOM_CHECK_CUDA(cudaMalloc(&d, sizeof(float)));
  try {
    LOOM_CHECK_CUDA(cudaMemsetAsync(d, 0, sizeof(float), impl_->stream));
    allreduce_sum(d, 1);
  } catch (...) {
    cudaFree(d);
    throw;
  }
  cudaFree(d);
}

std::string NcclCommunicator::describe() const {
  return "nccl over " + std::to_string(size_) + " ranks" +
         (impl_->ring_from_plugin ? " in the plugin's ring order (LOOM_RING)" : " in rank order");
}

}  // namespace loom::rt

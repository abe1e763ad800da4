// comm_nccl.hpp — collectives on GPU buffers through NCCL, for ranks that each drive one GPU.
// The unique id travels through MPI (rank 0 creates it); the NCCL rank order follows the ring
// the SPANK plugin chose on each node (LOOM_RING, LOOM_GPU), nodes in order, so that NCCL's
// ring runs over the fastest links. Every wait has a deadline: a hung or dead peer aborts the
// communicator and becomes an Error instead of a hang.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "loom/rt/comm/comm.hpp"
#include "loom/rt/error.hpp"

namespace loom::rt {

class NcclCommunicator : public DeviceCollectives {
 public:
  // Collective over MPI_COMM_WORLD when MPI is initialised; without MPI, one rank. Uses the
  // current CUDA device.
  static std::unique_ptr<NcclCommunicator> create(double timeout_s);
  // Makes current (cudaSetDevice) and returns the GPU this rank drives: under the plugin
  // (LOOM_GPU set) its own GPU is first in CUDA_VISIBLE_DEVICES, so device 0; otherwise the
  // node-local rank (MPI_COMM_TYPE_SHARED) modulo the visible GPUs (collective), or device 0
  // without MPI.
  static int select_device();
  // Empty when every rank of MPI_COMM_WORLD drives a GPU of its own; otherwise which ranks share
  // one ("ranks 0 and 1 both drive GPU 0000:3b:00.0 on one node"): NCCL refuses such a
  // communicator ("Duplicate GPU detected"). Collective; uses the current device.
  static std::string shared_gpu();
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }  // NCCL rank (ring order), not always the MPI rank
  int size() const override { return size_; }
  // In place on device memory, then waits for completion (with the deadline). Each collective
  // first waits (an event, not a device-wide sync) for the work queued on the default stream,
  // or for the work before `after` (a mark from cuda::mark_queued).
  void allreduce_sum(float* device_data, size_t n, void* after = nullptr) override;
  void allreduce_sum_half(void* device_half_data, size_t n, void* after = nullptr) override;  // fp16 payload
  void reduce_scatter_sum(const float* device_send, float* device_recv, size_t recv_count, void* after = nullptr);
  void allgather(const float* device_send, float* device_recv, size_t send_count);
  void reduce_scatter_chunks(float* device_data, size_t chunk, void* after = nullptr) override;  // in place
  void allgather_chunks(float* device_data, size_t chunk) override;                            // in place
  // Uneven chunks in MPI rank order (DeviceCollectives): one broadcast from each chunk's owner,
  // or one reduce to it, grouped into one NCCL launch.
  void allgather_v(float* device_data, const std::vector<size_t>& counts) override;
  void reduce_scatter_sum_v(float* device_data, const std::vector<size_t>& counts) override;
  void broadcast(void* device_data, size_t bytes, int root);
  void barrier();
  std::string describe() const override;

 private:
  NcclCommunicator() = default;
  void wait(const char* what);
  void init_comm(int size, const void* unique_id, int rank);  // an ncclUniqueId
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;
  double timeout_s_ = 300;
};

}  // namespace loom::rt

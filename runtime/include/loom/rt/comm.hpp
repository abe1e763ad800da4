// comm.hpp — collectives for data-parallel training. Algorithms (ring reduce-scatter/allgather,
// tree broadcast) talk to a small point-to-point Transport, never to MPI or sockets directly
// (as gloo does); transports: in-process (N ranks as threads, for unit tests) and MPI. Every
// receive has a deadline, so a hung or dead peer becomes an Error that names its rank.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "loom/rt/error.hpp"

namespace loom::rt {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;
  // Starts sending `bytes` to `dst`; the buffer must stay valid until wait_sends() returns.
  virtual void send(int dst, const void* data, size_t bytes) = 0;
  // Receives exactly `bytes` from `src`; throws Error naming `src` when `deadline` passes.
  virtual void recv(int src, void* data, size_t bytes, std::chrono::steady_clock::time_point deadline) = 0;
  virtual void wait_sends(std::chrono::steady_clock::time_point deadline) = 0;
};

class Communicator {
 public:
  explicit Communicator(std::unique_ptr<Transport> t, double timeout_s = 300.0);
  int rank() const { return t_->rank(); }
  int size() const { return t_->size(); }
  const char* backend() const { return t_->name(); }
  void set_timeout(double seconds) { timeout_s_ = seconds; }

  void allreduce_sum(float* data, size_t n);                           // in place, ring
  void reduce_scatter_sum(float* data, size_t n, size_t* begin, size_t* count);  // rank's chunk reduced
  void allgather_chunks(float* data, size_t n);                        // inverse of the above
  void broadcast(void* data, size_t bytes, int root);
  void barrier();
  size_t bytes_sent() const { return bytes_sent_; }

 private:
  std::chrono::steady_clock::time_point deadline() const;
  void chunk(size_t n, int index, size_t* begin, size_t* count) const;
  std::unique_ptr<Transport> t_;
  double timeout_s_;
  size_t bytes_sent_ = 0;
  std::vector<float> scratch_;
};

// N ranks as threads of one process: make_inproc_group(4) gives four transports that talk
// through shared queues. `alive` lets a test stop a rank to check timeouts.
std::vector<std::unique_ptr<Transport>> make_inproc_group(int n);

#ifdef LOOM_HAVE_MPI
// MPI point-to-point (MPI_Isend/MPI_Irecv polled against the deadline) on MPI_COMM_WORLD.
std::unique_ptr<Transport> make_mpi_transport();
#endif

}  // namespace loom::rt

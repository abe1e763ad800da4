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
  // Starts receiving exactly `bytes` from `src` into `data`. Receives from one source complete in
  // the order they were posted, matched with that source's sends in the order it made them.
  virtual void post_recv(int src, void* data, size_t bytes) = 0;
  // Waits for every posted receive; throws Error naming a source when `deadline` passes.
  virtual void wait_recvs(std::chrono::steady_clock::time_point deadline) = 0;
  virtual void wait_sends(std::chrono::steady_clock::time_point deadline) = 0;
  void recv(int src, void* data, size_t bytes, std::chrono::steady_clock::time_point deadline) {
    post_recv(src, data, bytes);
    wait_recvs(deadline);
  }
  // Whether one thread may drive the transport while another made the previous calls (never
  // two at once): MPI_THREAD_SERIALIZED or better. Needed to overlap collectives with backward.
  virtual bool thread_serialized() const { return true; }
};

class Communicator {
 public:
  explicit Communicator(std::unique_ptr<Transport> t, double timeout_s = 300.0);
  int rank() const { return t_->rank(); }
  int size() const { return t_->size(); }
  const char* backend() const { return t_->name(); }
  bool thread_serialized() const { return t_->thread_serialized(); }
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  double timeout() const { return timeout_s_; }

  // Which node each rank runs on (node_of_rank[r], any integer id). When ranks span nodes and
  // every node holds the same number of them, allreduce becomes hierarchical: reduce-scatter
  // inside each node, allreduce of each chunk across nodes among the ranks with the same local
  // index, allgather inside the node (so only 1/local of the data crosses the network per rank).
  // `hierarchical` false keeps one ring over every rank. Either way, a ring that crosses nodes
  // pipelines large buffers in segments (one inside a node).
  void set_nodes(const std::vector<int>& node_of_rank, bool hierarchical = true);
  bool hierarchical() const { return !cross_.ranks.empty(); }
  // This rank's index among the ranks of its node (set_nodes); its world rank before set_nodes.
  int local_rank() const { return local_rank_ < 0 ? rank() : local_rank_; }
  std::string describe() const;  // "ring over 4 ranks", "hierarchical: 2 nodes x 2 ranks"

  void allreduce_sum(float* data, size_t n);                           // in place
  // The same sum with fp16 payloads (half the bytes); partial sums are rounded to fp16 at each
  // hop, as NCCL's fp16 allreduce does. Values beyond fp16's range become inf.
  void allreduce_sum_half(float* data, size_t n);
  void reduce_scatter_sum(float* data, size_t n, size_t* begin, size_t* count);  // rank's chunk reduced
  // The same with fp16 payloads (as allreduce_sum_half): only this rank's chunk of `data` holds
  // the sum afterwards.
  void reduce_scatter_sum_half(float* data, size_t n, size_t* begin, size_t* count);
  void allgather_chunks(float* data, size_t n);                        // inverse of the above
  // The chunk of n elements that reduce_scatter_sum leaves summed on this rank, and that
  // allgather_chunks sends from it. Hierarchical (set_nodes): both go inside the node and across
  // the nodes, as the allreduce does, and the chunk is this rank's part of its node's.
  void own_chunk(size_t n, size_t* begin, size_t* count) const;
  // Chunks of uneven sizes, one per rank in rank order (counts[r] elements for rank r, one after
  // another; some may be 0), around the world's ring: reduce_scatter_sum_v leaves rank r's chunk
  // of `data` the sum over the ranks (the rest undefined), allgather_v gives every rank every
  // rank's chunk. Every rank passes the same counts.
  void reduce_scatter_sum_v(float* data, const std::vector<size_t>& counts);
  void allgather_v(float* data, const std::vector<size_t>& counts);
  void broadcast(void* data, size_t bytes, int root);
  void barrier();
  size_t bytes_sent() const { return bytes_sent_; }

 private:
  struct Group {  // a ring: world ranks in ring order, and this rank's index in it
    std::vector<int> ranks;
    int me = 0;
  };
  struct Step {  // one ring step: what a rank sends and receives, in elements of the whole buffer
    int to, from;
    size_t send_at, send_n, recv_at, recv_n;
    bool reduce;  // add what arrives (reduce-scatter), else copy it in (allgather)
  };
  // The p-1 steps of a ring reduce-scatter (after it, member i owns the sum of chunk (i+1) % p)
  // or allgather (its inverse) over [at, at + n).
  static void ring_steps(const Group& g, size_t at, size_t n, bool reduce, std::vector<Step>* out);
  static void owned_chunk(const Group& g, size_t n, size_t* begin, size_t* count);  // after reduce-scatter
  // The ring's steps when chunk k of the ring is [begin[k], begin[k] + count[k]).
  static void ring_steps_at(const Group& g, const std::vector<size_t>& begin, const std::vector<size_t>& count,
                            bool reduce, std::vector<Step>* out);
  std::vector<Step> uneven_steps(const std::vector<size_t>& counts, bool reduce) const;
  // A reduce-scatter's (reduce) or an allgather's steps over [0, n): one ring, or hierarchical.
  void scatter_steps(size_t n, bool reduce, std::vector<Step>* out) const;
  std::vector<Step> allreduce_steps(size_t at, size_t n) const;
  // Runs segments' steps as a pipeline: segment k takes its step j at tick k + j.
  template <class T>
  void run_steps(T* data, const std::vector<std::vector<Step>>& segments);
  template <class T>
  void allreduce(T* data, size_t n);
  std::chrono::steady_clock::time_point deadline() const;
  std::unique_ptr<Transport> t_;
  double timeout_s_;
  size_t bytes_sent_ = 0;
  Group world_, local_, cross_;  // cross_ empty: flat ring over world_
  int nodes_ = 1, local_rank_ = -1;
  std::vector<char> scratch_;
};

// Collectives on a device's own memory (NCCL on GPUs), for gradients that live there; the host
// Communicator still carries everything else. Each sums in place over the ranks once the work
// before `after` is done (a mark from ops::mark_queued on the data's device; null: everything
// queued on the default stream so far), and returns when the sum is complete.
class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  virtual void allreduce_sum(float* data, size_t n, void* after = nullptr) = 0;
  virtual void allreduce_sum_half(void* half_data, size_t n, void* after = nullptr) = 0;  // fp16 payload
  // ZeRO-1 where the gradients live: `data` holds size() chunks of `chunk` floats one after
  // another, chunk r belonging to rank r (NCCL's in-place layout). reduce_scatter_chunks makes
  // this rank's chunk the sum over the ranks (the rest is left undefined); allgather_chunks gives
  // every rank each chunk from its owner.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void reduce_scatter_chunks(float* data, size_t chunk, void* after = nullptr) = 0;
  virtual void allgather_chunks(float* data, size_t chunk) = 0;
  // Chunks of uneven sizes in the host Communicator's rank order (counts[r] floats for rank r,
  // one after another in `data`, as Communicator::allgather_v lays them out): every rank's chunk
  // to every rank, or the sum over the ranks into each rank's own chunk. Where a backend has
  // none, an Error says so.
  virtual void allgather_v(float* data, const std::vector<size_t>& counts);
  virtual void reduce_scatter_sum_v(float* data, const std::vector<size_t>& counts);
  virtual std::string describe() const = 0;
};

// The order of ranks in a GPU ring: by node (first seen first), then by the position of the
// rank's GPU in its node's ring (LOOM_RING from the plugin; -1 when unknown: after the known
// ones, by rank). place[r] = {node id, ring position}; returns the ring position of each rank.
std::vector<int> ring_rank_order(const std::vector<std::pair<int, int>>& place);

// N ranks as threads of one process: make_inproc_group(4) gives four transports that talk
// through shared queues. `alive` lets a test stop a rank to check timeouts.
std::vector<std::unique_ptr<Transport>> make_inproc_group(int n);

#ifdef LOOM_HAVE_MPI
// Started by mpirun or srun --mpi=pmix: these launchers tell every process its rank.
bool launched_by_mpi();
// MPI point-to-point (MPI_Isend/MPI_Irecv polled against the deadline) on MPI_COMM_WORLD.
std::unique_ptr<Transport> make_mpi_transport();
// Which node each rank of MPI_COMM_WORLD runs on, as small ids (collective): ranks with the same
// LOOM_NODE_ID, else the same Slurm node (SLURMD_NODENAME), else the same host name.
std::vector<int> mpi_node_ids();
#endif

}  // namespace loom::rt

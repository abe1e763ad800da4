// comm.cpp — ring collectives over a Transport, and the in-process transport.
#include "loom/rt/comm/comm.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>

#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt {

Communicator::Communicator(std::unique_ptr<Transport> t, double timeout_s) : t_(std::move(t)), timeout_s_(timeout_s) {
  for (int r = 0; r < size(); ++r) world_.ranks.push_back(r);
  world_.me = rank();
}

std::chrono::steady_clock::time_point Communicator::deadline() const {
  return std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                std::chrono::duration<double>(timeout_s_));
}

void Communicator::set_nodes(const std::vector<int>& node_of_rank, bool hierarchical) {
  if (node_of_rank.size() != static_cast<size_t>(size()))
    throw Error("set_nodes: " + std::to_string(node_of_rank.size()) + " node ids for " + std::to_string(size()) +
                " ranks");
  std::map<int, std::vector<int>> by_node;  // node -> its ranks, ascending
  for (int r = 0; r < size(); ++r) by_node[node_of_rank[static_cast<size_t>(r)]].push_back(r);
  nodes_ = static_cast<int>(by_node.size());
  const auto& here = by_node[node_of_rank[static_cast<size_t>(rank())]];
  local_rank_ = static_cast<int>(std::find(here.begin(), here.end(), rank()) - here.begin());
  local_ = cross_ = Group{};
  const size_t per_node = by_node.begin()->second.size();
  bool even = true;
  for (const auto& kv : by_node) even = even && kv.second.size() == per_node;
  if (!hierarchical || nodes_ < 2 || per_node < 2 || !even) return;  // flat ring
  const auto& mine = by_node[node_of_rank[static_cast<size_t>(rank())]];
  local_.ranks = mine;
  local_.me = static_cast<int>(std::find(mine.begin(), mine.end(), rank()) - mine.begin());
  for (const auto& kv : by_node) {
    if (kv.second[static_cast<size_t>(local_.me)] == rank()) cross_.me = static_cast<int>(cross_.ranks.size());
    cross_.ranks.push_back(kv.second[static_cast<size_t>(local_.me)]);
  }
}

std::string Communicator::describe() const {
  if (hierarchical())
    return "hierarchical: " + std::to_string(nodes_) + " nodes x " + std::to_string(local_.ranks.size()) + " ranks";
  return "ring over " + std::to_string(size()) + " ranks" + (nodes_ > 1 ? " on " + std::to_string(nodes_) + " nodes" : "");
}

namespace {

void chunk(size_t n, size_t parts, size_t index, size_t* begin, size_t* count) {
  *begin = n * index / parts;
  *count = n * (index + 1) / parts - *begin;
}

inline void add_into(float* dst, const float* src, size_t n) {
  for (size_t k = 0; k < n; ++k) dst[k] += src[k];
}
inline void add_into(uint16_t* dst, const uint16_t* src, size_t n) {
  float a[512], b[512];  // in blocks, through the F16C conversions
  for (size_t at = 0; at < n; at += 512) {
    const size_t m = std::min<size_t>(512, n - at);
    halves_to_floats(dst + at, a, m);
    halves_to_floats(src + at, b, m);
    for (size_t k = 0; k < m; ++k) a[k] += b[k];
    floats_to_halves(a, dst + at, m);
  }
}

}  // namespace

void Communicator::ring_steps(const Group& g, size_t at, size_t n, bool reduce, std::vector<Step>* out) {
  const size_t p = g.ranks.size();
  std::vector<size_t> begin(p), count(p);
  for (size_t k = 0; k < p; ++k) {
    chunk(n, p, k, &begin[k], &count[k]);
    begin[k] += at;
  }
  ring_steps_at(g, begin, count, reduce, out);
}

void Communicator::ring_steps_at(const Group& g, const std::vector<size_t>& begin, const std::vector<size_t>& count,
                                 bool reduce, std::vector<Step>* out) {
  const size_t p = g.ranks.size(), i = static_cast<size_t>(g.me);
  if (p < 2) return;
  const int next = g.ranks[(i + 1) % p], prev = g.ranks[(i + p - 1) % p];
  for (size_t s = 0; s + 1 < p; ++s) {
    // reduce-scatter step s: send chunk i - s, add chunk i - s - 1 into ours
    const size_t sk = (i + p - s + (reduce ? 0 : 1)) % p, rk = (i + 2 * p - s - (reduce ? 1 : 0)) % p;
    out->push_back({next, prev, begin[sk], count[sk], begin[rk], count[rk], reduce});
  }
}

// After a ring reduce-scatter member i owns the ring's chunk (i + 1) % p: so the ring's chunk k is
// the segment of world rank k - 1, and rank r ends up with its own segment.
std::vector<Communicator::Step> Communicator::uneven_steps(const std::vector<size_t>& counts, bool reduce) const {
  const size_t p = static_cast<size_t>(size());
  if (counts.size() != p)
    throw Error("uneven collective: " + std::to_string(counts.size()) + " counts for " + std::to_string(p) + " ranks");
  std::vector<size_t> offset(p + 1, 0);
  for (size_t r = 0; r < p; ++r) offset[r + 1] = offset[r] + counts[r];
  std::vector<size_t> begin(p), count(p);
  for (size_t k = 0; k < p; ++k) {
    const size_t r = static_cast<size_t>(world_.ranks[(k + p - 1) % p]);
    begin[k] = offset[r], count[k] = counts[r];
  }
  std::vector<Step> out;
  ring_steps_at(world_, begin, count, reduce, &out);
  return out;
}

void DeviceCollectives::allgather_v(float*, const std::vector<size_t>&) {
  throw Error("an allgather of uneven chunks on device memory is not available over " + describe());
}

void DeviceCollectives::reduce_scatter_sum_v(float*, const std::vector<size_t>&) {
  throw Error("a reduce-scatter of uneven chunks on device memory is not available over " + describe());
}

void Communicator::reduce_scatter_sum_v(float* data, const std::vector<size_t>& counts) {
  std::vector<std::vector<Step>> one{uneven_steps(counts, true)};
  run_steps(data, one);
}

void Communicator::allgather_v(float* data, const std::vector<size_t>& counts) {
  std::vector<std::vector<Step>> one{uneven_steps(counts, false)};
  run_steps(data, one);
}

// Flat: reduce-scatter and allgather around the world's ring. Hierarchical: reduce-scatter inside
// the node (this rank then owns [b, b+c) of its node's sum), the same chunk reduce-scattered and
// allgathered across nodes, allgather inside the node.
void Communicator::owned_chunk(const Group& g, size_t n, size_t* begin, size_t* count) {
  chunk(n, g.ranks.size(), (static_cast<size_t>(g.me) + 1) % g.ranks.size(), begin, count);
}

std::vector<Communicator::Step> Communicator::allreduce_steps(size_t at, size_t n) const {
  std::vector<Step> out;
  if (!hierarchical()) {
    ring_steps(world_, at, n, true, &out);
    ring_steps(world_, at, n, false, &out);
    return out;
  }
  size_t b, c;
  owned_chunk(local_, n, &b, &c);
  ring_steps(local_, at, n, true, &out);
  ring_steps(cross_, at + b, c, true, &out);
  ring_steps(cross_, at + b, c, false, &out);
  ring_steps(local_, at, n, false, &out);
  return out;
}

// Each tick posts the send and the receive of every segment in flight, then waits for them all:
// the segments share the links, so one segment's steps inside a node overlap another's across
// nodes, and no link idles while a step's sum is added. Every rank runs the same schedule, and
// messages between two ranks are matched in the order (tick, segment) both sides post them.
template <class T>
void Communicator::run_steps(T* data, const std::vector<std::vector<Step>>& segments) {
  const size_t k_n = segments.size(), l_n = segments.empty() ? 0 : segments.front().size();
  if (l_n == 0) return;
  size_t slot_n = 0;  // scratch for each segment in flight, as large as its largest reduce step
  for (const auto& seg : segments)
    for (const auto& st : seg) slot_n = std::max(slot_n, st.reduce ? st.recv_n : 0);
  const size_t slots = std::min(k_n, l_n);
  // Grown, never shrunk: buckets of different sizes take turns, and each regrowth zero-filled the
  // new part (a memset on every step).
  scratch_.resize(std::max(scratch_.size(), std::max<size_t>(1, slots * slot_n) * sizeof(T)));
  T* tmp = reinterpret_cast<T*>(scratch_.data());
  for (size_t t = 0; t + 1 < k_n + l_n; ++t) {
    const size_t k0 = t + 1 > l_n ? t + 1 - l_n : 0, k1 = std::min(t, k_n - 1);
    auto dl = deadline();
    for (size_t k = k0; k <= k1; ++k) {
      const Step& st = segments[k][t - k];
      t_->send(st.to, data + st.send_at, st.send_n * sizeof(T));
      bytes_sent_ += st.send_n * sizeof(T);
    }
    for (size_t k = k0; k <= k1; ++k) {
      const Step& st = segments[k][t - k];
      t_->post_recv(st.from, st.reduce ? tmp + (k % slots) * slot_n : data + st.recv_at, st.recv_n * sizeof(T));
    }
    t_->wait_recvs(dl);
    for (size_t k = k0; k <= k1; ++k) {
      const Step& st = segments[k][t - k];
      if (st.reduce) add_into(data + st.recv_at, tmp + (k % slots) * slot_n, st.recv_n);
    }
    t_->wait_sends(dl);
  }
}

// When the ranks span nodes, large buffers go in pipelined segments, each rank's chunk of a
// segment at least 256 KiB (at most 16 segments: at 1 Gbit/s, 16 MiB over 2 nodes x 2 ranks, 16
// segments take the hierarchical allreduce from 163 to 145 ms): a link's transfer overlaps the
// previous segment's sum. Inside one node the receiver's own core makes the copy (shared memory,
// CMA), so there is nothing to overlap and each further tick only adds a handshake: one segment
// (2.68 MB over 2 ranks on one node: 4.0 GB/s busbw in 5 segments, 5.5 GB/s in one).
template <class T>
void Communicator::allreduce(T* data, size_t n) {
  if (size() == 1) return;
  const size_t k_n =
      nodes_ > 1 ? std::clamp<size_t>(n * sizeof(T) / (static_cast<size_t>(size()) << 18), 1, 16) : 1;
  std::vector<std::vector<Step>> segments;
  for (size_t k = 0; k < k_n; ++k) {
    size_t b, c;
    chunk(n, k_n, k, &b, &c);
    segments.push_back(allreduce_steps(b, c));
  }
  run_steps(data, segments);
}

void Communicator::allreduce_sum(float* data, size_t n) { allreduce(data, n); }

void Communicator::allreduce_sum_half(float* data, size_t n) {
  if (size() == 1) return;
  std::vector<uint16_t> h(n);
  floats_to_halves(data, h.data(), n);
  allreduce(h.data(), n);
  halves_to_floats(h.data(), data, n);
}

// Hierarchical (set_nodes): a reduce-scatter inside each node, then one of the node's chunk across
// the nodes among the ranks with the same local index, so that only 1/local of the data crosses
// the network per rank; the allgather the other way round. A rank's chunk is its cross-node
// chunk of its node-local chunk.
void Communicator::own_chunk(size_t n, size_t* begin, size_t* count) const {
  if (!hierarchical()) return owned_chunk(world_, n, begin, count);
  size_t b, c, b2, c2;
  owned_chunk(local_, n, &b, &c);
  owned_chunk(cross_, c, &b2, &c2);
  *begin = b + b2;
  *count = c2;
}

void Communicator::scatter_steps(size_t n, bool reduce, std::vector<Step>* out) const {
  if (!hierarchical()) return ring_steps(world_, 0, n, reduce, out);
  size_t b, c;
  owned_chunk(local_, n, &b, &c);
  if (reduce) ring_steps(local_, 0, n, true, out);
  ring_steps(cross_, b, c, reduce, out);
  if (!reduce) ring_steps(local_, 0, n, false, out);
}

void Communicator::reduce_scatter_sum(float* data, size_t n, size_t* begin, size_t* count) {
  std::vector<std::vector<Step>> one(1);
  scatter_steps(n, true, &one[0]);
  run_steps(data, one);
  own_chunk(n, begin, count);
}

void Communicator::reduce_scatter_sum_half(float* data, size_t n, size_t* begin, size_t* count) {
  own_chunk(n, begin, count);
  if (size() == 1) return;
  std::vector<uint16_t> h(n);
  floats_to_halves(data, h.data(), n);
  std::vector<std::vector<Step>> one(1);
  scatter_steps(n, true, &one[0]);
  run_steps(h.data(), one);
  halves_to_floats(h.data() + *begin, data + *begin, *count);
}

void Communicator::allgather_chunks(float* data, size_t n) {
  std::vector<std::vector<Step>> one(1);
  scatter_steps(n, false, &one[0]);
  run_steps(data, one);
}

void Communicator::broadcast(void* data, size_t bytes, int root) {
  const int p = size(), r = rank();
  if (root < 0 || root >= p) throw Error("broadcast root " + std::to_string(root) + " is not a rank");
  // Binomial tree on ranks relative to the root.
  const int rel = (r - root + p) % p;
  auto dl = deadline();
  int mask = 1;
  while (mask < p) {
    if (rel & mask) {
      t_->recv((rel - mask + root) % p, data, bytes, dl);
      break;
    }
    mask <<= 1;
  }
  mask >>= 1;
  while (mask > 0) {
    if (rel + mask < p) {
      t_->send((rel + mask + root) % p, data, bytes);
      bytes_sent_ += bytes;
    }
    mask >>= 1;
  }
  t_->wait_sends(dl);
}

void Communicator::barrier() {  // every rank hears from every other through the ring
  std::vector<float> v(static_cast<size_t>(size()), 0.0f);
  allreduce_sum(v.data(), v.size());
}

std::vector<int> ring_rank_order(const std::vector<std::pair<int, int>>& place) {
  std::map<int, int> node_rank;  // node id -> its order of first appearance
  for (const auto& p : place) node_rank.emplace(p.first, static_cast<int>(node_rank.size()));
  std::vector<int> ranks(place.size());
  for (size_t r = 0; r < place.size(); ++r) ranks[r] = static_cast<int>(r);
  auto key = [&](int r) {
    const auto& p = place[static_cast<size_t>(r)];
    return std::make_tuple(node_rank[p.first], p.second < 0 ? 1 : 0, p.second, r);
  };
  std::sort(ranks.begin(), ranks.end(), [&](int a, int b) { return key(a) < key(b); });
  std::vector<int> position(place.size());
  for (size_t i = 0; i < ranks.size(); ++i) position[static_cast<size_t>(ranks[i])] = static_cast<int>(i);
  return position;
}

namespace {

struct Hub {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int, int>, std::deque<std::vector<char>>> queues;  // (src, dst) -> messages
};

class InprocTransport : public Transport {
 public:
  InprocTransport(std::shared_ptr<Hub> hub, int rank, int size) : hub_(std::move(hub)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "inproc"; }
  void send(int dst, const void* data, size_t bytes) override {
    std::vector<char> msg(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
    {
      std::lock_guard<std::mutex> lock(hub_->mu);
      hub_->queues[{rank_, dst}].push_back(std::move(msg));
    }
    hub_->cv.notify_all();
  }
  void post_recv(int src, void* data, size_t bytes) override { pending_.push_back({src, data, bytes}); }
  void wait_recvs(std::chrono::steady_clock::time_point deadline) override {
    std::vector<Pending> todo;
    todo.swap(pending_);  // posted receives end here, received or not
    std::unique_lock<std::mutex> lock(hub_->mu);
    for (const auto& r : todo) {
      auto& q = hub_->queues[{r.src, rank_}];
      if (!hub_->cv.wait_until(lock, deadline, [&] { return !q.empty(); }))
        throw Error("rank " + std::to_string(rank_) + ": timed out waiting for rank " + std::to_string(r.src) +
                    " (hung or dead peer)");
      if (q.front().size() != r.bytes)
        throw Error("rank " + std::to_string(rank_) + ": message from rank " + std::to_string(r.src) + " has " +
                    std::to_string(q.front().size()) + " bytes, expected " + std::to_string(r.bytes));
      std::memcpy(r.data, q.front().data(), r.bytes);
      q.pop_front();
    }
  }
  void wait_sends(std::chrono::steady_clock::time_point) override {}  // sends copy eagerly

 private:
  struct Pending {
    int src;
    void* data;
    size_t bytes;
  };
  std::shared_ptr<Hub> hub_;
  int rank_, size_;
  std::vector<Pending> pending_;
};

}  // namespace

std::vector<std::unique_ptr<Transport>> make_inproc_group(int n) {
  if (n <= 0) throw Error("an in-process group needs at least one rank");
  auto hub = std::make_shared<Hub>();
  std::vector<std::unique_ptr<Transport>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<InprocTransport>(hub, r, n));
  return out;
}

}  // namespace loom::rt

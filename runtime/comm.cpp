// comm.cpp — ring collectives over a Transport, and the in-process transport.
#include "loom/rt/comm.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

namespace loom::rt {

Communicator::Communicator(std::unique_ptr<Transport> t, double timeout_s) : t_(std::move(t)), timeout_s_(timeout_s) {}

std::chrono::steady_clock::time_point Communicator::deadline() const {
  return std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                std::chrono::duration<double>(timeout_s_));
}

void Communicator::chunk(size_t n, int index, size_t* begin, size_t* count) const {
  const size_t p = static_cast<size_t>(size()), i = static_cast<size_t>(index);
  *begin = n * i / p;
  *count = n * (i + 1) / p - *begin;
}

// Ring reduce-scatter: after size-1 steps, rank r holds the sum of chunk (r+1) % size.
void Communicator::reduce_scatter_sum(float* data, size_t n, size_t* out_begin, size_t* out_count) {
  const int p = size(), r = rank(), next = (r + 1) % p, prev = (r + p - 1) % p;
  if (p == 1) {
    *out_begin = 0;
    *out_count = n;
    return;
  }
  scratch_.resize(n / static_cast<size_t>(p) + 1);
  for (int s = 0; s < p - 1; ++s) {
    size_t sb, sc, rb, rc;
    chunk(n, (r - s + p) % p, &sb, &sc);
    chunk(n, (r - s - 1 + 2 * p) % p, &rb, &rc);
    auto dl = deadline();
    t_->send(next, data + sb, sc * sizeof(float));
    bytes_sent_ += sc * sizeof(float);
    t_->recv(prev, scratch_.data(), rc * sizeof(float), dl);
    for (size_t k = 0; k < rc; ++k) data[rb + k] += scratch_[k];
    t_->wait_sends(dl);
  }
  chunk(n, (r + 1) % p, out_begin, out_count);
}

// Ring allgather of the chunks reduce_scatter_sum left: rank r starts with chunk (r+1) % size.
void Communicator::allgather_chunks(float* data, size_t n) {
  const int p = size(), r = rank(), next = (r + 1) % p, prev = (r + p - 1) % p;
  for (int s = 0; s < p - 1; ++s) {
    size_t sb, sc, rb, rc;
    chunk(n, (r + 1 - s + p) % p, &sb, &sc);
    chunk(n, (r - s + p) % p, &rb, &rc);
    auto dl = deadline();
    t_->send(next, data + sb, sc * sizeof(float));
    bytes_sent_ += sc * sizeof(float);
    t_->recv(prev, data + rb, rc * sizeof(float), dl);
    t_->wait_sends(dl);
  }
}

void Communicator::allreduce_sum(float* data, size_t n) {
  if (size() == 1) return;
  size_t b, c;
  reduce_scatter_sum(data, n, &b, &c);
  allgather_chunks(data, n);
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
  void recv(int src, void* data, size_t bytes, std::chrono::steady_clock::time_point deadline) override {
    std::unique_lock<std::mutex> lock(hub_->mu);
    auto& q = hub_->queues[{src, rank_}];
    if (!hub_->cv.wait_until(lock, deadline, [&] { return !q.empty(); }))
      throw Error("rank " + std::to_string(rank_) + ": timed out waiting for rank " + std::to_string(src) +
                  " (hung or dead peer)");
    if (q.front().size() != bytes)
      throw Error("rank " + std::to_string(rank_) + ": message from rank " + std::to_string(src) + " has " +
                  std::to_string(q.front().size()) + " bytes, expected " + std::to_string(bytes));
    std::memcpy(data, q.front().data(), bytes);
    q.pop_front();
  }
  void wait_sends(std::chrono::steady_clock::time_point) override {}  // sends copy eagerly

 private:
  std::shared_ptr<Hub> hub_;
  int rank_, size_;
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

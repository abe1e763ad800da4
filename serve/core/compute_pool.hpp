// compute_pool.hpp — the threads every model's forward pass runs on, shared by all models.
//
// libgomp keeps an OpenMP team for each thread that opens parallel regions, and once its teams
// hold more threads than the machine has CPUs it stops spinning at barriers and sleeps in the
// kernel instead. With one batcher thread per model, a BERT at batch 1 took 8.6 ms instead of 5.6
// once a second model had served a request. So forward passes run here, on as many threads as the
// most instances any model asks for (1 by default), each keeping its one team.
//
// A pass on one thread opens no team, so it runs on the caller's own thread: handing it over and
// back cost two thread switches, 12 us a batch, twelve times a tiny model's forward pass.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace loom::serve {

class ComputePool {
 public:
  static ComputePool& shared();
  ~ComputePool();
  // At least `slots` threads, so that that many forward passes can run at once.
  void reserve(int slots);
  // Runs `f` with `threads` BLAS/OpenMP threads (more than one: on a pool thread), and waits;
  // rethrows what it threw.
  void run(const std::function<void()>& f, int threads);

 private:
  struct Task {
    std::function<void()> f;
    int threads;
    std::promise<void> done;
  };
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task*> tasks_;
  std::vector<std::thread> workers_;
  bool stop_ = false;
};

}  // namespace loom::serve

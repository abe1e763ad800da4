// compute_pool.cpp — a fixed set of threads taking forward passes from one queue.
#include "core/compute_pool.hpp"

#include "loom/rt/tensor/kernels.hpp"

namespace loom::serve {

ComputePool& ComputePool::shared() {
  static ComputePool pool;
  return pool;
}

ComputePool::~ComputePool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ComputePool::reserve(int slots) {
  std::lock_guard<std::mutex> lock(mu_);
  while (static_cast<int>(workers_.size()) < slots) workers_.emplace_back([this] { loop(); });
}

void ComputePool::run(const std::function<void()>& f, int threads) {
  if (threads == 1) {
    thread_local bool one = false;  // this thread's OpenMP setting is one thread
    if (!one) rt::cpu::set_threads(1), one = true;
    return f();
  }
  reserve(1);
  Task task{f, threads, {}};
  std::future<void> done = task.done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(&task);
  }
  cv_.notify_one();
  done.get();
}

void ComputePool::loop() {
  int threads = 0;
  for (;;) {
    Task* t;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      t = tasks_.front();
      tasks_.pop_front();
    }
    if (t->threads != threads) rt::cpu::set_threads(threads = t->threads);
    try {
      t->f();
      t->done.set_value();
    } catch (...) {
      t->done.set_exception(std::current_exception());
    }
  }
}

}  // namespace loom::serve

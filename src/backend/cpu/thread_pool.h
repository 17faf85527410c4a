// A reusable pool of worker threads for data-parallel loops. Workers spin briefly between jobs
// (decode issues hundreds of small parallel loops per token) and then sleep.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lamina {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // total threads including the caller; >= 1
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Calls fn(begin, end) over chunks covering [0, n); returns when all chunks are done.
  // `grain` is the smallest chunk worth a thread.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

 private:
  void worker_loop();
  void run_chunks();

  int n_threads_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> next_{0};
  std::atomic<int> active_{0};
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleeping_{0};
};

}  // namespace lamina

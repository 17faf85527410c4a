// A reusable pool of worker threads for data-parallel loops. Workers spin briefly between jobs
// (decode issues hundreds of small parallel loops per token), yielding the CPU as they spin,
// and then sleep.
//
// A job is done when all its chunks are done, not when every worker has checked in: a worker
// that is not running (more threads than CPUs, or other processes on the machine) never holds
// up a loop; the threads that do run take its chunks. Workers attach to a job only while it is
// open (an odd job number) and the caller rewrites a job's fields only once no worker is
// attached, so a late worker never sees a half-written job.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lamina {

// CPUs this process may run on (its affinity mask), at least 1.
int available_cpus();
// Threads to run for a request (0: all available CPUs). Never more than available_cpus():
// data-parallel loops only slow down when threads outnumber the CPUs that can run them.
int usable_threads(int requested);

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
  uint64_t wait_for_job(uint64_t seen);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> job_{0};  // odd: a job is open; even: closed
  std::atomic<int> attached_{0};  // workers inside the current (or last) job
  std::atomic<int64_t> next_{0};  // first index not yet claimed
  std::atomic<int64_t> done_{0};  // indices completed
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleeping_{0};
};

}  // namespace lamina

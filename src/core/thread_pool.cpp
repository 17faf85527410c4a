#include "core/thread_pool.h"

#include <sched.h>

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#define LAMINA_PAUSE() _mm_pause()
#else
#define LAMINA_PAUSE() std::this_thread::yield()
#endif

namespace lamina {

namespace {

constexpr int kSpinsBeforeSleep = 1 << 16;
constexpr int kSpinsPerYield = 256;  // a waiting thread gives its CPU to a runnable one this often

// One step of a spin wait: a pause, and now and then a yield so that a thread the waiter depends
// on gets the CPU when there are more runnable threads than CPUs.
inline void spin_step(int i) {
  if (i % kSpinsPerYield == kSpinsPerYield - 1) std::this_thread::yield();
  else LAMINA_PAUSE();
}

}  // namespace

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

int usable_threads(int requested) {
  const int cpus = available_cpus();
  return requested > 0 ? std::min(requested, cpus) : cpus;
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  int64_t ran = 0;  // published once, when this thread finds nothing left to claim
  for (;;) {
    const int64_t b = next_.fetch_add(chunk_);
    if (b >= n_) break;
    const int64_t e = std::min(n_, b + chunk_);
    (*fn_)(b, e);
    ran += e - b;
  }
  if (ran) done_.fetch_add(ran, std::memory_order_release);
}

// Waits for an open job other than `seen`; returns its number (odd), or 0 when the pool stops.
// The number returned is the one seen open: a job that closed meanwhile fails the worker's
// check after it attaches, so it never reads the fields of a job being rewritten.
uint64_t ThreadPool::wait_for_job(uint64_t seen) {
  auto open_job = [&] {
    const uint64_t j = job_.load(std::memory_order_acquire);
    return j != seen && (j & 1) ? j : uint64_t(0);
  };
  for (int i = 0;; ++i) {
    if (const uint64_t j = open_job()) return j;
    if (stop_.load(std::memory_order_relaxed)) return 0;
    if (i < kSpinsBeforeSleep) {
      spin_step(i);
      continue;
    }
    std::unique_lock<std::mutex> lk(mu_);
    sleeping_.fetch_add(1);
    cv_.wait(lk, [&] { return open_job() != 0 || stop_.load(); });
    sleeping_.fetch_sub(1);
    i = 0;
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    const uint64_t j = wait_for_job(seen);
    if (j == 0 || stop_) return;
    seen = j;
    // Attach, then check the job is still open: the caller closes a job before it waits for
    // attached_ to reach zero, so (sequentially consistent on both sides) either it sees this
    // worker attached, or this worker sees the job closed and leaves its fields alone.
    attached_.fetch_add(1);
    if (job_.load() == j) run_chunks();
    attached_.fetch_sub(1);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  const int64_t max_parts = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  if (n_threads_ == 1 || max_parts == 1) {
    fn(0, n);
    return;
  }
  // Workers still attached to the previous (closed) job are on their way out; they may still
  // read its fields.
  for (int i = 0; attached_.load() > 0; ++i) spin_step(i);
  fn_ = &fn;
  n_ = n;
  // A few chunks per thread balances uneven work without much contention.
  chunk_ = std::max<int64_t>(std::max<int64_t>(1, grain), (n + 4 * n_threads_ - 1) / (4 * n_threads_));
  next_.store(0);
  done_.store(0);
  {
    std::lock_guard<std::mutex> lk(mu_);  // pairs with the sleepers' predicate check
    job_.fetch_add(1);                     // open
  }
  if (sleeping_.load() > 0) cv_.notify_all();
  run_chunks();
  for (int i = 0; done_.load(std::memory_order_acquire) < n; ++i) spin_step(i);
  job_.fetch_add(1);  // close
}

}  // namespace lamina

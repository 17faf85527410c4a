#include "backend/cpu/thread_pool.h"

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
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    const int64_t b = next_.fetch_add(chunk_);
    if (b >= n_) break;
    (*fn_)(b, std::min(n_, b + chunk_));
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen) {
      if (++spins < kSpinsBeforeSleep) {
        LAMINA_PAUSE();
        continue;
      }
      std::unique_lock<std::mutex> lk(mu_);
      sleeping_.fetch_add(1);
      cv_.wait(lk, [&] { return generation_.load() != seen; });
      sleeping_.fetch_sub(1);
      break;
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_) return;
    run_chunks();
    active_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  const int64_t max_parts = std::max<int64_t>(1, n / std::max<int64_t>(1, grain));
  if (n_threads_ == 1 || max_parts == 1) {
    fn(0, n);
    return;
  }
  fn_ = &fn;
  n_ = n;
  // A few chunks per thread balances uneven work without much contention.
  chunk_ = std::max<int64_t>(std::max<int64_t>(1, grain), (n + 4 * n_threads_ - 1) / (4 * n_threads_));
  next_.store(0);
  active_.store(n_threads_ - 1);
  {
    std::lock_guard<std::mutex> lk(mu_);  // pairs with the sleepers' predicate check
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (sleeping_.load() > 0) cv_.notify_all();
  run_chunks();
  while (active_.load(std::memory_order_acquire) > 0) LAMINA_PAUSE();
  fn_ = nullptr;
}

}  // namespace lamina

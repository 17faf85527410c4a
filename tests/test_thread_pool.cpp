// The CPU thread pool: every index runs exactly once, and a pool with more threads than CPUs
// (or CPUs shared with other work) finishes in about the time of one sized to the CPUs.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <vector>

using namespace lamina;

namespace {

// Runs `jobs` parallel loops of n indices, each index a few microseconds of arithmetic; checks
// each index of each loop ran exactly once and returns the wall time in seconds.
double run_jobs(ThreadPool& pool, int jobs, int64_t n) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<double> sink{0};
  const auto t0 = std::chrono::steady_clock::now();
  for (int j = 0; j < jobs; ++j) {
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      double acc = 0;
      for (int64_t i = b; i < e; ++i) {
        hits[size_t(i)].fetch_add(1, std::memory_order_relaxed);
        for (int k = 0; k < 2000; ++k) acc += std::sqrt(double(i + k));
      }
      sink.store(acc, std::memory_order_relaxed);
    });
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[size_t(i)].load(), jobs) << "index " << i;
  return secs;
}

TEST(ThreadPool, EveryIndexOnceWhateverTheSizes) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int rep = 0; rep < 20; ++rep)
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
        }, rep % 3 + 1);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 20) << threads << " threads, n " << n;
    }
  }
}

TEST(ThreadPool, MoreThreadsThanCpusFinishInAboutTheTimeOfTheCpuCount) {
  const int cpus = available_cpus();
  constexpr int kJobs = 400;
  constexpr int64_t kN = 64;
  ThreadPool fitted(cpus);
  run_jobs(fitted, 20, kN);  // warm up
  const double base = run_jobs(fitted, kJobs, kN);
  for (int factor : {4, 16}) {
    ThreadPool over(cpus * factor);
    const double t = run_jobs(over, kJobs, kN);
    // Before the pool let idle workers stay behind, 16x on 2 CPUs took ~50x longer.
    EXPECT_LT(t, 3.0 * base + 0.05) << cpus * factor << " threads on " << cpus << " CPUs: " << t << " s against "
                                     << base << " s";
  }
}

// Many short loops back to back with more threads than CPUs: workers arrive late, attach to a
// job that has just closed, or to the next one; every index of every loop must still run once
// (a worker touching a job being rewritten would lose or repeat indices, or hang the caller).
TEST(ThreadPool, ShortLoopsBackToBackRunEveryIndexOnce) {
  ThreadPool pool(4 * available_cpus() + 1);
  std::vector<std::atomic<int>> hits(64);
  for (int job = 0; job < 20000; ++job) {
    const int64_t n = 1 + job % 64;
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1, std::memory_order_relaxed);
    });
  }
  // Index i runs in every loop whose n > i: loops with n = 1 + job % 64 over 20000 jobs.
  for (int64_t i = 0; i < 64; ++i) {
    int want = 0;
    for (int job = 0; job < 20000; ++job) want += 1 + job % 64 > i;
    ASSERT_EQ(hits[size_t(i)].load(), want) << "index " << i;
  }
}

TEST(ThreadPool, UsableThreadsNeverExceedTheCpus) {
  const int cpus = available_cpus();
  EXPECT_GE(cpus, 1);
  EXPECT_EQ(usable_threads(0), cpus);
  EXPECT_EQ(usable_threads(1), 1);
  EXPECT_EQ(usable_threads(1000), cpus);
}

}  // namespace

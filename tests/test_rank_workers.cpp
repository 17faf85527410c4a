// The threads that run a session's ranks 1..N-1 (engine/rank_workers.h): every worker runs each
// job once with its own rank, on its own thread; a job's error reaches wait() and the workers go
// on; a rank that cannot be made fails the constructor, which joins the others first.
#include "core/error.h"
#include "engine/rank_workers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

using namespace lamina;

TEST(RankWorkers, EveryWorkerRunsEachJobOnItsOwnThread) {
  std::mutex mu;
  std::set<std::thread::id> made_on;
  RankWorkers w(4, [&](int, Rank&) {
    std::lock_guard lk(mu);
    made_on.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(made_on.size(), 3u);
  EXPECT_FALSE(made_on.contains(std::this_thread::get_id()));
  for (int round = 0; round < 50; ++round) {
    std::atomic<int> sum = 0;
    std::set<std::thread::id> ran_on;
    w.post([&](int rank, Rank&) {
      sum += rank + 100 * round;
      std::lock_guard lk(mu);
      ran_on.insert(std::this_thread::get_id());
    });
    w.wait();
    EXPECT_EQ(sum.load(), 1 + 2 + 3 + 3 * 100 * round) << "round " << round;
    EXPECT_EQ(ran_on, made_on) << "round " << round;
  }
}

TEST(RankWorkers, AJobsErrorReachesWaitAndTheWorkersGoOn) {
  RankWorkers w(3, [](int, Rank&) {});
  w.post([](int rank, Rank&) {
    if (rank == 2) throw Error("rank 2 failed");
  });
  EXPECT_THROW(w.wait(), Error);
  std::atomic<int> ran = 0;
  w.post([&](int, Rank&) { ++ran; });
  EXPECT_NO_THROW(w.wait());
  EXPECT_EQ(ran.load(), 2);
}

TEST(RankWorkers, ARankThatCannotBeMadeFailsTheConstructor) {
  std::atomic<int> made = 0;
  EXPECT_THROW(RankWorkers(4,
                           [&](int rank, Rank&) {
                             if (rank == 3) throw Error("no memory on rank 3");
                             ++made;
                           }),
               Error);
  EXPECT_EQ(made.load(), 2);  // (the others were made, then joined)
}

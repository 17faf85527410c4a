// Collectives of a tensor-parallel group over host memory (issue #35): the group of one, and N
// ranks as threads, whose sums must equal the sums in rank order, bit for bit, on every rank.
#include "core/communicator.h"
#include "core/error.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

using namespace lamina;

namespace {

TEST(Communicator, AGroupOfOneCopies) {
  auto c = single_rank();
  EXPECT_EQ(c->ranks(), 1);
  std::vector<float> x{1.5f, -2.f, 3.25f}, out(3, 0.f);
  c->all_reduce_sum(x.data(), x.size());
  EXPECT_EQ(x, (std::vector<float>{1.5f, -2.f, 3.25f}));
  c->all_gather(x.data(), x.size(), out.data());
  EXPECT_EQ(out, x);
}

// Each rank's data: random, seeded by the rank and the round.
std::vector<float> data_of(int rank, int round, size_t n) {
  std::mt19937 rng(uint32_t(100 * round + rank));
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng) * (rank + 1);
  return v;
}

TEST(Communicator, ThreadRanksSumInRankOrderAndGatherEveryRank) {
  constexpr int kRanks = 4;
  for (size_t n : {size_t(1000), size_t(3), size_t(0)}) {
    ThreadGroup group(kRanks);
    std::vector<std::vector<float>> reduced(kRanks), gathered(kRanks);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r)
      threads.emplace_back([&, r] {
        auto c = group.member(r);
        for (int round = 0; round < 3; ++round) {  // the group's buffers are reused
          std::vector<float> x = data_of(r, round, n);
          c->all_reduce_sum(x.data(), n);
          std::vector<float> g(kRanks * n);
          const std::vector<float> mine = data_of(r, round, n);
          c->all_gather(mine.data(), n, g.data());
          if (round == 2) reduced[size_t(r)] = x, gathered[size_t(r)] = g;
        }
      });
    for (auto& t : threads) t.join();
    std::vector<float> want(n, 0.f), all;
    for (int r = 0; r < kRanks; ++r) {
      const std::vector<float> d = data_of(r, 2, n);
      for (size_t i = 0; i < n; ++i) want[i] = r == 0 ? d[i] : want[i] + d[i];
      all.insert(all.end(), d.begin(), d.end());
    }
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_EQ(reduced[size_t(r)], want) << "rank " << r << ", n = " << n;
      EXPECT_EQ(gathered[size_t(r)], all) << "rank " << r << ", n = " << n;
    }
  }
}

TEST(Communicator, BadGroupsAreRefused) {
  EXPECT_THROW(ThreadGroup(0), Error);
  ThreadGroup g(2);
  EXPECT_THROW(g.member(2), Error);
  EXPECT_THROW(g.member(-1), Error);
}

}  // namespace

// backend/moe_route.h: a mixture of experts' routing of one token, against probabilities worked
// out here in f64, ties, the weights not renormalised, and NaN logits. backend/moe_policy.h: which
// passes the CUDA backend routes on the device, and which run grouped by expert.
#include "backend/moe_policy.h"
#include "backend/moe_route.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

using namespace lamina;

TEST(MoeRoute, PicksTheMostProbableInAscendingOrder) {
  const std::vector<float> logits{0.f, 1.f, 3.f, 2.f, -1.f};
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  route_top_k(logits.data(), 5, 2, true, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 3}));
  const double e2 = std::exp(2.0), e3 = std::exp(3.0);
  EXPECT_NEAR(w[0], e3 / (e2 + e3), 1e-6);
  EXPECT_NEAR(w[1], e2 / (e2 + e3), 1e-6);
  // Not renormalised: the softmax's own probabilities.
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l));
  route_top_k(logits.data(), 5, 2, false, ids.data(), w.data());
  EXPECT_NEAR(w[0], e3 / sum, 1e-6);
  EXPECT_NEAR(w[1], e2 / sum, 1e-6);
}

TEST(MoeRoute, TiesGoToTheLowerIndex) {
  const std::vector<float> logits{0.5f, 1.f, 0.f, 1.f, 1.f};
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  route_top_k(logits.data(), 5, 2, true, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(w[0], 0.5f);
  EXPECT_EQ(w[1], 0.5f);
}

TEST(MoeRoute, NanLogitsStillGiveDistinctExperts) {
  std::vector<float> logits(16, std::numeric_limits<float>::quiet_NaN());
  logits[9] = 2.f;
  std::vector<int32_t> ids(4);
  std::vector<float> w(4);
  route_top_k(logits.data(), 16, 4, true, ids.data(), w.data());
  for (size_t j = 0; j < ids.size(); ++j) {
    EXPECT_GE(ids[j], 0);
    EXPECT_LT(ids[j], 16);
    if (j) {
      EXPECT_LT(ids[j - 1], ids[j]);
    }
  }
}

// Qwen3-30B-A3B's 128 experts and 8 picks: by default (-1) 16 pairs an expert, so up to 256 rows
// (2,048 pairs) route on the device and a 512-token prompt does not; Mixtral's 8 experts and 2
// picks: 1 pair an expert, up to 4 rows. An explicit option is taken as given; 0 leaves only one
// row; no pass past one launch's pairs.
TEST(MoePolicy, RowsOnTheDevice) {
  const int64_t max_pairs = 4096;
  EXPECT_EQ(moe_pairs_per_expert(-1, 128), 16);
  EXPECT_EQ(moe_pairs_per_expert(-1, 8), 1);
  EXPECT_EQ(moe_pairs_per_expert(-1, 4), 1) << "at least 1";
  EXPECT_EQ(moe_pairs_per_expert(-1, 60), 7);
  EXPECT_EQ(moe_pairs_per_expert(5, 128), 5);
  for (int64_t rows : {1, 2, 16, 64, 256}) {
    EXPECT_TRUE(moe_rows_on_device(rows, 128, 8, -1, max_pairs, false)) << rows;
  }
  for (int64_t rows : {257, 512}) {
    EXPECT_FALSE(moe_rows_on_device(rows, 128, 8, -1, max_pairs, false)) << rows;
  }
  for (int64_t rows : {1, 2, 4}) {
    EXPECT_TRUE(moe_rows_on_device(rows, 8, 2, -1, max_pairs, false)) << rows;
  }
  for (int64_t rows : {5, 8, 32}) {
    EXPECT_FALSE(moe_rows_on_device(rows, 8, 2, -1, max_pairs, false)) << rows;
  }
  EXPECT_TRUE(moe_rows_on_device(64, 8, 2, 16, max_pairs, false)) << "an explicit 16 on Mixtral";
  EXPECT_FALSE(moe_rows_on_device(65, 8, 2, 16, max_pairs, false));
  EXPECT_TRUE(moe_rows_on_device(1, 128, 8, 0, max_pairs, false)) << "0: one row still";
  EXPECT_FALSE(moe_rows_on_device(2, 128, 8, 0, max_pairs, false));
  EXPECT_TRUE(moe_rows_on_device(512, 128, 8, 4096, max_pairs, false)) << "4,096 pairs: one launch";
  EXPECT_FALSE(moe_rows_on_device(513, 128, 8, 4096, max_pairs, false)) << "past one launch's pairs";
  EXPECT_FALSE(moe_rows_on_device(0, 128, 8, -1, max_pairs, false));
  EXPECT_FALSE(moe_rows_on_device(1, 0, 8, -1, max_pairs, false));
}

// With a grouped GEMM every pass routes on the device, and passes of several rows whose pairs
// average more than 2 an expert (by default) take it: Qwen3-30B-A3B's 33 tokens and more (8 picks
// of 128), Mixtral's 9 (2 of 8); never one row.
TEST(MoePolicy, RowsOnTheDeviceWithTheGroupedGemm) {
  for (int64_t rows : {1, 2, 256, 257, 512, 8192}) EXPECT_TRUE(moe_rows_on_device(rows, 128, 8, -1, 4096, true)) << rows;
  EXPECT_FALSE(moe_rows_on_device(0, 128, 8, -1, 4096, true));
  EXPECT_EQ(moe_pairs_per_expert(-1, 128, true), 2);
  EXPECT_EQ(moe_pairs_per_expert(-1, 8, true), 2);
  EXPECT_EQ(moe_pairs_per_expert(7, 8, true), 7) << "an explicit option as given";
  EXPECT_FALSE(moe_gemm_launch(32, 8, 128, -1, 4096));
  EXPECT_TRUE(moe_gemm_launch(33, 8, 128, -1, 4096));
  EXPECT_TRUE(moe_gemm_launch(512, 8, 128, -1, 4096));
  EXPECT_FALSE(moe_gemm_launch(8, 2, 8, -1, 4096)) << "Mixtral's 8 tokens";
  EXPECT_TRUE(moe_gemm_launch(9, 2, 8, -1, 4096));
  EXPECT_TRUE(moe_gemm_launch(2, 8, 128, 0, 4096)) << "0: every pass of several rows";
  EXPECT_FALSE(moe_gemm_launch(1, 8, 128, 0, 4096)) << "one row: the GEMVs";
  EXPECT_FALSE(moe_gemm_launch(256, 8, 128, 16, 4096)) << "an explicit 16: GEMVs up to 2,048 pairs";
  EXPECT_TRUE(moe_gemm_launch(600, 8, 128, 64, 4096)) << "an explicit 64: past the GEMVs' 4,096 pairs all the same";
  EXPECT_FALSE(moe_gemm_launch(512, 8, 128, 64, 4096));
}

// Grouped by expert: only the gate/up pair, from 4 pairs an expert (Qwen3-30B-A3B's 64 tokens of
// 8 picks among 128 experts, Mixtral's 16 of 2 among 8); a down matrix always a block row a pair.
TEST(MoePolicy, GroupedLaunch) {
  EXPECT_FALSE(moe_grouped_launch(8, 128, true));
  EXPECT_FALSE(moe_grouped_launch(511, 128, true));
  EXPECT_TRUE(moe_grouped_launch(512, 128, true));
  EXPECT_FALSE(moe_grouped_launch(4096, 128, false));  // a down matrix: one a pair
  EXPECT_FALSE(moe_grouped_launch(31, 8, true));
  EXPECT_TRUE(moe_grouped_launch(32, 8, true));
}

// backend/moe_route.h: a mixture of experts' routing of one token, against probabilities worked
// out here in f64, ties, the weights not renormalised, and NaN logits.
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
    if (j) EXPECT_LT(ids[j - 1], ids[j]);
  }
}

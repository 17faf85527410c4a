// PredictionStats against values computed by hand: perplexity of uniform logits, a KL divergence
// of two small distributions, top-token agreement, the error estimates and percentiles.
#include "model/eval_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace lamina;

namespace {

TEST(EvalMetrics, LogSoftmaxOfKnownLogits) {
  std::vector<double> lp;
  const std::vector<float> l = {0.f, std::log(2.f), std::log(5.f)};  // probabilities 1/8, 2/8, 5/8
  log_softmax(l, lp);
  EXPECT_NEAR(lp[0], std::log(1.0 / 8), 1e-6);
  EXPECT_NEAR(lp[1], std::log(2.0 / 8), 1e-6);
  EXPECT_NEAR(lp[2], std::log(5.0 / 8), 1e-6);
  const std::vector<float> big = {1000.f, 1000.f};  // no overflow
  log_softmax(big, lp);
  EXPECT_NEAR(lp[0], std::log(0.5), 1e-12);
}

TEST(EvalMetrics, PerplexityOfUniformLogitsIsTheVocabularySize) {
  PredictionStats s;
  const std::vector<float> flat(7, 3.25f);
  for (int32_t t = 0; t < 7; ++t) s.add(flat, t);
  EXPECT_EQ(s.count(), 7);
  EXPECT_NEAR(s.ppl(), 7.0, 1e-9);
  EXPECT_NEAR(s.ppl_error(), 0.0, 1e-6);  // every position the same NLL (up to the moments' rounding)
  EXPECT_FALSE(s.has_base());
}

TEST(EvalMetrics, ErrorEstimateAsLlamaCpp) {
  // NLLs ln 2 and ln 8 (probabilities 1/2 and 1/8): mean ln 4, PPL 4; sd of the two values
  // (population) = ln 2, standard error = ln 2 / sqrt(1), times PPL.
  PredictionStats s;
  s.add(std::vector<float>{0.f, 0.f}, 0);
  s.add(std::vector<float>{0.f, std::log(7.f)}, 0);
  EXPECT_NEAR(s.ppl(), 4.0, 1e-6);
  EXPECT_NEAR(s.ppl_error(), std::log(2.0) * 4.0, 1e-5);
}

TEST(EvalMetrics, KlDivergenceAndTopAgreement) {
  PredictionStats s;
  // base p = (1/2, 1/2), this q = (3/4, 1/4): KL(p || q) = 1/2 ln(4/3); tops 0 and 0 (first of
  // a tie) agree.
  s.add(std::vector<float>{std::log(3.f), 0.f}, std::vector<float>{0.f, 0.f}, 1);
  // base p = (0.1, 0.9), this q = (0.9, 0.1): KL = 0.8 ln 9; tops differ.
  s.add(std::vector<float>{std::log(9.f), 0.f}, std::vector<float>{0.f, std::log(9.f)}, 0);
  const double k1 = 0.5 * std::log(4.0 / 3.0), k2 = 0.8 * std::log(9.0);
  EXPECT_NEAR(s.mean_kld(), (k1 + k2) / 2, 1e-6);
  EXPECT_NEAR(s.kld_percentile(100), k2, 1e-5);
  EXPECT_NEAR(s.kld_percentile(50), k1, 1e-6);
  EXPECT_NEAR(s.same_top(), 0.5, 1e-12);
  // NLL of this run: -ln(1/4), -ln(9/10); of the base: -ln(1/2), -ln(1/10).
  EXPECT_NEAR(s.ppl(), std::exp((std::log(4.0) + std::log(10.0 / 9)) / 2), 1e-6);
  EXPECT_NEAR(s.base_ppl(), std::exp((std::log(2.0) + std::log(10.0)) / 2), 1e-6);
}

TEST(EvalMetrics, IdenticalRunsHaveZeroDivergence) {
  PredictionStats s;
  const std::vector<float> l = {0.3f, -1.f, 2.5f, 0.f};
  for (int i = 0; i < 5; ++i) s.add(l, l, i % 4);
  EXPECT_EQ(s.mean_kld(), 0.0);
  EXPECT_EQ(s.same_top(), 1.0);
  EXPECT_EQ(s.ppl(), s.base_ppl());
}

}  // namespace

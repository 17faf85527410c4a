#include "model/eval_metrics.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>

namespace lamina {

void log_softmax(std::span<const float> logits, std::vector<double>& out) {
  out.resize(logits.size());
  double mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, double(l));
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l) - mx);
  const double lse = mx + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = double(logits[i]) - lse;
}

void PredictionStats::add(std::span<const float> logits, int32_t target) {
  if (target < 0 || size_t(target) >= logits.size()) fail("token {} is outside the vocabulary of {}", target, logits.size());
  log_softmax(logits, lp_);
  nll_.add(-lp_[size_t(target)]);
  ++n_;
}

void PredictionStats::add(std::span<const float> logits, std::span<const float> base_logits, int32_t target) {
  if (base_logits.size() != logits.size())
    fail("the base run has {} logits a position, this one {}", base_logits.size(), logits.size());
  add(logits, target);
  log_softmax(base_logits, base_lp_);
  base_nll_.add(-base_lp_[size_t(target)]);
  double kld = 0;
  size_t top = 0, base_top = 0;
  for (size_t i = 0; i < lp_.size(); ++i) {
    kld += std::exp(base_lp_[i]) * (base_lp_[i] - lp_[i]);
    if (lp_[i] > lp_[top]) top = i;
    if (base_lp_[i] > base_lp_[base_top]) base_top = i;
  }
  kld = std::max(kld, 0.0);  // rounding can leave -1e-17 where the two agree
  kld_.add(kld);
  klds_.push_back(float(kld));
  same_ += top == base_top;
  ++n_base_;
}

double PredictionStats::ppl_of(const Moments& m, int64_t n) { return n ? std::exp(m.sum / double(n)) : 0.0; }

// llama.cpp's estimate: the standard error of the mean NLL, times PPL (d exp(x) = exp(x) dx).
double PredictionStats::ppl_error_of(const Moments& m, int64_t n) {
  if (n < 2) return 0;
  const double mean = m.sum / double(n), var = std::max(0.0, m.sum2 / double(n) - mean * mean);
  return std::sqrt(var / double(n - 1)) * std::exp(mean);
}

double PredictionStats::ppl() const { return ppl_of(nll_, n_); }
double PredictionStats::ppl_error() const { return ppl_error_of(nll_, n_); }
double PredictionStats::base_ppl() const { return ppl_of(base_nll_, n_base_); }
double PredictionStats::base_ppl_error() const { return ppl_error_of(base_nll_, n_base_); }
double PredictionStats::mean_kld() const { return n_base_ ? kld_.sum / double(n_base_) : 0.0; }

double PredictionStats::mean_kld_error() const {
  if (n_base_ < 2) return 0;
  const double mean = mean_kld(), var = std::max(0.0, kld_.sum2 / double(n_base_) - mean * mean);
  return std::sqrt(var / double(n_base_ - 1));
}

double PredictionStats::kld_percentile(double p) const {
  if (klds_.empty()) return 0;
  std::vector<float> v = klds_;
  const double rank = std::ceil(std::clamp(p, 0.0, 100.0) / 100.0 * double(v.size()));  // nearest rank
  const size_t k = std::min(v.size() - 1, rank > 0 ? size_t(rank) - 1 : 0);
  std::nth_element(v.begin(), v.begin() + long(k), v.end());
  return v[k];
}

double PredictionStats::same_top() const { return n_base_ ? double(same_) / double(n_base_) : 0.0; }

double PredictionStats::same_top_error() const {
  if (n_base_ < 2) return 0;
  const double p = same_top();
  return std::sqrt(p * (1 - p) / double(n_base_ - 1));
}

}  // namespace lamina

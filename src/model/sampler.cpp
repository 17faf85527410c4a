#include "model/sampler.h"

#include <algorithm>
#include <cmath>

namespace lamina {

int32_t argmax(std::span<const float> logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

Sampler::Sampler(SamplerParams p) : p_(p), rng_(p.seed) {}

std::span<const int32_t> Sampler::window(std::span<const int32_t> history) const {
  const size_t n = p_.repeat_last_n < 0 ? history.size() : std::min(history.size(), size_t(p_.repeat_last_n));
  return history.last(n);
}

std::vector<int32_t> Sampler::penalty_ids(std::span<const int32_t> history) const {
  if (p_.repeat_penalty == 1.f || p_.repeat_last_n == 0) return {};
  const std::span<const int32_t> w = window(history);
  std::vector<int32_t> ids(w.begin(), w.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

double Sampler::next_uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  cand_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) cand_[i] = {logits[i], int32_t(i)};
  // Repetition penalty (llama.cpp's rule): divide positive logits, multiply negative ones.
  for (int32_t t : penalty_ids(history)) {
    if (t < 0 || size_t(t) >= cand_.size()) continue;
    float& l = cand_[size_t(t)].first;
    l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
  }
  // Presence and frequency penalties (OpenAI's, over the same window, after the repetition
  // penalty as llama.cpp applies them): minus presence once, minus frequency per occurrence.
  if (p_.repeat_last_n != 0 && p_.additive_penalties()) {
    const std::span<const int32_t> w = window(history);
    std::vector<int32_t> ids(w.begin(), w.end());
    std::sort(ids.begin(), ids.end());
    for (size_t i = 0; i < ids.size();) {
      size_t j = i;
      while (j < ids.size() && ids[j] == ids[i]) ++j;
      if (ids[i] >= 0 && size_t(ids[i]) < cand_.size())
        cand_[size_t(ids[i])].first -= p_.presence_penalty + p_.frequency_penalty * float(j - i);
      i = j;
    }
  }
  if (p_.temperature <= 0.f)
    return std::min_element(cand_.begin(), cand_.end(), before)->second;
  size_t n = cand_.size();
  if (p_.top_k > 0 && size_t(p_.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), before);
    n = size_t(p_.top_k);
  } else {
    std::sort(cand_.begin(), cand_.end(), before);
  }
  return sample_sorted(std::span<const std::pair<float, int32_t>>(cand_.data(), n));
}

int32_t Sampler::sample_sorted(std::span<const std::pair<float, int32_t>> best) {
  if (best.empty()) return -1;
  if (p_.temperature <= 0.f) return best[0].second;
  size_t n = best.size();
  if (p_.top_k > 0) n = std::min(n, size_t(p_.top_k));
  // Probabilities of the survivors (softmax at temperature 1 for the top-p / min-p cuts).
  std::vector<double> prob(n);
  const double mx = best[0].first;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += prob[i] = std::exp(double(best[i].first) - mx);
  if (p_.top_p < 1.f) {
    double cum = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += prob[i] / sum;
      if (cum >= p_.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  if (p_.min_p > 0.f) {  // keep tokens with p >= min_p * p_max (p_max = prob[0] / sum)
    size_t keep = 1;
    while (keep < n && prob[keep] >= p_.min_p * prob[0]) ++keep;
    n = keep;
  }
  // Temperature, then a draw.
  sum = 0;
  for (size_t i = 0; i < n; ++i) sum += prob[i] = std::exp((double(best[i].first) - mx) / p_.temperature);
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_);
  for (size_t i = 0; i < n; ++i) {
    r -= prob[i];
    if (r <= 0) return best[i].second;
  }
  return best[n - 1].second;
}

}  // namespace lamina

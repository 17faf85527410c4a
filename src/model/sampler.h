// Token sampling over a logits row: repetition penalty, presence and frequency penalties, top-k,
// top-p, min-p, temperature, then a seeded draw (or greedy argmax when temperature <= 0). Same
// seed and inputs, same tokens.
#pragma once

#include "backend/sampling_params.h"

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace lamina {

class Sampler {
 public:
  explicit Sampler(SamplerParams p);
  // Picks the next token; `history` is the tokens so far (for the repetition penalty).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  const SamplerParams& params() const { return p_; }
  // For samplers that run elsewhere (on the GPU, which has the repetition penalty only: see
  // Backend::draws_on_device): the distinct ids the repetition penalty applies to, and the next
  // uniform draw in [0, 1) from this sampler's seeded generator.
  std::vector<int32_t> penalty_ids(std::span<const int32_t> history) const;
  double next_uniform();
  // The draw from the row's best tokens, found elsewhere (the ranks of a split vocabulary, each
  // over its share on its GPU): (logit after every penalty, id) sorted by logit descending, then
  // id ascending; at least min(top_k, vocabulary) of them (one for a greedy draw); top-k off needs
  // the whole row. The same id, and the same use of the generator, as sample() over the row.
  int32_t sample_sorted(std::span<const std::pair<float, int32_t>> best);
  // The draw order of (logit, id) candidates: logit descending, then id ascending (the greedy
  // pick is the first; the ranks of a split vocabulary merge their lists in it).
  static bool before(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  }

 private:
  // The last repeat_last_n tokens of history (all of it for -1), which every penalty looks at.
  std::span<const int32_t> window(std::span<const int32_t> history) const;

  SamplerParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace lamina

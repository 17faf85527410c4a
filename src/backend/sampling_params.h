// What a token draw asks for: the parameters the host's Sampler (model/sampler.h) and a
// backend's on-device sampling (Backend::sample) both follow.
#pragma once

#include <cstdint>

namespace lamina {

struct SamplerParams {
  float temperature = 0.8f;   // <= 0: greedy
  int top_k = 40;             // <= 0: off
  float top_p = 0.95f;        // >= 1: off
  float min_p = 0.05f;        // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off
  // OpenAI's additive penalties: a token's logit less presence_penalty once it occurs and
  // frequency_penalty for each time it occurs, among the same last repeat_last_n tokens.
  float presence_penalty = 0.f, frequency_penalty = 0.f;  // 0: off
  int repeat_last_n = 64;
  uint64_t seed = 0;
  bool additive_penalties() const { return presence_penalty != 0.f || frequency_penalty != 0.f; }
  bool penalised() const { return repeat_last_n != 0 && (repeat_penalty != 1.f || additive_penalties()); }
  // Greedy without a penalty: the draw is the row's argmax (the lowest id among equals).
  bool plain_greedy() const { return temperature <= 0.f && !penalised(); }
};

}  // namespace lamina

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
  int repeat_last_n = 64;
  uint64_t seed = 0;
  // Greedy without a repeat penalty: the draw is the row's argmax (the lowest id among equals).
  bool plain_greedy() const { return temperature <= 0.f && (repeat_penalty == 1.f || repeat_last_n == 0); }
};

}  // namespace lamina

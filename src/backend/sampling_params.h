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
};

}  // namespace lamina

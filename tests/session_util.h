// A helper the CPU and GPU tests share: what a session answers to a prompt.
#pragma once

#include "engine/session.h"
#include "model/sampler.h"

#include <cstdint>
#include <span>
#include <vector>

namespace lamina::test {

struct SessionRun {
  std::vector<float> all;        // the prompt's logits, every row ([prompt][n_vocab])
  std::vector<int32_t> tokens;   // the greedy continuation
};

// The prompt's logits, then (from a fresh conversation) `steps` greedy tokens after it.
inline SessionRun greedy_run(Session& s, std::span<const int32_t> prompt, int steps) {
  SessionRun out;
  s.reset();
  out.all = s.eval(prompt, true);
  s.reset();
  SamplerParams p;
  p.temperature = 0.f;
  Sampler sampler(p);
  int32_t t = s.eval_sample(prompt, sampler);
  for (int i = 0; i < steps; ++i) {
    out.tokens.push_back(t);
    t = s.eval_sample(std::span<const int32_t>(&t, 1), sampler);
  }
  return out;
}

}  // namespace lamina::test

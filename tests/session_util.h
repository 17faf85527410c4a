// A helper the CPU and GPU tests share: what a session answers to a prompt.
#pragma once

#include "engine/engine.h"
#include "engine/session.h"
#include "model/sampler.h"

#include <cstdint>
#include <map>
#include <mutex>
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

// Submits the requests to the engine, runs it until it is idle, and returns each request's
// tokens, in the order of reqs.
inline std::vector<std::vector<int32_t>> engine_tokens(Engine& engine, const std::vector<Request>& reqs) {
  std::mutex mu;
  std::map<int64_t, std::vector<int32_t>> got;
  std::vector<int64_t> ids;
  for (const Request& r : reqs)
    ids.push_back(engine.submit(r, [&](const TokenEvent& e) {
      std::lock_guard lk(mu);
      if (e.token >= 0) got[e.id].push_back(e.token);
    }));
  engine.run_until_idle();
  std::vector<std::vector<int32_t>> out;
  for (int64_t id : ids) out.push_back(got[id]);
  return out;
}

}  // namespace lamina::test

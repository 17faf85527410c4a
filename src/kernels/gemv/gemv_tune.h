// Timing every GEMV variant/config on a problem shape (kbench, autotuner).
#pragma once

#include "kernels/gemv/gemv.h"

#include <optional>
#include <vector>

namespace lamina::kernels {

struct GemvTiming {
  const GemvVariant* variant;
  GemvConfig config;
  double us;             // median over rotated weight buffers, one launch between two events
  double graph_us = -1;  // per launch inside a CUDA graph of back-to-back launches (decode's view)
  double best_us() const { return graph_us > 0 ? graph_us : us; }
};

// Times the variants that take `shape` (its pointers are ignored: buffers are allocated and
// filled with fresh random data here, W_up and x8 too when they are set). all_configs=false
// times each variant's default only.
std::vector<GemvTiming> gemv_time_variants(const GemvProblem& shape, bool all_configs, cudaStream_t s, int reps = 20);

// Tunes the shape over the production variants (by their time inside a graph, as decode runs
// them) and records the winner in the cache (in memory; call TuneCache::get("gemv").save() to
// persist). skip: "a;b;..." variants ("q_dp4a") or configs ("q_dp4a(rows=2,warps=16,unroll=4)")
// left out, for A/B measurements of a new rung (`lamina tune --skip`).
std::optional<GemvTiming> gemv_tune(const GemvProblem& shape, cudaStream_t s, const std::string& skip = "");

}  // namespace lamina::kernels

// lamina bench --parallel: many sequences at once through the batching engine (bench_parallel.cpp).
#pragma once

#include "engine/session.h"

#include <string>
#include <vector>

namespace lamina::cli {

struct ParallelBenchSpec {
  std::vector<int> parallel;  // concurrent sequences per row
  int n_prompt = 128, n_gen = 128;
  int prefix = 0;             // leading prompt tokens every request shares
  bool prefix_cache = true;   // EngineOptions::prefix_cache
  bool window_pool = true;    // EngineOptions::window_pool
  int waves = 2;              // requests per row: waves x its sequence count (closed loop)
  // Seconds over which a row's first requests start, evenly spaced (0: all at once). Requests that
  // start together also finish together and come back as a burst; a ramp of about one request's
  // lifetime lets the closed loop settle into arrivals spread over time, as a server sees them.
  double ramp_s = 0;
  int block_tokens = 16;      // positions per KV block
  int max_step_tokens = 0;  // tokens one engine step may take (SchedulerOptions; 0: the engine's choice)
  // The requests' temperature (0: greedy); above 0 they sample with SamplerParams' other defaults
  // (top-k 40, top-p 0.95, min-p 0.05), request i with seed i.
  float temperature = 0.f;
  bool device_sampling = true;  // EngineOptions::device_sampling
};

// The value at fraction p (0..1) of v sorted, the nearest rank (0 for an empty v): the table's
// p50 / p99, and bench --median's median.
double percentile(std::vector<double> v, double p);

// "1,16,64" -> {1, 16, 64}; throws lamina::Error naming the flag on anything else.
std::vector<int> parse_parallel(const std::string& list);

// Prints the table (one row per entry of spec.parallel) for the session's model and backend.
void run_parallel_bench(Session& sess, const ParallelBenchSpec& spec);

}  // namespace lamina::cli

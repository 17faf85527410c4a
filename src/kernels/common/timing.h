// Timing with CUDA events: warm-ups, then the median of `reps` timed launches. `run(i)` is
// called with the repetition index so callers can rotate through buffers that together exceed
// the L2 cache (weights must come from HBM, as in a real decode step).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

typedef struct CUstream_st* cudaStream_t;

namespace lamina::kernels {

double median_time_us(const std::function<void(int)>& run, int warmup, int reps, cudaStream_t s);

// The time one launch takes inside a CUDA graph, as in a decode step: `launches` back-to-back
// calls of run(i) are captured into one graph (no events between them), the graph is replayed
// `reps` times, and the median replay is divided by `launches`. Negative if capture failed.
double graph_time_us(const std::function<void(int)>& run, int launches, int reps, cudaStream_t s);

// Device-to-device copy bandwidth (bytes read + written per second), measured on `bytes`.
double copy_bandwidth_gbs(size_t bytes, cudaStream_t s);

// Fills n bytes with hash-based pseudo-random bytes (fresh data, never zeros).
void fill_random_bytes(void* dst, size_t n, uint64_t seed, cudaStream_t s);
void fill_random_floats(float* dst, size_t n, uint64_t seed, float scale, cudaStream_t s);

size_t l2_cache_bytes();

// How many copies of a weight of `bytes` a benchmark rotates through so that together they exceed
// twice the L2 cache (each launch then reads its weight from HBM, as a model's step does): 1 to 64.
int rotation_copies(size_t bytes);

}  // namespace lamina::kernels

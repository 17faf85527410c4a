#include "kernels/common/timing.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

namespace lamina::kernels {

double median_time_us(const std::function<void(int)>& run, int warmup, int reps, cudaStream_t s) {
  for (int i = 0; i < warmup; ++i) run(i);
  std::vector<cudaEvent_t> ev(static_cast<size_t>(reps) + 1);
  for (auto& e : ev) cudaEventCreate(&e);
  cudaEventRecord(ev[0], s);
  for (int i = 0; i < reps; ++i) {
    run(warmup + i);
    cudaEventRecord(ev[size_t(i) + 1], s);
  }
  cudaEventSynchronize(ev.back());
  std::vector<double> us(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    cudaEventElapsedTime(&ms, ev[size_t(i)], ev[size_t(i) + 1]);
    us[size_t(i)] = double(ms) * 1e3;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::nth_element(us.begin(), us.begin() + reps / 2, us.end());
  return us[size_t(reps / 2)];
}

double graph_time_us(const std::function<void(int)>& run, int launches, int reps, cudaStream_t s) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) != cudaSuccess) {  // (the legacy stream cannot be captured)
    cudaGetLastError();  // its error is not the caller's next launch's
    return -1;
  }
  for (int i = 0; i < launches; ++i) run(i);
  const bool captured = cudaStreamEndCapture(s, &graph) == cudaSuccess && graph;
  const bool ready = captured && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  double us = -1;
  bool replayed = ready;
  if (ready)
    us = median_time_us([&](int) { replayed = cudaGraphLaunch(exec, s) == cudaSuccess && replayed; }, 1, reps, s) / launches;
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  // Clear what capture, instantiation or replay left for the caller's next launch; a replay that
  // failed timed nothing (its events would rank it first).
  if (cudaGetLastError() != cudaSuccess || !replayed) us = -1;
  return us;
}

double copy_bandwidth_gbs(size_t bytes, cudaStream_t s) {
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
    cudaFree(a);
    return 0;
  }
  fill_random_bytes(a, bytes, 1, s);
  const double us = median_time_us([&](int) { cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s); }, 3, 20, s);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * double(bytes) / (us * 1e-6) / 1e9;
}

namespace {

__device__ uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void fill_bytes_kernel(uint8_t* p, size_t n, uint64_t seed) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n / 8; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t v = mix(seed ^ mix(i));
    // Keep every byte non-zero and f16 scale fields finite: clear bit 6 of each byte (so any
    // two bytes read as an f16 have exponent < 31) and set bit 0.
    v = (v & 0xBFBFBFBFBFBFBFBFull) | 0x0101010101010101ull;
    reinterpret_cast<uint64_t*>(p)[i] = v;
  }
  if (blockIdx.x == 0 && threadIdx.x < n % 8) p[n / 8 * 8 + threadIdx.x] = 0x11;
}

__global__ void fill_floats_kernel(float* p, size_t n, uint64_t seed, float scale) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t v = mix(seed ^ mix(i));
    p[i] = scale * (float(int32_t(v >> 32)) * 4.656612873e-10f);  // uniform in [-scale, scale)
  }
}

}  // namespace

void fill_random_bytes(void* dst, size_t n, uint64_t seed, cudaStream_t s) {
  fill_bytes_kernel<<<1024, 256, 0, s>>>(static_cast<uint8_t*>(dst), n, seed);
}

void fill_random_floats(float* dst, size_t n, uint64_t seed, float scale, cudaStream_t s) {
  fill_floats_kernel<<<1024, 256, 0, s>>>(dst, n, seed, scale);
}

size_t l2_cache_bytes() {
  int dev = 0, l2 = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
  return size_t(l2);
}

int rotation_copies(size_t bytes) {
  return int(std::clamp<size_t>(2 * l2_cache_bytes() / std::max<size_t>(bytes, 1) + 1, 1, 64));
}

}  // namespace lamina::kernels

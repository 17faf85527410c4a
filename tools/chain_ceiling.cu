// lamina_chain_ceiling: what a decode step's kernel chain can reach at best on this GPU, with no
// GEMV arithmetic at all — the yardstick for the decode GEMVs' in-chain times.
//
//   1. Boundary floor: a CUDA graph of 200 trivial dependent kernels (one block of 512 threads
//      per SM, each reading a value the kernel before wrote), plain and with programmatic
//      dependent launch, against one persistent kernel that does the same 200 steps with a grid
//      barrier (atomic counter, acquire polling) between them.
//   2. Streaming ceiling: a graph of 48 back-to-back read-only kernels (PDL, waiting before
//      their loads like a kernel whose first loads overlap nothing) over matrices of the decode
//      GEMVs' sizes (9, 25, 50 MiB; 200 MiB as the large-matrix reference), rotated over buffers
//      that exceed the L2; U 16-byte loads in flight per thread, 1 or 2 blocks of 512 per SM,
//      grid-strided or in one contiguous slab per block (as a GEMV's rows).
// Times are medians of 15 launches (kernels/common/timing.h: graph_time_us, median_time_us).
#include "kernels/common/timing.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int kThreads = 512;
constexpr int kSteps = 200;   // dependent steps of the boundary measurement
constexpr int kKernels = 48;  // streaming kernels per graph
constexpr int kReps = 15;     // timed graph launches (median)

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// in, out: [gridDim.x]; block b reads another block's value of the kernel before.
__global__ void step_kernel(const unsigned* in, unsigned* out, int pdl) {
  if (pdl) pdl_wait();
  const unsigned v = in[(blockIdx.x * 7 + 3) % gridDim.x];
  __syncthreads();
  if (pdl) pdl_trigger();
  if (threadIdx.x == 0) out[blockIdx.x] = v + 1;
}

// The same steps in one kernel; count: zero at launch, gridDim.x * steps at the end.
__global__ void persistent_steps(unsigned* buf, unsigned* count, int steps) {
  for (int s = 0; s < steps; ++s) {
    const unsigned* in = buf + (s & 1) * 1024;
    unsigned* out = buf + ((s + 1) & 1) * 1024;
    const unsigned v = __ldcg(in + (blockIdx.x * 7 + 3) % gridDim.x);
    if (threadIdx.x == 0) out[blockIdx.x] = v + 1;
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(count, 1u);
      const unsigned target = gridDim.x * unsigned(s + 1);
      unsigned seen = 0;
      do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(count)); while (seen < target);
    }
    __syncthreads();
  }
}

// w: [n16] 16-byte words read once; sink written only if the xor matches (never, in practice).
template <int U>
__global__ void __launch_bounds__(kThreads) stream_kernel(const uint4* __restrict__ w, size_t n16, unsigned* sink, int slab) {
  pdl_wait();
  unsigned acc = 0;
  size_t first, stop, step, lane_stride;
  if (slab) {  // block b reads [b * per, (b + 1) * per)
    const size_t per = (n16 + gridDim.x - 1) / gridDim.x;
    const size_t end = size_t(blockIdx.x + 1) * per;
    first = blockIdx.x * per + threadIdx.x, stop = end < n16 ? end : n16;
    lane_stride = blockDim.x;
  } else {
    first = size_t(blockIdx.x) * blockDim.x + threadIdx.x, stop = n16;
    lane_stride = size_t(gridDim.x) * blockDim.x;
  }
  step = lane_stride * U;
  for (size_t base = first; base < stop; base += step) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t i = base + u * lane_stride;
      v[u] = i < stop ? __ldcs(w + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x + v[u].w;
  }
  pdl_trigger();
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

template <class Kernel, class... Args>
void launch(Kernel k, unsigned grid, bool pdl, cudaStream_t s, Args... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid, cfg.blockDim = kThreads, cfg.stream = s, cfg.attrs = &attr, cfg.numAttrs = 1;
  cudaLaunchKernelEx(&cfg, k, args...);
}

template <int U>
void stream_row(int sms, int per_sm, int slab, size_t mib, const std::vector<uint4*>& ws, unsigned* sink, cudaStream_t s) {
  const size_t bytes = mib << 20;
  const double us = lamina::kernels::graph_time_us(
      [&](int i) {
        launch(stream_kernel<U>, unsigned(sms * per_sm), true, s, static_cast<const uint4*>(ws[size_t(i) % ws.size()]),
               bytes / 16, sink, slab);
      },
      kKernels, kReps, s);
  std::printf("| %4zu | %2d | %d | %-7s | %8.2f | %6.0f |\n", mib, U, per_sm, slab ? "slab" : "strided", us, double(bytes) / us * 1e-3);
}

}  // namespace

int main() {
  int dev = 0, sms = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    std::fprintf(stderr, "lamina_chain_ceiling: no CUDA device\n");
    return 1;
  }
  sms = prop.multiProcessorCount;
  std::printf("%s, %d SMs, L2 %d MiB\n\n", prop.name, sms, prop.l2CacheSize >> 20);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  unsigned *buf = nullptr, *count = nullptr;
  cudaMalloc(&buf, 2 * 1024 * sizeof(unsigned));
  cudaMalloc(&count, sizeof(unsigned));
  cudaMemset(buf, 0, 2 * 1024 * sizeof(unsigned));

  std::printf("| boundary | µs per step |\n|---|---|\n");
  for (int pdl = 0; pdl < 2; ++pdl) {
    const double us = lamina::kernels::graph_time_us(
        [&](int i) { launch(step_kernel, unsigned(sms), pdl != 0, s, buf + (i & 1) * 1024, buf + ((i + 1) & 1) * 1024, pdl); },
        kSteps, kReps, s);
    std::printf("| graph of trivial kernels, %s | %.2f |\n", pdl ? "PDL" : "plain", us);
  }
  // The barrier targets count from zero: count is reset before every launch (a memset node).
  const double persistent_us = lamina::kernels::median_time_us(
      [&](int) {
        cudaMemsetAsync(count, 0, sizeof(unsigned), s);
        launch(persistent_steps, unsigned(sms), false, s, buf, count, kSteps);
      },
      1, kReps, s);
  std::printf("| one persistent kernel, grid barrier | %.2f |\n\n", persistent_us / kSteps);

  std::vector<uint4*> ws(6, nullptr);
  for (auto& w : ws) {
    if (cudaMalloc(&w, size_t(200) << 20) != cudaSuccess) {
      std::fprintf(stderr, "lamina_chain_ceiling: out of GPU memory\n");
      return 1;
    }
    lamina::kernels::fill_random_bytes(w, size_t(200) << 20, uintptr_t(w), s);
  }
  std::printf("| MiB | U | blocks/SM | pattern | µs per kernel | GB/s |\n|---|---|---|---|---|---|\n");
  for (size_t mib : {9, 25, 50, 200})
    for (int slab : {0, 1}) {
      stream_row<1>(sms, 1, slab, mib, ws, buf, s);
      stream_row<4>(sms, 1, slab, mib, ws, buf, s);
      stream_row<8>(sms, 1, slab, mib, ws, buf, s);
      stream_row<4>(sms, 2, slab, mib, ws, buf, s);
      stream_row<8>(sms, 2, slab, mib, ws, buf, s);
    }
  for (auto& w : ws) cudaFree(w);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    std::fprintf(stderr, "lamina_chain_ceiling: %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}

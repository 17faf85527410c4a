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
//   3. Overlap with the kernel before (9, 25, 50 MiB, one block per SM, slabs): kernels that
//      trigger their dependents at their start and are small enough to share an SM with the
//      next one — plain loads with the first U loads issued before the wait, and a TMA ring of
//      shared-memory stages filled by a producer thread that never waits — triggering at their
//      end or start.
// Times are medians of 15 launches (kernels/common/timing.h: graph_time_us, median_time_us).
#include "kernels/common/pdl.cuh"
#include "kernels/common/tma.cuh"
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

using lamina::kernels::pdl_launch_dependents;
using lamina::kernels::pdl_wait;

// in, out: [gridDim.x]; block b reads another block's value of the kernel before.
__global__ void step_kernel(const unsigned* in, unsigned* out, int pdl) {
  if (pdl) pdl_wait();
  const unsigned v = in[(blockIdx.x * 7 + 3) % gridDim.x];
  __syncthreads();
  if (pdl) pdl_launch_dependents();
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
// kEarly: trigger the next kernel at the start and wait only once the first U loads are out
// (with slab: the plain-loads row of part 3); else wait first and trigger at the end.
template <int U, bool kEarly = false>
__global__ void __launch_bounds__(kThreads) stream_kernel(const uint4* __restrict__ w, size_t n16, unsigned* sink, int slab) {
  if (kEarly) pdl_launch_dependents();
  else pdl_wait();
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
  bool waiting = kEarly;
  for (size_t base = first; base < stop; base += step) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const size_t i = base + u * lane_stride;
      v[u] = i < stop ? __ldcs(w + i) : make_uint4(0, 0, 0, 0);
    }
    if (waiting) pdl_wait(), waiting = false;
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x + v[u].w;
  }
  if (waiting) pdl_wait();
  if (!kEarly) pdl_launch_dependents();
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

// The same reading through a ring of shared-memory stages filled by the TMA engine
// (cp.async.bulk) from one producer thread: the producer does not wait for the kernel before
// (weights never depend on it), so the ring fills while that kernel still runs when this block
// can be resident beside it (ring small enough for two blocks per SM). The consumers (8 warps)
// wait, then read each stage and free it. trigger: 0 at the end, 1 at the start (the next
// kernel's blocks may then become resident and fill their rings at once).
constexpr int kRingConsumers = 8;
constexpr int kRingThreads = 32 * (kRingConsumers + 1);
constexpr int kRingMaxStages = 16;

__global__ void __launch_bounds__(kRingThreads) ring_kernel(const uint8_t* __restrict__ w, size_t bytes, unsigned* sink,
                                                            int stages, int stage_bytes, int trigger) {
  namespace tma = lamina::kernels::tma;
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ uint64_t full[kRingMaxStages], empty[kRingMaxStages];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t per = (bytes / 16 + gridDim.x - 1) / gridDim.x * 16;
  const size_t start = size_t(blockIdx.x) * per, end = start + per < bytes ? start + per : bytes;
  const int chunks = start < end ? int((end - start + stage_bytes - 1) / stage_bytes) : 0;
  if (trigger == 1) pdl_launch_dependents();
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) tma::mbar_init(&full[s], 1), tma::mbar_init(&empty[s], kRingConsumers);
    tma::mbar_fence_init();
  }
  __syncthreads();
  if (warp == 0) {
    if (lane == 0) {
      const uint64_t policy = lamina::kernels::tma::evict_first_policy();
      for (int c = 0; c < chunks; ++c) {
        const int slot = c % stages, round = c / stages;
        if (round > 0) tma::mbar_wait(&empty[slot], (round - 1) & 1);
        const size_t off = start + size_t(c) * stage_bytes;
        const uint32_t n = uint32_t(end - off < size_t(stage_bytes) ? end - off : size_t(stage_bytes));
        tma::mbar_arrive_expect_tx(&full[slot], n);
        tma::load_1d(ring + size_t(slot) * stage_bytes, w + off, n, &full[slot], policy);
      }
    }
    return;
  }
  pdl_wait();
  unsigned acc = 0;
  const int t = threadIdx.x - 32;
  for (int c = 0; c < chunks; ++c) {
    const int slot = c % stages, round = c / stages;
    tma::mbar_wait(&full[slot], round & 1);
    const size_t off = start + size_t(c) * stage_bytes;
    const int n16 = int((end - off < size_t(stage_bytes) ? end - off : size_t(stage_bytes)) / 16);
    const uint4* q = reinterpret_cast<const uint4*>(ring + size_t(slot) * stage_bytes);
    for (int i = t; i < n16; i += 32 * kRingConsumers) acc ^= q[i].x + q[i].w;
    __syncwarp();
    if (lane == 0) tma::mbar_arrive(&empty[slot]);
  }
  if (trigger == 0) pdl_launch_dependents();
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

template <class Kernel, class... Args>
void launch_sized(Kernel k, unsigned grid, unsigned threads, size_t smem, bool pdl, cudaStream_t s, Args... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid, cfg.blockDim = threads, cfg.dynamicSmemBytes = smem, cfg.stream = s, cfg.attrs = &attr, cfg.numAttrs = 1;
  cudaLaunchKernelEx(&cfg, k, args...);
}

template <class Kernel, class... Args>
void launch(Kernel k, unsigned grid, bool pdl, cudaStream_t s, Args... args) {
  launch_sized(k, grid, kThreads, 0, pdl, s, args...);
}

void ring_row(int sms, int stages, int stage_kib, int trigger, size_t mib, const std::vector<uint4*>& ws, unsigned* sink,
              cudaStream_t s) {
  const size_t bytes = mib << 20, smem = size_t(stages) * stage_kib * 1024;
  cudaFuncSetAttribute(ring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  cudaFuncSetAttribute(ring_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
  int per_sm = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ring_kernel, kRingThreads, smem);
  const double us = lamina::kernels::graph_time_us(
      [&](int i) {
        launch_sized(ring_kernel, unsigned(sms), kRingThreads, smem, true, s,
                     reinterpret_cast<const uint8_t*>(ws[size_t(i) % ws.size()]), bytes, sink, stages, stage_kib * 1024, trigger);
      },
      kKernels, kReps, s);
  std::printf("| %4zu | ring %2d x %2d KiB (%d/SM fit) | %s | %8.2f | %6.0f |\n", mib, stages, stage_kib, per_sm,
              trigger ? "start" : "end", us, double(bytes) / us * 1e-3);
}

template <int U>
void early_row(int sms, size_t mib, const std::vector<uint4*>& ws, unsigned* sink, cudaStream_t s) {
  const size_t bytes = mib << 20;
  const double us = lamina::kernels::graph_time_us(
      [&](int i) {
        launch(stream_kernel<U, true>, unsigned(sms), true, s, static_cast<const uint4*>(ws[size_t(i) % ws.size()]), bytes / 16,
               sink, 1);
      },
      kKernels, kReps, s);
  std::printf("| %4zu | early loads U=%d | start | %8.2f | %6.0f |\n", mib, U, us, double(bytes) / us * 1e-3);
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
  std::printf("\n| MiB | kernel | trigger | µs per kernel | GB/s |\n|---|---|---|---|---|\n");
  for (size_t mib : {9, 25, 50}) {
    early_row<4>(sms, mib, ws, buf, s);
    early_row<8>(sms, mib, ws, buf, s);
    for (int trigger : {0, 1}) {
      ring_row(sms, 4, 16, trigger, mib, ws, buf, s);
      ring_row(sms, 6, 16, trigger, mib, ws, buf, s);
      ring_row(sms, 3, 32, trigger, mib, ws, buf, s);
      ring_row(sms, 12, 16, trigger, mib, ws, buf, s);
    }
  }
  for (auto& w : ws) cudaFree(w);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    std::fprintf(stderr, "lamina_chain_ceiling: %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}

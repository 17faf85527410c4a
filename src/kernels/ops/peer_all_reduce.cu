// The one-shot peer all-reduce (peer_all_reduce.h says the layout and the protocol).
#include "kernels/ops/peer_all_reduce.h"

#include "kernels/common/launch_status.h"

#include <cuda/atomic>
#include <cuda_runtime.h>

#include <algorithm>

namespace lamina::kernels {

namespace {

constexpr int kThreads = 512;
constexpr int64_t kPerBlock = 2048;        // elements a block takes before another is added
constexpr long long kTimeoutCycles = 20000000000LL;  // ~10 s at 2 GHz: a rank that never comes

__global__ void __launch_bounds__(kThreads) peer_all_reduce_kernel(PeerAllReduce g, float* __restrict__ x, int64_t n) {
  const int b = blockIdx.x, nb = gridDim.x;
  const int64_t per = (n + nb - 1) / nb, lo = b * per, hi = min(n, lo + per);
  const uint32_t e = g.epoch[b] + 1;
  const size_t parity = e & 1;
  // 1. This rank's range into its slot on every rank (its own included).
  for (int p = 0; p < g.ranks; ++p) {
    float* dst = g.slots[p] + (parity * g.ranks + g.rank) * g.max_elems;
    for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) dst[i] = x[i];
  }
  __threadfence_system();
  __syncthreads();
  // 2. Publish the epoch to every rank, then wait for every sender's.
  if (threadIdx.x < g.ranks) {
    cuda::atomic_ref<uint32_t, cuda::thread_scope_system> out(g.flags[threadIdx.x][g.rank * kPeerMaxBlocks + b]);
    out.store(e, cuda::memory_order_release);
    cuda::atomic_ref<uint32_t, cuda::thread_scope_system> in(g.flags[g.rank][threadIdx.x * kPeerMaxBlocks + b]);
    const long long t0 = clock64();
    while (int32_t(in.load(cuda::memory_order_acquire) - e) < 0)
      if (clock64() - t0 > kTimeoutCycles) __trap();
  }
  __syncthreads();
  // 3. The sum in rank order, read past L1 (the slots are written by other GPUs).
  const float* mine = g.slots[g.rank] + parity * g.ranks * g.max_elems;
  for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) {
    float v = __ldcg(mine + i);
    for (int q = 1; q < g.ranks; ++q) v += __ldcg(mine + q * g.max_elems + i);
    x[i] = v;
  }
  if (threadIdx.x == 0) g.epoch[b] = e;
}

}  // namespace

Status peer_all_reduce(const PeerAllReduce& g, float* x, int64_t n, cudaStream_t s) {
  if (g.ranks < 1 || g.ranks > kPeerMaxRanks || g.rank < 0 || g.rank >= g.ranks || !g.epoch)
    return Status::error("peer_all_reduce: bad group");
  if (!x || n < 0 || n > g.max_elems) return Status::error("peer_all_reduce: vector larger than the slots");
  if (n == 0) return Status::success();
  const int blocks = int(std::clamp<int64_t>((n + kPerBlock - 1) / kPerBlock, 1, kPeerMaxBlocks));
  peer_all_reduce_kernel<<<blocks, kThreads, 0, s>>>(g, x, n);
  return launch_status("peer_all_reduce");
}

}  // namespace lamina::kernels

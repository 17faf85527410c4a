// The one-shot peer all-reduce (peer_all_reduce.h says the layout and the protocol).
#include "kernels/ops/peer_all_reduce.h"

#include "kernels/common/launch_status.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/q8_blocks.cuh"
#include "kernels/ops/add_norm_row.cuh"

#include <cuda/atomic>
#include <cuda_runtime.h>

namespace lamina::kernels {

namespace {

constexpr int kThreads = 512;
constexpr long long kTimeoutCycles = 20000000000LL;  // ~10 s at 2 GHz: a rank that never comes

// This rank's part[lo, hi) to every other rank for call e: each element one word (epoch << 32 |
// value bits) in one relaxed store at system scope (peer_all_reduce.h: the protocol).
__device__ void send(const PeerAllReduce& g, const float* __restrict__ part, int64_t lo, int64_t hi, uint32_t e) {
  const size_t parity = e & 1;
  for (int p = 0; p < g.ranks; ++p) {
    if (p == g.rank) continue;
    uint64_t* dst = g.slots[p] + (parity * g.ranks + g.rank) * g.max_elems;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      cuda::atomic_ref<uint64_t, cuda::thread_scope_system> word(dst[i]);
      word.store(uint64_t(e) << 32 | __float_as_uint(part[i]), cuda::memory_order_relaxed);
    }
  }
}

// The epoch of the call after `last`. 0 is never one: it is what a word holds before its first
// send and after it was consumed. The 2^32-th call goes on at 2, the parity still alternating.
__device__ __forceinline__ uint32_t next_epoch(uint32_t last) {
  const uint32_t e = last + 1;
  return e == 0 ? 2 : e;
}

// Element i of call e summed over the ranks in rank order: this rank's from part, the others'
// from their words, awaited in this GPU's memory until they hold e, then zeroed. A word that is
// not zero holds the one send not yet consumed, so an epoch seen again after 2^32 calls never
// matches a word left from the last time (an element beyond the widths of the calls since). The
// same bits on every rank. A rank that never sends stops the kernel after ~10 s with a trap.
__device__ __forceinline__ float rank_sum(const PeerAllReduce& g, const float* __restrict__ part, int64_t i, uint32_t e) {
  uint64_t* mine = g.slots[g.rank] + (e & 1) * g.ranks * g.max_elems;
  float v = 0.f;
  for (int q = 0; q < g.ranks; ++q) {
    float t;
    if (q == g.rank) {
      t = part[i];
    } else {
      cuda::atomic_ref<uint64_t, cuda::thread_scope_system> word(mine[q * g.max_elems + i]);
      uint64_t w = word.load(cuda::memory_order_relaxed);
      const long long t0 = clock64();
      while (uint32_t(w >> 32) != e) {
        if (clock64() - t0 > kTimeoutCycles) __trap();
        w = word.load(cuda::memory_order_relaxed);
      }
      t = __uint_as_float(uint32_t(w));
      word.store(0, cuda::memory_order_relaxed);  // (the sender's next write here is call e + 2's)
    }
    v = q == 0 ? t : v + t;
  }
  return v;
}

// Block b's share of n elements in whole 32-element blocks: [lo, hi) in units of 32.
struct Slice32 {
  int64_t lo, hi;
};
__device__ __forceinline__ Slice32 slice32(int64_t n, int b, int nb) {
  const int64_t blocks32 = n / 32, per = (blocks32 + nb - 1) / nb, lo = min(blocks32, b * per);
  return {lo, min(blocks32, lo + per)};
}

__global__ void __launch_bounds__(kThreads) peer_all_reduce_kernel(PeerAllReduce g, float* __restrict__ x, int64_t n) {
  const int b = blockIdx.x, nb = gridDim.x;
  const int64_t per = (n + nb - 1) / nb, lo = min(n, b * per), hi = min(n, lo + per);
  const uint32_t e = next_epoch(g.epoch[b]);
  send(g, x, lo, hi, e);
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) x[i] = rank_sum(g, x, i, e);  // (x[i]: this thread's own)
  if (threadIdx.x == 0) g.epoch[b] = e;
}

// One decode row's all-reduce and residual add with the next norm left pending: block b of the
// grid takes whole 32-element blocks of x (kX8Threads / 32 at a time, one per warp), sends their
// partial sums to the other ranks, and its warps write x (as the others' words arrive), the
// int8 blocks of x * gain and each block's sum of squares of x (what a MatmulAddNorm's GEMV
// leaves for the GEMVs that take a pending norm). kPeerMaxBlocks blocks, so that the sends and the
// sums of several SMs overlap; no block-wide norm.
constexpr int kX8Threads = 256;

__global__ void __launch_bounds__(kX8Threads)
    peer_all_reduce_add_x8_kernel(PeerAllReduce g, const float* __restrict__ part, float* __restrict__ x,
                                  const float* __restrict__ gain, int64_t n, uint8_t* __restrict__ x8,
                                  double* __restrict__ ss) {
  pdl_enter();  // (the next GEMV may be scheduled now: it waits for this kernel in turn)
  const int b = blockIdx.x;
  const Slice32 sl = slice32(n, b, gridDim.x);
  const uint32_t e = next_epoch(g.epoch[b]);
  send(g, part, sl.lo * 32, sl.hi * 32, e);
  const int lane = threadIdx.x % 32;
  for (int64_t blk = sl.lo + threadIdx.x / 32; blk < sl.hi; blk += kX8Threads / 32) {
    const int64_t i = blk * 32 + lane;
    const float v = x[i] + rank_sum(g, part, i, e);  // the bits of peer_all_reduce, then add
    x[i] = v;
    quantize_block32_ss(v, gain[i], n, blk, x8, ss + blk);
  }
  if (threadIdx.x == 0) g.epoch[b] = e;
}

// The wide rows' kernel (peer_all_reduce_add_norm in the header); its grid barrier's counter
// advances by kPeerMaxBlocks every call.
__global__ void __launch_bounds__(kX8Threads)
    peer_all_reduce_add_norm_kernel(PeerAllReduce g, const float* __restrict__ part, float* __restrict__ x,
                                    const float* __restrict__ w, int64_t n, float eps, float* __restrict__ h,
                                    uint8_t* __restrict__ h8) {
  pdl_enter();  // (the next GEMV may be scheduled now: it waits for this kernel in turn)
  constexpr int kWarps = kX8Threads / 32;
  __shared__ double red[kWarps];
  __shared__ double total;
  const int b = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const Slice32 sl = slice32(n, b, kPeerMaxBlocks);
  const uint32_t e = next_epoch(g.epoch[b]);
  send(g, part, sl.lo * 32, sl.hi * 32, e);
  double ss = 0;
  for (int64_t blk = sl.lo + warp; blk < sl.hi; blk += kWarps) {
    const int64_t i = blk * 32 + lane;
    const float v = x[i] + rank_sum(g, part, i, e);
    x[i] = v;
    ss += double(v) * v;
  }
  ss = block_sum(ss, red);  // (add_norm_row.cuh)
  if (threadIdx.x == 0) {
    g.block_ss[b] = ss;
    __threadfence();  // the slice's sum is in before the block is counted
    cuda::atomic_ref<uint32_t, cuda::thread_scope_device> arrived(*g.arrived);
    const uint32_t target = (arrived.fetch_add(1u, cuda::memory_order_acq_rel) / kPeerMaxBlocks + 1) * kPeerMaxBlocks;
    const long long t0 = clock64();
    while (int32_t(arrived.load(cuda::memory_order_acquire) - target) < 0)
      if (clock64() - t0 > kTimeoutCycles) __trap();
    double all = 0;
    for (int k = 0; k < kPeerMaxBlocks; ++k) all += __ldcg(g.block_ss + k);  // block order: every block's bits
    total = all;
  }
  __syncthreads();
  const float sc = float(1.0 / sqrt(total / double(n) + double(eps)));
  for (int64_t blk = sl.lo + warp; blk < sl.hi; blk += kWarps) {  // (each thread reads back the x it wrote)
    const int64_t i = blk * 32 + lane;
    const float v = x[i] * sc * w[i];
    h[i] = v;
    if (h8) quantize_block32(v, n, blk, h8);
  }
  if (threadIdx.x == 0) g.epoch[b] = e;
}

// The group's fields a kernel of the family relies on.
bool group_ok(const PeerAllReduce& g) {
  return g.ranks >= 1 && g.ranks <= kPeerMaxRanks && g.rank >= 0 && g.rank < g.ranks && g.epoch;
}

}  // namespace

Status peer_all_reduce_add_norm(const PeerAllReduce& g, const float* part, float* x, const float* w, int64_t n,
                                float eps, float* h, void* h8, cudaStream_t s) {
  if (!group_ok(g) || !g.arrived || !g.block_ss) return Status::error("peer_all_reduce_add_norm: bad group");
  if (!part || !x || !w || !h || n <= 0 || n % 32 || n > g.max_elems)
    return Status::error("peer_all_reduce_add_norm: bad vector (n % 32 == 0, n <= the slots, w and h needed)");
  launch_pdl(peer_all_reduce_add_norm_kernel, kPeerMaxBlocks, kX8Threads, 0, s, g, part, x, w, n, eps, h,
             static_cast<uint8_t*>(h8));
  return launch_status("peer_all_reduce_add_norm");
}

Status peer_all_reduce_add_x8(const PeerAllReduce& g, const float* part, float* x, const float* gain, int64_t n,
                              void* x8, double* ss, cudaStream_t s) {
  if (!group_ok(g)) return Status::error("peer_all_reduce_add_x8: bad group");
  if (!part || !x || !gain || !x8 || !ss || n <= 0 || n % 32 || n > g.max_elems)
    return Status::error("peer_all_reduce_add_x8: bad vector (n % 32 == 0, n <= the slots, gain, x8 and ss needed)");
  launch_pdl(peer_all_reduce_add_x8_kernel, kPeerMaxBlocks, kX8Threads, 0, s, g, part, x, gain, n, static_cast<uint8_t*>(x8),
             ss);
  return launch_status("peer_all_reduce_add_x8");
}

Status peer_all_reduce(const PeerAllReduce& g, float* x, int64_t n, cudaStream_t s) {
  if (!group_ok(g)) return Status::error("peer_all_reduce: bad group");
  if (!x || n < 0 || n > g.max_elems) return Status::error("peer_all_reduce: vector larger than the slots");
  if (n == 0) return Status::success();
  peer_all_reduce_kernel<<<kPeerMaxBlocks, kThreads, 0, s>>>(g, x, n);  // (one grid size: the header says why)
  return launch_status("peer_all_reduce");
}

}  // namespace lamina::kernels

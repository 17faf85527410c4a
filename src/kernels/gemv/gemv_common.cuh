// Device helpers shared by the GEMV variants.
#pragma once

#include "core/half.h"
#include "kernels/common/activations.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/common/q8_blocks.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/gemv/gemv.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace lamina::kernels::gemv_detail {

// Weight element types of the float family and their conversion to f32.
template <class T> __device__ __forceinline__ float to_float(T v);
template <> __device__ __forceinline__ float to_float<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

// 16 bytes streamed from global memory, bypassing L1 and marked evict-first in L2: weights are
// read exactly once per GEMV, so they should not displace x, y or the next layer's data.
// (PTX takes .L2::evict_first directly only on 256-bit loads; 128-bit loads carry it as a
// createpolicy cache hint: tma::evict_first_policy.)
using tma::evict_first_policy;

__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(evict_first_policy()));
  return v;
}

// load_stream's 8-byte form (the 2- and 3-bit planes' quants of one block).
__device__ __forceinline__ uint2 load_stream8(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v2.u32 {%0,%1}, [%2], %3;"
               : "=r"(v.x), "=r"(v.y)
               : "l"(p), "l"(evict_first_policy()));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The epilogue every production variant applies to one output: bias, residual, or act(gate) *
// up (silu, or gelu when gelu is set); and, with y8, the int8-block copy of y (publish_y8 below).
struct Epilogue {
  const float* bias;
  const float* residual;
  bool gate_up;
  bool gelu;
  uint8_t* y8;         // GemvProblem::y8 when the variant makes it itself, else null
  unsigned* y8_count;  // [n / 32] counters, zero between launches
  const float* y8_gain;  // [n] or null: y8 holds the blocks of y * y8_gain
  double* y8_ss;         // [batch][n / 32] or null: each block's sum of squares of y
  GemvArgmax argmax;     // GemvProblem::argmax when the variant makes it (argmax.id set), else empty
  __device__ __forceinline__ float apply(float acc, float up, int64_t row, int64_t b, int64_t n) const {
    float v = gate_up ? glu(acc, up, gelu) : acc;
    if (bias) v += bias[row];
    if (residual) v += residual[b * n + row];
    return v;
  }
};

inline Epilogue epilogue_of(const GemvProblem& p) {
  const bool y8 = p.y8 && p.y8_count;
  return {p.bias,          p.residual, p.w_up != nullptr, p.gelu, y8 ? static_cast<uint8_t*>(p.y8) : nullptr,
          y8 ? p.y8_count : nullptr, y8 ? p.y8_gain : nullptr, y8 ? p.y8_ss : nullptr, p.argmax};
}

// GemvProblem::argmax made by the GEMV (writes_argmax): lane 0 of a warp keeps the best key of
// the rows it stores (argmax_key: value order in the high word, lower rows higher in the low
// word); argmax_finish, reached by every thread of the block after its last pass, combines the
// block's warps, adds the block's best to the global key, and the block that counts last
// publishes the id and leaves key and count zero for the next launch.
__device__ __forceinline__ unsigned long long argmax_key(float v, int64_t row) {
  if (!(v > -3.402823466e38f)) return 0;  // not above -FLT_MAX (NaN included): never wins
  const uint32_t u = __float_as_uint(v);
  const uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(ord) << 32) | (0xFFFFFFFFu - uint32_t(row));
}

__device__ __forceinline__ void argmax_finish(const GemvArgmax& a, unsigned long long best) {
  __shared__ unsigned long long warp_best[32];
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (threadIdx.x % 32 == 0) warp_best[warp] = best;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < warps; ++w) best = warp_best[w] > best ? warp_best[w] : best;
  if (best) atomicMax(a.key, best);
  __threadfence();  // this block's best is in before it is counted
  if (atomicAdd(a.count, 1u) != gridDim.x - 1) return;
  __threadfence();
  const unsigned long long k = atomicExch(a.key, 0ull);
  *a.count = 0;
  const int32_t id = k ? int32_t(0xFFFFFFFFu - uint32_t(k)) : 0;
  a.id[a.parity ? *a.parity & 1 : 0] = id;
  if (a.id2) *a.id2 = id;
}


// Block blk (32 rows) of y's int8 copy for every batch row, made by one warp: lane i holds
// value(b) = y[b][blk * 32 + i]; the blocks are those of y * y8_gain when a gain is set, and with
// y8_ss each block's sum of squares of y is stored too.
// (write_y8_gained: the same with the lane's gain given, 1 when ep.y8_gain is null.)
template <class Value>
__device__ __forceinline__ void write_y8_gained(const Epilogue& ep, int64_t blk, int64_t n, int batch, Value value,
                                                float gain) {
  for (int b = 0; b < batch; ++b)
    quantize_block32_ss(value(b), ep.y8_gain ? gain : 1.f, n, blk, ep.y8 + size_t(b) * x8_bytes(n),
                        ep.y8_ss ? ep.y8_ss + b * (n / 32) + blk : nullptr);
}

template <class Value>
__device__ __forceinline__ void write_y8_block(const Epilogue& ep, int64_t blk, int64_t n, int batch, Value value) {
  write_y8_gained(ep, blk, n, batch, value, ep.y8_gain ? ep.y8_gain[blk * 32 + threadIdx.x % 32] : 1.f);
}

// The int8-block copy of y, made by the warps that write y: a warp that has stored its rows
// (kRows of them, row0 a multiple of kRows, kRows dividing 32, n a multiple of 32: all in one
// 32-row block) adds them to the block's counter; the warp that completes the block reads it
// back from L2, quantises it like any x8 producer (q8_blocks.cuh) and zeroes the counter for the
// next launch. y: [batch][n];  y8: [batch][x8_bytes(n)].
__device__ __forceinline__ void publish_y8(const float* y, const Epilogue& ep, int64_t row0, int rows, int64_t n,
                                           int batch) {
  const int lane = threadIdx.x % 32;
  const int64_t blk = row0 / 32;
  unsigned before = 0;
  if (lane == 0) {
    __threadfence();  // lane 0 stored this warp's rows: make them visible before counting them
    before = atomicAdd(ep.y8_count + blk, unsigned(rows));
  }
  if (__shfl_sync(0xffffffffu, before, 0) + unsigned(rows) != 32) return;
  __threadfence();  // the block is complete: the other warps' rows are visible from here on
  write_y8_block(ep, blk, n, batch, [&](int b) { return __ldcg(y + b * n + blk * 32 + lane); });
  if (lane == 0) ep.y8_count[blk] = 0;
}

// The RMS scale of x from its blocks' sums of squares (GemvProblem::x8_ss, batch row 0,
// k <= kX8SsMaxK: 4 per lane): 1 / sqrt(sum / k + eps), the same value in every lane. RmsParts
// holds the lane's loads, issued early (after the PDL wait) and summed when the epilogue first
// needs them; later passes reuse the sum (a double reduction, sqrt and division per pass had cost
// every pass of a persistent GEMV the latency of that chain).
struct RmsParts {
  static_assert(kX8SsMaxK <= 4 * 32 * 32, "RmsParts holds 4 block sums per lane");
  double p[4];
  float cached = 0.f;  // the scale once summed (never 0 otherwise); the same in every lane
  __device__ __forceinline__ void load(const double* ss, int64_t k) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int u = 0; u < 4; ++u) p[u] = ss && lane + 32 * u < k / 32 ? ss[lane + 32 * u] : 0.0;
  }
  __device__ __forceinline__ float scale(int64_t k, float eps) {
    if (cached != 0.f) return cached;  // (warp-uniform)
    double t = (p[0] + p[1]) + (p[2] + p[3]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    cached = float(1.0 / sqrt(t / double(k) + double(eps)));
    return cached;
  }
};

// The int8-block copy of y made inside one thread block, for kernels whose block covers whole
// 32-row blocks of y in every pass (warps x rows per warp = 32, n a multiple of 32): each warp
// has put its rows' outputs in yv (shared memory, [batch][32]); after a barrier warp 0
// quantises them. No global counters, fences or L2 re-reads (publish_y8). The caller
// alternates two yv buffers between passes, so one barrier per pass suffices. The barrier is
// the whole block's, or with `threads` > 0 a named barrier of the block's first `threads`
// threads (a kernel whose other warps have left, as q_dp4a_ring's producer).
__device__ __forceinline__ void publish_y8_block(const float (*yv)[32], const Epilogue& ep, int64_t blk, int64_t n,
                                                 int batch, int threads = 0) {
  if (threads) tma::named_barrier_sync(1, threads);
  else __syncthreads();
  if (threadIdx.x >= 32) return;
  write_y8_block(ep, blk, n, batch, [&](int b) { return yv[b][threadIdx.x]; });
}

// The int8-block copy of y for the kBlock32 kernels that keep weights in flight across their
// epilogue (decode's overlapping q_dp4a instances, q_dp4a_slots): pass p's 32 outputs go to buffer
// p % kY8Bufs; each warp counts itself in when it has stored its rows (`arrived`), and the warp
// that completes the pass quantises it and counts the buffer's use done. A warp waits only before
// writing a buffer whose use kY8Bufs passes back is not yet done (a warp that far ahead of the
// slowest). The form before, a rotating warp waiting at a named barrier for the whole block every
// pass, held the block's warps in step: 128256 x 4096 q4_0 82.7 us with y8 made, 66.8 without
// (docs/benchmarks.md, sixty-ninth session).
inline constexpr int kY8Bufs = 4;
struct Y8Ring {
  float v[kY8Bufs][kGemvMaxBatch][32];
  unsigned arrived[kY8Bufs];  // warps that stored into the buffer, over all its uses
  unsigned done[kY8Bufs];     // the buffer's uses quantised
  // Every thread of the block, before the first pass; a __syncthreads() must follow.
  __device__ __forceinline__ void init() {
    if (threadIdx.x < 2 * kY8Bufs) (threadIdx.x < kY8Bufs ? arrived : done)[threadIdx.x % kY8Bufs] = 0;
  }
  // Pass `pass`'s buffer, once its previous use has been quantised.
  __device__ __forceinline__ float (*buffer(int pass))[32] {
    const int buf = pass % kY8Bufs;
    const unsigned use = unsigned(pass) / kY8Bufs;
    if (threadIdx.x % 32 == 0)
      while (*reinterpret_cast<volatile unsigned*>(&done[buf]) < use) {
      }
    __syncwarp();
    __threadfence_block();  // the previous use's reads before this warp's writes
    return v[buf];
  }
  // The warp has stored its rows of pass `pass` (lane 0): count it in; the warp that completes the
  // pass quantises the 32-row block blk.
  __device__ __forceinline__ void publish(const Epilogue& ep, int64_t blk, int64_t n, int batch, int pass) {
    const int lane = threadIdx.x % 32, buf = pass % kY8Bufs;
    const unsigned use = unsigned(pass) / kY8Bufs, warps = blockDim.x / 32;
    unsigned before = 0;
    if (lane == 0) {
      __threadfence_block();  // this warp's rows before its count
      before = atomicAdd(&arrived[buf], 1u);
    }
    if (__shfl_sync(0xffffffffu, before, 0) + 1 != (use + 1) * warps) return;
    __threadfence_block();  // every warp's rows are visible from here on
    write_y8_block(ep, blk, n, batch, [&](int b) { return v[buf][b][lane]; });
    __syncwarp();
    if (lane == 0) {
      __threadfence_block();  // the reads before the buffer is written again
      atomicAdd(&done[buf], 1u);
    }
  }
};

// Reduces acc[mat][r][b] (b < kB: the batch rows the caller unrolls for) over the warp and stores
// rows row0..row0+kRows-1 of every batch row
// through the epilogue (lane 0 writes), then publishes them to y8 when asked: through the ring
// (Y8Ring, pass `pass`) or yv (publish_y8_block) when the caller's block covers whole 32-row
// blocks, else publish_y8. acc[1] is the up-projection when ep.gate_up. row0 is a multiple of
// kRows, and kRows divides 32. barrier_threads: publish_y8_block's `threads`.
template <int kMats, int kRows, int kB>
__device__ __forceinline__ void store_rows(const float (&acc)[kMats][kRows][kB], int64_t row0, int64_t n, int batch,
                                           const Epilogue& ep, float* __restrict__ y, float scale = 1.f,
                                           float (*yv)[32] = nullptr, int barrier_threads = 0, Y8Ring* ring = nullptr,
                                           int pass = 0, unsigned long long* best = nullptr) {
  const int lane = threadIdx.x % 32;
  float (*out)[32] = ring && ep.y8 ? ring->buffer(pass) : yv;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int b = 0; b < kB; ++b) {
      if (b >= batch) break;
      const float g = warp_sum(acc[0][r][b]) * scale;
      const float up = (kMats > 1 && ep.gate_up) ? warp_sum(acc[kMats - 1][r][b]) * scale : 0.f;
      if (lane == 0 && row0 + r < n) {
        const float v = ep.apply(g, up, row0 + r, b, n);
        y[b * n + row0 + r] = v;
        if (out) out[b][(row0 + r) % 32] = v;
        if (best && b == 0) {  // argmax (batch 1): lane 0's best row so far
          const unsigned long long key = argmax_key(v, row0 + r);
          *best = key > *best ? key : *best;
        }
      }
    }
  if (!ep.y8) return;
  if (ring) ring->publish(ep, row0 / 32, n, batch, pass);
  else if (yv) publish_y8_block(yv, ep, row0 / 32, n, batch, barrier_threads);
  else publish_y8(y, ep, row0, kRows, n, batch);
}

// Bits 0..3 of b as bit 4 of bytes 0..3 (a multiply puts bit i at bit 8i; the products' bits
// never meet): four fifth bits of a 5-bit type onto four nibbles. (q51_dp4a, q_dp4a)
__device__ __forceinline__ uint32_t fifth_bits(uint32_t b) { return ((b & 15u) * 0x00204081u & 0x01010101u) << 4; }

// Scale and min j (0..7) of a Q4_K / Q5_K super-block header held in registers (h.y, h.z, h.w:
// the 12 scale bytes), q4k_scale_min's formula (format/) on the words, the same bits: indexing the
// bytes of a register copy by a lane's run-time j had put every header in local memory (ld.local.u8
// in each step of the loop). (q4k_dp4a, q4k_mma, q_dp4a's q4_K and q5_K)
__device__ __forceinline__ void scale_min(int j, const uint4& h, float& sc, float& m) {
  const int s = 8 * (j % 4);
  const uint32_t b0 = (h.y >> s) & 0xFFu, b1 = (h.z >> s) & 0xFFu, b2 = (h.w >> s) & 0xFFu;  // scales[j % 4 + 0, 4, 8]
  const bool low = j < 4;
  sc = float(low ? b0 & 63u : (b2 & 0xFu) | ((b0 >> 6) << 4));
  m = float(low ? b1 & 63u : (b2 >> 4) | ((b1 >> 6) << 4));
}

}  // namespace lamina::kernels::gemv_detail

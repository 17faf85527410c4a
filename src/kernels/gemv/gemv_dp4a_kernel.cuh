// q_dp4a: Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q4_K / Q5_K / Q6_K / IQ4_NL / IQ4_XS / Q2_K / Q3_K (repacked
// layouts, gemv.h) with int8 activations and dp4a.
//   - x is quantised once per thread block into shared memory: int8 blocks of 32 with an f32
//     scale and the block's integer sum (llama.cpp's q8_1 idea), the scale set by the block's
//     second-largest element and the largest kept as a wide integer (kernels/common/q8_blocks.h:
//     its product with its weight's quant joins the integer dot product); the grid is
//     persistent (a few blocks per SM looping over rows), so each block converts x once for
//     many rows.
//   - each lane streams 16 bytes of weights per step (one Q4_0 block, half a Q8_0 block),
//     `unroll` steps in flight, `rows` rows per warp sharing the x loads from shared memory.
//   - sum_i (q_i - 8) * x_i = d_w * d_x * (dp4a(q, xq) - 8 * sum(xq))   (Q4_0)
//   - sum_i (d_w q_i + m_w) * x_i = d_x * (d_w * dp4a(q, xq) + m_w * sum(xq))   (Q4_1)
//   - sum_i q_i * x_i = d_w * d_x * dp4a(q, xq)   (Q8_0)
//   - Q4_K as Q4_1 with d_w = d sc, m_w = -dmin m of the block's super-block header (its quants
//     repacked into Q4_0's order: a 16-byte chunk is one block of 32, one x block), so that the
//     file type most people run streams as Q4_0 does; the in-place q4k_dp4a pays a header load
//     and decode per 16 bytes and meets two x blocks with each chunk.
//   - Q5_K as Q4_K plus a 32-bit word of fifth bits per block (a plane of its own), merged into
//     the nibbles' bytes before eight dp4a (the 16x trick of the high nibbles does not apply).
//   - Q5_0 and Q5_1 (gemv_block32_planes.cu: the file's quants, fifth bits and scales in planes of
//     their own) as Q4_0 and Q4_1 with Q5_K's fifth-bit word: offset - 16 sum(xq) for Q5_0.
//   - Q6_K (gemv_q6k.cu's planes in Q4_0's order): the nibbles with two words of high 2 bits per
//     block merged into bytes 0..63, two sums of four dp4a, one per half of 16 and its int8
//     scale: d_x * d * (sc_lo * (dp4a_lo - 32 sum_lo) + sc_hi * (dp4a_hi - 32 sum_hi)).
//   - IQ4_XS (gemv_iq4xs.cu's planes: nibbles in consecutive order, the 8-byte headers apart): each
//     word of quants is looked up by prmt in x's byte order as two words of bytes that add up to
//     the IQ4 values (iq4_split8: half the ALU work of a lookup a value), sixteen dp4a a chunk:
//     d_x * d (ls - 32) * dp4a(iq4[q], xq). IQ4_NL (gemv_block32_planes.cu) the same with an f16
//     d per block of 32 in a plane of its own.
//   - Q3_K and Q2_K (gemv_k23.cuh's planes in Q4_0's order): 8 bytes of 2-bit quants per block (a
//     word per half of 16; Q3_K with a word of third bits), one x block, Q6_K's two sums per half:
//     Q3_K d_x d (sc_lo (dp4a(q + 4, xq_lo) - 4 sum_lo) + sc_hi (...)); Q2_K with its mins,
//     d_x (d (sc_lo dp4a_lo + sc_hi dp4a_hi) - dmin (m_lo sum_lo + m_hi sum_hi)).
//   - the first step's weights are loaded before the PDL wait (weights never depend on an
//     earlier kernel), so they overlap the kernel before and the making of x.
//   - with GemvProblem::y8 the epilogue also writes y as int8 blocks (publish_y8): the gate/up
//     pair makes the down projection's x, so that GEMV no longer quantises 11008 values in
//     every block.
//   - configs with 32 rows per block (rows=2 x 16 warps, rows=4 x 8) make y8 in the block
//     (publish_y8_block: shared memory and one barrier per pass) instead of through global
//     counters and fences.
//   - batch-1 problems (decode) run instances whose batch loops are unrolled for one row
//     (kMaxB = 1): the 8-row instances are 160-244 KiB of SASS, and a batch-1 warp ran one copy
//     of each loop body and branched over seven; in the decode chain every kernel starts on
//     cold instruction caches (ncu: stall samples "no instructions").
//   - decode's instances keep weights in flight across the epilogue (kOverlap, every type but q4_1 and q5_1,
//     16 warps x 2 rows; q5_0's one matrix at unroll 4 runs without it, measured faster): the gate
//     and up steps are loaded together, the next pass's first step
//     goes out before this pass's epilogue, and y8 is made by a rotating warp behind named
//     barriers while the other warps go on; one matrix at unroll 2 runs q_dp4a_slots (two
//     register slots, gemv_dp4a_slots.cu). Where q_dp4a waited at the y8 barrier, the SM's loads
//     drained. (The gate/up pair stays out of the slots: it lost to loads ahead in the chain.)
// Each bullet's figures, measured in the decode chain: docs/benchmarks.md, "Whole model on the
// GPU (issue #6)".
// Activations lose precision to 8 bits (as in llama.cpp): the GPU test checks this variant
// against an fp64 reference of the same quantised x.
// This header holds the kernel and its launch; each weight type's instances are compiled in a
// translation unit of their own (gemv_dp4a_<type>.cu), so that a build runs them in parallel.
#pragma once

#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_dp4a.cuh"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_x8.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace lamina::kernels::gemv_detail {

// kBlock32: 32 / kRows warps per block, so that a block's rows of one pass are one 32-row block
// of y and the int8 copy of y is made in the block (publish_y8_block) instead of through global
// counters and fences.
// kMaxB: the batch rows the loops unroll for; decode's instances (batch 1) take 1, so that the
// code the warps run is one contiguous stretch instead of eight batch copies branched over.
// kOverlap (decode's batch-1 instances of 32-row blocks): the gate and up matrices' steps are
// loaded together, the next pass's first step goes out before this pass's epilogue, and y8 is
// made by the warp that completes a pass while the others go on (Y8Ring) — so that the warps keep
// weights in flight across the epilogue instead of draining at a block-wide barrier.
template <int kBits, int kScales, int kRows, int kUnroll, bool kGateUp, bool kBlock32 = false, int kMaxB = kGemvMaxBatch,
          bool kOverlap = false>
__global__ void __launch_bounds__(kBlock32 ? 32 / kRows * 32 : 256) q_dp4a(const uint8_t* __restrict__ w, const uint8_t* __restrict__ w_up,
                                              XSource xin,
                                              float* __restrict__ y, int64_t n, int64_t k,
                                              int batch, Epilogue ep) {
  extern __shared__ __align__(16) uint8_t smem[];
  using Step = Dp4aStep<kBits, kScales, kRows, kUnroll>;
  constexpr int kMats = kGateUp ? 2 : 1, kBufs = kOverlap ? kMats : 1;
  const int64_t warps_total = int64_t(gridDim.x) * (blockDim.x / 32);
  const int64_t stride = warps_total * kRows;
  const int64_t first = (int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * kRows;
  typename Step::Regs regs[kBufs];
  // The planes of w and w_up, and each pass's rows as chunk indices (Dp4aStep::load).
  const uint32_t nl = uint32_t(k) / Step::kPer;
  typename Step::Planes planes[kMats];
#pragma unroll
  for (int mat = 0; mat < kMats; ++mat) planes[mat] = Step::planes(mat ? w_up : w, uint32_t(n), uint32_t(k));
  auto load_ahead = [&](const typename Step::Rows& at, uint32_t l0) {
#pragma unroll
    for (int mat = 0; mat < kBufs; ++mat) Step::load(planes[mat], at, l0, nl, regs[mat]);
  };
  // The weights never depend on an earlier kernel: the first step's loads go out before the
  // wait, so they overlap the kernel before (PDL) and the making of x.
  bool loaded = first < n;
  if (loaded) load_ahead(Step::rows(uint32_t(first), uint32_t(n), uint32_t(k)), 0);
  pdl_wait();  // x comes from the kernel before (see kernels/common/pdl.cuh)
  RmsParts rms;  // x8 = blocks of x * w: the RMS scale from the producer's sums of squares
  if (xin.ss) rms.load(xin.ss, k);
  const uint8_t* xs = x8_source(xin, k, batch, smem);
  __shared__ float yv[kBlock32 && !kOverlap ? 2 : 1][kBlock32 ? kGemvMaxBatch : 1][32];  // kBlock32: y of the pass, two buffers
  __shared__ std::conditional_t<kOverlap, Y8Ring, char> ring;  // kOverlap: y8 made by the warp that completes a pass
  if constexpr (kOverlap) {
    ring.init();
    __syncthreads();
  }
  int pass = 0;
  for (int64_t row0 = first; row0 < n; row0 += stride, ++pass) {
    if (row0 + stride >= n) pdl_launch_dependents();  // this warp's last rows: the next kernel may launch
    float acc[kMats][kRows][kMaxB] = {};
    const typename Step::Rows at = Step::rows(uint32_t(row0), uint32_t(n), uint32_t(k));
    if constexpr (kOverlap) {
      for (uint32_t l0 = 0; l0 < nl; l0 += 32 * kUnroll) {
        if (!loaded) load_ahead(at, l0);
        loaded = false;
        Step::dot_mats(regs, xs, k, l0, batch, acc);  // the x side decoded once for gate and up
      }
      if (row0 + stride < n) {  // the next pass's first weights go out before this pass's epilogue
        load_ahead(Step::rows(uint32_t(row0 + stride), uint32_t(n), uint32_t(k)), 0);
        loaded = true;
      }
    } else {
#pragma unroll
      for (int mat = 0; mat < kMats; ++mat)
        for (uint32_t l0 = 0; l0 < nl; l0 += 32 * kUnroll) {
          if (!loaded) Step::load(planes[mat], at, l0, nl, regs[0]);
          loaded = false;
          Step::dot(regs[0], xs, k, l0, batch, acc[mat]);
        }
    }
    if constexpr (kOverlap)
      store_rows(acc, row0, n, batch, ep, y, xin.ss ? rms.scale(k, xin.norm_eps) : 1.f, nullptr, 0, &ring, pass);
    else
      store_rows(acc, row0, n, batch, ep, y, xin.ss ? rms.scale(k, xin.norm_eps) : 1.f, kBlock32 ? yv[pass & 1] : nullptr);
  }
}

template <int kBits, int kScales, int kRows, int kUnroll, bool kGateUp>
struct Dp4aLaunch {
  static Status run(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
    if constexpr (kRows == 4 && kUnroll == 1) {
      // Decode's one matrix in two slots of 4 rows x 1 step (Dp4aSlots); every other problem
      // (a batch, the gate/up pair, q4_1 and q5_1) runs the 4-row, unroll-2 instance instead.
      if constexpr (!kGateUp && kScales != kScaleDM)
        if (p.batch == 1 && c.warps * kRows == 32) return gemv_dp4a_slots_launch<kBits, kScales, 4, 1>(p, c, s);
      return Dp4aLaunch<kBits, kScales, 4, 2, kGateUp>::run(p, c, s);
    } else if constexpr (kRows >= 2) {
      if (c.warps * kRows == 32) {  // one 32-row block of y per block and pass (kBlock32)
        if (p.batch == 1) {
          // The 2- and 3-bit types' one matrix at 4 rows x 2 steps: q_dp4a_slots' third shape.
          if constexpr (kRows == 4 && kUnroll == 2 && kBits < 4 && !kGateUp) return gemv_dp4a_slots_launch<kBits, kScales, 4, 2>(p, c, s);
          // Decode: the overlapping instances (every type but q4_1 and q5_1, 16 warps); one matrix at unroll 2 goes
          // to q_dp4a_slots (gemv_dp4a_slots.cu). The gate/up pair runs at unroll 2 for either
          // config (at 4 its two steps of registers spill): the pair's unroll-4 config had run the
          // instance without overlap, which the tuner's back-to-back graph sometimes ranked first
          // and which in the chain cost q8_0 decode (docs/benchmarks.md, sixteenth session).
          // Q5_0's one matrix at unroll 4 runs the plain instance below, as Q5_1 does: without the
          // next pass's loads ahead of the epilogue it measured faster at the vocabulary shape
          // (docs/benchmarks.md, sixty-third session); every other type lost with it.
          constexpr bool kPlainQ5 = kBits == 5 && kScales == kScaleD && !kGateUp && kUnroll == 4;
          if constexpr (kRows == 2 && kScales != kScaleDM && !kPlainQ5) {
            if constexpr (!kGateUp && kUnroll == 2) return gemv_dp4a_slots_launch<kBits, kScales, 2, 2>(p, c, s);
            else
              return launch_x8_persistent(q_dp4a<kBits, kScales, kRows, kGateUp ? 2 : kUnroll, kGateUp, true, 1, true>, "q_dp4a",
                                          p, c, kRows, s, kDp4aBlocksPerSm);
          }
          return launch_x8_persistent(q_dp4a<kBits, kScales, kRows, kUnroll, kGateUp, true, 1>, "q_dp4a", p, c, kRows, s,
                                      kDp4aBlocksPerSm);
        }
        return launch_x8_persistent(q_dp4a<kBits, kScales, kRows, kUnroll, kGateUp, true>, "q_dp4a", p, c, kRows, s, kDp4aBlocksPerSm);
      }
    }
    return launch_x8_persistent(q_dp4a<kBits, kScales, kRows, kUnroll, kGateUp>, "q_dp4a", p, c, kRows, s, kDp4aBlocksPerSm);
  }
};

// q_dp4a's launch for one weight type (kBits, kScales) over the configs it registers.
template <int kBits, int kScales>
Status dp4a_launch_type(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  return dp4a_by_config<Dp4aLaunch, kBits, kScales, Dp4aShape<1, 4>, Dp4aShape<2, 2>, Dp4aShape<2, 4>, Dp4aShape<4, 2>,
                        Dp4aShape<4, 1>>(
      "q_dp4a", p, c, s);
}

// The instances of each type (gemv_dp4a_<type>.cu).
Status dp4a_launch_q4_0(const GemvProblem& p, const GemvConfig& c, cudaStream_t s);
Status dp4a_launch_q4_1(const GemvProblem& p, const GemvConfig& c, cudaStream_t s);
Status dp4a_launch_q5_0(const GemvProblem& p, const GemvConfig& c, cudaStream_t s);
Status dp4a_launch_q5_1(const GemvProblem& p, const GemvConfig& c, cudaStream_t s);
Status dp4a_launch_iq4_nl(const GemvProblem& p, const GemvConfig& c, cudaStream_t s);
Status dp4a_launch_q8_0(const GemvProblem& p, const GemvConfig& c, cudaStream_t s);
Status dp4a_launch_q4_k(const GemvProblem& p, const GemvConfig& c, cudaStream_t s);
Status dp4a_launch_q5_k(const GemvProblem& p, const GemvConfig& c, cudaStream_t s);
Status dp4a_launch_q6_k(const GemvProblem& p, const GemvConfig& c, cudaStream_t s);
Status dp4a_launch_iq4_xs(const GemvProblem& p, const GemvConfig& c, cudaStream_t s);
Status dp4a_launch_q2_k(const GemvProblem& p, const GemvConfig& c, cudaStream_t s);
Status dp4a_launch_q3_k(const GemvProblem& p, const GemvConfig& c, cudaStream_t s);

}  // namespace lamina::kernels::gemv_detail

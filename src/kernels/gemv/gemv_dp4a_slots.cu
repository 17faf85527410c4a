// q_dp4a_slots: decode's q_dp4a for one matrix (batch 1, 32-row blocks of 16 warps x 2 rows at
// unroll 2, or of 8 warps x 4 rows at unroll 1; gemv_dp4a_kernel.cuh hands it those problems).
// Not a variant of its own: q_dp4a's rung for the single-pass GEMVs of decode.
//   - two register slots of one step each: slot a holds the steps l0 = 0, 2, 4, ... of the
//     warp's rows, slot b the steps 1, 3, 5, ...; when a slot has been multiplied it is refilled
//     with its next step (the next pass's first two steps at the end of a pass), so a warp
//     always has a step of weights in flight while it multiplies the other, where q_dp4a loads,
//     waits and multiplies. Both slots are filled before the PDL wait: on the 7B's 4096-wide
//     matrices that is a warp's whole rows (Wo), or two of six steps (W_down, k = 11008).
//   - y8 made by the warp that completes a pass (Y8Ring), as q_dp4a's
//     overlapping instances.
//   - same chunks, products and epilogue as q_dp4a (Dp4aStep, store_rows); the sums add the
//     steps in the same order.
// Measured in the decode graph against q_dp4a loading the next pass ahead with the same
// rotating y8: faster for Wo and W_down; the gate/up pair in two slots lost and stays in q_dp4a
// (docs/benchmarks.md, eleventh session).
#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_dp4a.cuh"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_x8.cuh"

#include <cuda_runtime.h>

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

// w: [n][k] repacked (gemv_repack); y: [n]; x from xin (int8 blocks of k); n a multiple of 32
// for y8. (q_dp4a's parameters, for launch_x8_persistent: w_up is null and batch 1.)
// Two 8-warp blocks an SM for the 4-row shape (16 warps as the 2-row shape's one block): at most 128
// registers a thread.
template <int kBits, int kScales, int kRows, int kUnroll, bool kWhole>
__global__ void __launch_bounds__(Dp4aSlots<kBits, kScales, kRows, kUnroll>::kWarps * 32,
                                  Dp4aSlots<kBits, kScales, kRows, kUnroll>::kBlocksPerSm) q_dp4a_slots(const uint8_t* __restrict__ w, const uint8_t* __restrict__,
                                                                XSource xin, float* __restrict__ y, int64_t n, int64_t k,
                                                                int, Epilogue ep) {
  extern __shared__ __align__(16) uint8_t smem[];
  using Slots = Dp4aSlots<kBits, kScales, kRows, kUnroll, kWhole>;
  const int64_t stride = int64_t(gridDim.x) * Slots::kWarps * Slots::kRows;
  const int64_t first = (int64_t(blockIdx.x) * Slots::kWarps + threadIdx.x / 32) * Slots::kRows;
  typename Slots::Step::Regs a, b;
  if (first < n) Slots::fill(w, first, n, k, a, b);  // weights never depend on an earlier kernel: before the wait
  pdl_wait();  // x comes from the kernel before (see kernels/common/pdl.cuh)
  RmsParts rms;
  if (xin.ss) rms.load(xin.ss, k);
  const uint8_t* xs = x8_source(xin, k, 1, smem);
  __shared__ Y8Ring ring;  // the int8 copy of y, made by the warp that completes a pass
  ring.init();
  __syncthreads();
  int pass = 0;
  for (int64_t row0 = first; row0 < n; row0 += stride, ++pass) {
    if (row0 + stride >= n) pdl_launch_dependents();  // this warp's last rows: the next kernel may launch
    float acc[1][Slots::kRows][1] = {};
    Slots::pass(w, row0, stride, n, k, xs, a, b, acc[0]);
    store_rows(acc, row0, n, 1, ep, y, xin.ss ? rms.scale(k, xin.norm_eps) : 1.f, nullptr, 0, &ring, pass);
  }
}

}  // namespace

// The whole-steps instance where a row is whole steps (Dp4aSlots' kWhole), else the general one.
// Q4_0 at 4 rows x 1 step keeps the general one: its whole-steps instance, with fewer
// instructions, measured 3-5 % slower at 128256 x 4096 and 14336 x 4096 (the shapes where the
// tuner takes that config); every other instance measured faster or equal (docs/benchmarks.md,
// sixty-eighth session).
template <int kBits, int kScales, int kRows, int kUnroll>
Status gemv_dp4a_slots_launch(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  using Slots = Dp4aSlots<kBits, kScales, kRows, kUnroll>;
  constexpr bool kWholeFaster = !(kBits == 4 && kScales == kScaleD && kRows == 4);
  const int per_sm = kDp4aBlocksPerSm * Slots::kBlocksPerSm;
  if constexpr (kWholeFaster)
    if ((p.k / Slots::Step::kPer) % Slots::kStep == 0)
      return launch_x8_persistent(q_dp4a_slots<kBits, kScales, kRows, kUnroll, true>, "q_dp4a", p, c, kRows, s, per_sm);
  return launch_x8_persistent(q_dp4a_slots<kBits, kScales, kRows, kUnroll, false>, "q_dp4a", p, c, kRows, s, per_sm);
}
#define LAMINA_DP4A_SLOTS(bits, scales)                                                                        \
  template Status gemv_dp4a_slots_launch<bits, scales, 2, 2>(const GemvProblem&, const GemvConfig&, cudaStream_t); \
  template Status gemv_dp4a_slots_launch<bits, scales, 4, 1>(const GemvProblem&, const GemvConfig&, cudaStream_t);
LAMINA_DP4A_SLOTS(4, kScaleD)
LAMINA_DP4A_SLOTS(8, kScaleD)
LAMINA_DP4A_SLOTS(4, kScaleK)
LAMINA_DP4A_SLOTS(5, kScaleK)
LAMINA_DP4A_SLOTS(6, kScaleQ6)
LAMINA_DP4A_SLOTS(4, kScaleXS)
LAMINA_DP4A_SLOTS(5, kScaleD)
LAMINA_DP4A_SLOTS(4, kScaleNL)
LAMINA_DP4A_SLOTS(2, kScaleQ2)
LAMINA_DP4A_SLOTS(3, kScaleQ6)
#undef LAMINA_DP4A_SLOTS
// The 2- and 3-bit types' third shape, 4 rows x 2 steps (Dp4aSlots).
template Status gemv_dp4a_slots_launch<2, kScaleQ2, 4, 2>(const GemvProblem&, const GemvConfig&, cudaStream_t);
template Status gemv_dp4a_slots_launch<3, kScaleQ6, 4, 2>(const GemvProblem&, const GemvConfig&, cudaStream_t);

}  // namespace lamina::kernels

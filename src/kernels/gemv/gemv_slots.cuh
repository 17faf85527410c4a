// The slots rung of the in-place K-quant dp4a GEMVs (q4_K, q5_K, q6_K, q2_K, q3_K, iq4_xs) for
// decode's problems (batch 1). Against the rung each extends (q4k_dp4a, q6k_dp4a, units_dp4a:
// a warp loads a step of weights, waits for it, multiplies it, then loads the next), a warp here
// holds two steps in two register slots: slot a the warp's steps 0, 2, 4, ..., slot b the steps
// 1, 3, 5, ..., over its whole sequence of (row group, matrix, step), and refills a slot with its
// next step as soon as it has multiplied it. A warp thus always has a step of weights in flight
// while it multiplies the other, across row groups and between the gate/up pair's matrices;
// the first two steps are loaded before the PDL wait (weights never depend on the kernel
// before). ncu of q4k_dp4a on 14336x4096 (docs/benchmarks.md, thirty-fifth session): a quarter
// of the stall samples on the first use of a loaded chunk, DRAM at a third of its peak.
// Only batch 1 (the products unroll for one row of x): the variants say max_batch = 1.
//
// A Step policy (Q4kStep, Q6Step, UnitsStep) is one step of a warp, kRows rows by kUnroll units
// a lane:
//   Step::kRows, Step::kUnroll, Step::kType, Step::kSlotsName
//   Step::units(k)                         units (16-byte runs of quants) in a row of k elements
//   st.load(wm, row0, n, k, j0)            units j0 + u * 32 + lane of rows row0.. (clamped to n - 1)
//   st.dot<kMaxB>(xs, k, j0, batch, acc)   acc[r][b] += those units times x (int8 blocks in xs)
// Products and sums are those of the base rung in the same order: the same bits.
#pragma once

#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_x8.cuh"

#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace lamina::kernels::gemv_detail {

// What a row's length must be a multiple of for T's type: 256 (super-blocks) unless T says less
// (kKMultiple: Q5_1's blocks of 32).
template <class T>
constexpr int64_t k_multiple() {
  if constexpr (requires { T::kKMultiple; }) return T::kKMultiple;
  else return 256;
}

// w, w_up: [n][k] in the Step's layout; y: [n] (batch 1); x from xin (int8 blocks of k, made in
// the prologue when not given).
template <class Step, bool kGateUp>
__global__ void __launch_bounds__(256, 2) slots_dp4a(const uint8_t* __restrict__ w, const uint8_t* __restrict__ w_up,
                                                    XSource xin, float* __restrict__ y, int64_t n, int64_t k, int,
                                                    Epilogue ep) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kRows = Step::kRows, kMats = kGateUp ? 2 : 1;
  constexpr int64_t kStep = 32 * Step::kUnroll;  // units a warp takes in one step
  const int64_t stride = int64_t(gridDim.x) * (blockDim.x / 32) * kRows;
  const int64_t first = (int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * kRows;
  const int steps = int((Step::units(k) + kStep - 1) / kStep);  // a row group's steps, per matrix
  // A cursor walks the warp's steps in order: rows row0.., matrix t / steps, units from
  // (t % steps) * kStep. Loads and products both go in step order (a: 0, 2, ...; b: 1, 3, ...),
  // so each keeps its own cursor, advanced a step at a time (no division by run-time counts).
  struct Cursor {
    int64_t row0;
    int t;
  };
  const auto advance = [&](Cursor& c) {
    if (++c.t == kMats * steps) c.t = 0, c.row0 += stride;
  };
  Cursor next_load{first, 0}, next_take{first, 0};
  const auto load = [&](Step& st) {  // the step at next_load into st
    const Cursor c = next_load;
    advance(next_load);
    if (c.row0 >= n) return;
    const bool up = kGateUp && c.t >= steps;
    st.load(up ? w_up : w, c.row0, n, k, int64_t(up ? c.t - steps : c.t) * kStep);
  };
  Step a, b;
  load(a);
  load(b);
  pdl_wait();  // x comes from the kernel before (see kernels/common/pdl.cuh)
  RmsParts rms;  // x8 = blocks of x * w: the RMS scale from the producer's sums of squares
  if (xin.ss) rms.load(xin.ss, k);
  const uint8_t* xs = x8_source(xin, k, 1, smem);
  float acc[kMats][kRows][1] = {};
  // Multiplies the step at next_take, held in st, refills st with the step two on, and stores the
  // row group after its last step; false when the warp has no more steps.
  const auto take = [&](Step& st) {
    const Cursor c = next_take;
    advance(next_take);
    if (c.row0 >= n) return false;
    if (c.t == 0 && c.row0 + stride >= n) pdl_launch_dependents();  // this warp's last rows: the next kernel may launch
    if (kGateUp && c.t >= steps) st.template dot<1>(xs, k, int64_t(c.t - steps) * kStep, 1, acc[kMats - 1]);
    else st.template dot<1>(xs, k, int64_t(c.t) * kStep, 1, acc[0]);
    load(st);
    if (c.t == kMats * steps - 1) {
      store_rows(acc, c.row0, n, 1, ep, y, xin.ss ? rms.scale(k, xin.norm_eps) : 1.f);
#pragma unroll
      for (int m = 0; m < kMats; ++m)
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[m][r][0] = 0.f;
    }
    return true;
  };
  while (take(a) && take(b)) {
  }
}

template <class Step>
Status slots_launch(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (p.w_up) return launch_x8_persistent(slots_dp4a<Step, true>, Step::kSlotsName, p, c, Step::kRows, s);
  return launch_x8_persistent(slots_dp4a<Step, false>, Step::kSlotsName, p, c, Step::kRows, s);
}

// The slots variant of a type: StepOf<kRows, kUnroll> its Step; instances of 1 x 2 and 2 x 1
// units a step, and 2 x 2 where the Step's registers allow two of them (kWide: q4_K, whose chunks
// share their header words; the others' spilled at 128 registers, two blocks an SM).
template <template <int, int> class StepOf, bool kWide = false>
Status slots_run(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  using One = StepOf<1, 2>;
  const std::string name = One::kSlotsName;
  if (p.wtype != One::kType) return Status::error(name + ": " + std::string(type_name(One::kType)) + " only");
  if (p.k % k_multiple<One>()) return Status::error(name + ": k must be a multiple of " + std::to_string(k_multiple<One>()));
  if (p.batch != 1) return Status::error(name + ": batch 1 only (decode)");
  if (c.rows == 1 && c.unroll == 2) return slots_launch<One>(p, c, s);
  if (c.rows == 2 && c.unroll == 1) return slots_launch<StepOf<2, 1>>(p, c, s);
  if constexpr (kWide)
    if (c.rows == 2 && c.unroll == 2) return slots_launch<StepOf<2, 2>>(p, c, s);
  return Status::error(name + ": no instance for config " + c.str());
}

// Rows x warps x unroll; 256 threads at most (the kernel's launch bounds).
inline std::vector<GemvConfig> slots_configs(bool wide = false) {
  std::vector<GemvConfig> c{GemvConfig{1, 8, 2}, GemvConfig{2, 8, 1}, GemvConfig{1, 4, 2}, GemvConfig{2, 4, 1}};
  if (wide) c.insert(c.end(), {GemvConfig{2, 8, 2}, GemvConfig{2, 4, 2}});
  return c;
}

}  // namespace lamina::kernels::gemv_detail

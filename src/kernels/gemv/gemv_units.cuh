// A dp4a GEMV over weights read in "units": each lane of a warp takes one unit per step (a run of
// quants that fits a few registers, with what it needs of its super-block's header) and
// multiplies it by the int8 activation blocks it meets. The weight type is a policy U:
//   U::kName, U::kType             the variant's name (launch errors) and its weight type
//   U::kSlotsName                  the name of its slots rung (gemv_slots.cuh)
//   U::units(k)                    units in a row of k elements
//   U::kKMultiple (optional)       what k must be a multiple of (default 256)
//   U::Unit                        the registers of one unit (zero-initialisable)
//   U::load(w, n, k, row, j)       unit j of row `row` of the n x k matrix at w
//   U::XPart                       what a unit needs of one batch row of x
//   U::x_part(xr, j)               that, for unit j, from the row's int8 blocks (X8Row)
//   U::dot(unit, xpart)            the unit's share of y[row] (f32, scales applied)
// The loop, the shared-memory x (or the caller's x8, or a fused RMSNorm), the gate/up pair and
// the epilogue are those of q4k_dp4a (gemv_q4k.cu), which keeps its own loop for its tuned
// instances; the low-bit types (q2_K, q3_K, iq4_xs) share this one. Figures: docs/benchmarks.md
// (thirty-first session): 14-33 % of copy bandwidth at batch 1, 27-46 % with x given as int8.
// A warp loads its step, waits, then decodes; nothing of the next row group is in flight meanwhile.
// The next rung, for decode: the same steps (UnitsStep) in gemv_slots.cuh's two register slots.
#pragma once

#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_slots.cuh"
#include "kernels/gemv/gemv_x8.cuh"

#include <cuda_runtime.h>

#include <string>

namespace lamina::kernels::gemv_detail {

// Four 32-bit words (a 16-byte run of quants) from a 4-byte aligned address, through the
// read-only path (the GGUF blocks of q2_K and iq4_xs are 4- and 8-byte aligned, not 16).
__device__ __forceinline__ uint4 load4_words(const uint8_t* p) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(p);
  return make_uint4(__ldg(w), __ldg(w + 1), __ldg(w + 2), __ldg(w + 3));
}

// The x of a q2_K / q3_K unit j (a 16-byte run of qs[32 n + 16 h ..] of super-block j / 4, with
// n = j % 4 / 2, h = j % 2): its four runs of 16 elements, t = 0..3 at 128 n + 32 t + 16 h.
struct FourRuns {
  X8Row::Halves a, b;  // runs t = 0, 1 and t = 2, 3
};
__device__ __forceinline__ FourRuns four_runs(const X8Row& xr, int64_t j) {
  const int64_t e = (j / 4) * 256 + 128 * (j % 4 / 2) + 16 * (j % 2);  // run t = 0's first element
  return FourRuns{xr.halves(e, e + 32), xr.halves(e + 64, e + 96)};
}

// One step of a warp (gemv_slots.cuh's Step): units j0 + u * 32 + lane (u < kUnroll) of kRows rows.
template <class U, int kRows_, int kUnroll_>
struct UnitsStep {
  static constexpr int kRows = kRows_, kUnroll = kUnroll_;
  static constexpr GgmlType kType = U::kType;
  static constexpr const char* kSlotsName = U::kSlotsName;
  static constexpr int64_t kKMultiple = k_multiple<U>();
  static __device__ __forceinline__ int64_t units(int64_t k) { return U::units(k); }
  typename U::Unit q[kRows][kUnroll];

  __device__ __forceinline__ void load(const uint8_t* wm, int64_t row0, int64_t n, int64_t k, int64_t j0) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = j0 + u * 32 + lane;
        q[r][u] = j < units(k) ? U::load(wm, n, k, row0 + r < n ? row0 + r : n - 1, j) : typename U::Unit{};
      }
  }

  template <int kMaxB>
  __device__ __forceinline__ void dot(const uint8_t* xs, int64_t k, int64_t j0, int batch,
                                      float (&acc)[kRows][kMaxB]) const {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = j0 + u * 32 + lane;
      if (j >= units(k)) break;
#pragma unroll
      for (int b = 0; b < kMaxB; ++b) {
        if (b >= batch) break;
        const typename U::XPart xp = U::x_part(X8Row(xs, b, k), j);
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r][b] += U::dot(q[r][u], xp);
      }
    }
  }
};
// UnitsStep of U as gemv_slots.cuh's StepOf<kRows, kUnroll>.
template <class U>
struct UnitsOf {
  template <int kRows, int kUnroll>
  using Step = UnitsStep<U, kRows, kUnroll>;
};

template <class U, int kRows, int kUnroll, bool kGateUp>
__global__ void __launch_bounds__(256) units_dp4a(const uint8_t* __restrict__ w, const uint8_t* __restrict__ w_up,
                                                  XSource xin, float* __restrict__ y, int64_t n, int64_t k, int batch,
                                                  Epilogue ep) {
  extern __shared__ __align__(16) uint8_t smem[];
  pdl_wait();  // x comes from the kernel before (see kernels/common/pdl.cuh)
  const uint8_t* xs = x8_source(xin, k, batch, smem);
  const int64_t warps_total = int64_t(gridDim.x) * (blockDim.x / 32);
  using Step = UnitsStep<U, kRows, kUnroll>;
  for (int64_t row0 = (int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * kRows; row0 < n;
       row0 += warps_total * kRows) {
    if (row0 + warps_total * kRows >= n) pdl_launch_dependents();  // this warp's last rows: the next kernel may launch
    float acc[kGateUp ? 2 : 1][kRows][kGemvMaxBatch] = {};
#pragma unroll
    for (int mat = 0; mat < (kGateUp ? 2 : 1); ++mat)
      for (int64_t j0 = 0; j0 < Step::units(k); j0 += 32 * kUnroll) {
        Step st;
        st.load(mat ? w_up : w, row0, n, k, j0);
        st.template dot<kGemvMaxBatch>(xs, k, j0, batch, acc[mat]);
      }
    store_rows(acc, row0, n, batch, ep, y);
  }
}

template <class U, int kRows, int kUnroll>
Status units_launch_gate(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (p.w_up) return launch_x8_persistent(units_dp4a<U, kRows, kUnroll, true>, U::kName, p, c, kRows, s);
  return launch_x8_persistent(units_dp4a<U, kRows, kUnroll, false>, U::kName, p, c, kRows, s);
}

// The configs every units variant instantiates (rows x unroll; warps are a launch parameter).
// A warp of a 4096-wide row of q2_K or q3_K has 64 units, one step at unroll 2: the wider
// configs keep more of a warp's rows in flight at once (1 x 8, 2 x 4 units a lane).
inline std::vector<GemvConfig> units_configs() {
  return {GemvConfig{1, 8, 2}, GemvConfig{2, 8, 2}, GemvConfig{1, 8, 4}, GemvConfig{2, 4, 2},
          GemvConfig{2, 8, 4}, GemvConfig{1, 8, 8}};
}

template <class U>
Status units_run(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  const std::string name = U::kName;
  if (p.wtype != U::kType) return Status::error(name + ": " + std::string(type_name(U::kType)) + " only");
  if (p.k % k_multiple<U>()) return Status::error(name + ": k must be a multiple of " + std::to_string(k_multiple<U>()));
  if (c.rows == 1 && c.unroll == 2) return units_launch_gate<U, 1, 2>(p, c, s);
  if (c.rows == 2 && c.unroll == 2) return units_launch_gate<U, 2, 2>(p, c, s);
  if (c.rows == 1 && c.unroll == 4) return units_launch_gate<U, 1, 4>(p, c, s);
  if (c.rows == 2 && c.unroll == 4) return units_launch_gate<U, 2, 4>(p, c, s);
  if (c.rows == 1 && c.unroll == 8) return units_launch_gate<U, 1, 8>(p, c, s);
  return Status::error(name + ": no instance for config " + c.str());
}

// U's two registered rungs: its units GEMV (any batch) and, for decode, the same steps in two
// register slots (gemv_slots.cuh), both for U::kType alone; summaries as GemvVariant's.
template <class U>
void register_units_rungs(std::vector<GemvVariant>& out, WeightLayout layout, const char* summary,
                          const char* slots_summary) {
  bool (*const only)(GgmlType) = [](GgmlType t) { return t == U::kType; };
  out.push_back({U::kName, summary, layout, only, units_run<U>, units_configs(), XRounding::Int8Blocks,
                 /*writes_y8=*/true, /*fuses_norm=*/true});
  out.push_back({U::kSlotsName, slots_summary, layout, only, slots_run<UnitsOf<U>::template Step>, slots_configs(),
                 XRounding::Int8Blocks, /*writes_y8=*/true, /*fuses_norm=*/true, /*takes_x8_ss=*/false,
                 /*tuner_picks=*/true, /*writes_argmax=*/false, /*max_batch=*/1});
}

}  // namespace lamina::kernels::gemv_detail

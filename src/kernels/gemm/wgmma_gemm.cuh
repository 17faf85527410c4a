// The Hopper GEMM mainloop (sm_90a), shared by h2_wgmma (f16/bf16 weights) and q2_wgmma
// (quantised weights): C[m][n] = alpha * A[m][k] W[n][k]^T + beta * C.
//
//   block: the policy's producer warpgroups (1 or 2), then 2 consumer warpgroups: each owns 64
//          rows of the 128 x BN tile and issues wgmma m64nBNk16 straight from shared memory
//   stage: A [128][64] and W [BN][64] in the K-major 128-byte-swizzled layout of TMA (16-byte
//          chunk c of row r stored at chunk c ^ (r % 8); rows of 128 bytes; tiles 1024-aligned)
//   A:     one TMA box per stage (out-of-range elements arrive as zeros: any M, K tail)
//   W:     a policy (BPolicy) fills the stage: TMA for f16/bf16 weights, or the producer
//          warpgroup's 128 threads dequantising quantised rows into the swizzled layout
//   sync:  full/empty mbarriers per stage; consumers release a stage once the wgmma reading it
//          has retired (one wgmma batch kept in flight)
//   grid:  persistent (one block per SM) over work units: output tiles in groups of 8
//          block-rows for L2 reuse, each tile cut into `splits` K ranges (split-K for skinny
//          shapes: partials go to the f32 workspace, splitk_reduce sums them)
//   epilogue straight from the accumulator registers: alpha, beta, f32/f16/bf16, edges masked
//   gated (a policy with kGated, GemmProblem::b_up): a W stage holds BN/2 rows of the gate
//          matrix over the same BN/2 rows of the up matrix, so a thread's accumulators hold
//          gate and up of the same C elements; the epilogue writes act(gate) * up, a tile of
//          BN/2 columns of C (the schedule runs over 2n columns of W stages)
//
// BPolicy provides:
//   Args                     kernel argument (passed as __grid_constant__)
//   kTmaBytes                bytes its TMA adds to a stage's transaction count
//   kProducerWgs             producer warpgroups (1 or 2)
//   kArrivals                producer-thread arrivals it adds to the "full" barrier
//   kAllThreads              whether all 128 producer threads take part (else thread 0 only)
//   kProducerRegs            setmaxnreg budget of the producer (0: no reallocation)
//   kSlots, kSlotBytes<BN>,  a ring of raw weight bytes in shared memory (0: none), a slot per
//   kStepsPerSlot            group of kStepsPerSlot k-steps; thread 0 refills a slot
//                            (issue_raw(group), TMA on the slot's barrier) once all producer
//                            threads are done with it (named barrier)
//   store<BN>(b, pt, n0, kt, slot, stage, full)   fills a stage (from the slot, or by TMA) and
//                            signals the full barrier
//   kGated (optional)        the stages hold gate and up halves; Args has `gelu`
#pragma once

#include "kernels/common/activations.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/common/wgmma_ops.cuh"
#include "kernels/gemm/tc_gemm.cuh"

#include <algorithm>

namespace lamina::kernels::wgmma_gemm {

inline constexpr int kBm = 128, kBk = 64, kWgThreads = 128;

// Block size: the policy's producer warpgroups, then two consumer warpgroups.
template <class BPolicy>
inline constexpr int kThreadsOf = (BPolicy::kProducerWgs + 2) * kWgThreads;

// Shared memory: [A stages][W stages][barriers: full, empty, raw_full (at most 64)][ring,
// 1024-aligned for the swizzled TMA boxes], plus slack to align the base to 1024.
template <class T, int kBn, int kStages>
constexpr size_t ring_offset() {
  return (size_t(kStages) * (kBm + kBn) * kBk * sizeof(T) + 64 * sizeof(uint64_t) + 1023) / 1024 * 1024;
}
template <class T, int kBn, int kStages, class BPolicy>
constexpr size_t smem_bytes() {
  static_assert(2 * kStages + BPolicy::kSlots <= 64, "barrier area");
  return ring_offset<T, kBn, kStages>() + BPolicy::kSlots * BPolicy::template kSlotBytes<kBn> + 1024;
}

// Whether a policy fills its stages with gate and up halves (BPolicy::kGated; absent: no).
template <class BPolicy>
consteval bool gated() {
  if constexpr (requires { BPolicy::kGated; }) return BPolicy::kGated;
  else return false;
}

// One warp's m64nN accumulators into C: as column pairs without per-element tests where the
// caller found the warpgroup's rows and the tile's columns inside C (whole), else element by
// element with the edges masked. Register 4j + r holds row `row` + 8 (r/2), column n0 + 8j +
// 2 (lane%4) + r%2.
template <int kN>
__device__ __forceinline__ void store_tile(const tc_gemm::Out& o, int64_t n0, int64_t row, int lane, const float* acc,
                                           bool whole) {
  if (whole) {
    tc_gemm::store_pairs<kN>(o, n0, row, lane, acc);
    return;
  }
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    const int64_t col = n0 + 8 * j + 2 * (lane % 4);
    const tc_gemm::OutColumn c0 = tc_gemm::out_column(o, col), c1 = tc_gemm::next_column(o, c0, col, 1);
    tc_gemm::out_store(o, c0, row, acc[4 * j]);
    tc_gemm::out_store(o, c1, row, acc[4 * j + 1]);
    tc_gemm::out_store(o, c0, row + 8, acc[4 * j + 2]);
    tc_gemm::out_store(o, c1, row + 8, acc[4 * j + 3]);
  }
}

// Work unit u -> output tile (m0, n0) of bm x bn, split index and k-step range [kt0, kt1).
struct Schedule {
  int64_t grid_m, grid_n, units;
  int bm, splits, ktiles, kt_per;
  __device__ Schedule(int64_t m, int64_t n, int64_t k, int bm_, int bn, int splits_)
      : grid_m((m + bm_ - 1) / bm_), grid_n((n + bn - 1) / bn), units(0), bm(bm_), splits(splits_),
        ktiles(int((k + kBk - 1) / kBk)), kt_per((ktiles + splits_ - 1) / splits_) {
    units = grid_m * grid_n * splits;
  }
  __device__ void unit(int64_t u, int bn, int64_t& m0, int64_t& n0, int& split, int& kt0, int& kt1) const {
    const int64_t t = u / splits, per_group = 8 * grid_n, first_m = (t / per_group) * 8;
    const int64_t group_m = grid_m - first_m < 8 ? grid_m - first_m : 8;
    split = int(u % splits);
    m0 = (first_m + (t % per_group) % group_m) * bm;
    n0 = ((t % per_group) / group_m) * bn;
    kt0 = split * kt_per;
    kt1 = kt0 + kt_per < ktiles ? kt0 + kt_per : ktiles;
  }
};

template <class T, int kBn, int kStages, class BPolicy>
__global__ void __launch_bounds__(kThreadsOf<BPolicy>, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ typename BPolicy::Args b,
                      tc_gemm::Out out, int splits, int64_t m, int64_t n, int64_t k) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = tma::align_1024(smem_raw);
  T* sa = reinterpret_cast<T*>(smem);                  // [kStages][kBm][64], swizzled rows of 128 bytes
  T* sw = sa + size_t(kStages) * kBm * kBk;            // [kStages][kBn][64]
  uint64_t* full = reinterpret_cast<uint64_t*>(sw + size_t(kStages) * kBn * kBk);
  uint64_t* empty = full + kStages;
  uint64_t* raw_full = empty + kStages;  // [kSlots]
  constexpr int kSlots = BPolicy::kSlots;
  constexpr size_t kSlotBytes = BPolicy::template kSlotBytes<kBn>;
  uint8_t* ring = smem + ring_offset<T, kBn, kStages>();  // [kSlots][kSlotBytes] raw weight bytes
  constexpr int kConsumerWarps = 8;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s)
      tma::mbar_init(&full[s], 1 + BPolicy::kArrivals), tma::mbar_init(&empty[s], kConsumerWarps);
    for (int i = 0; i < kSlots; ++i) tma::mbar_init(&raw_full[i], 1);
    tma::mbar_fence_init();
  }
  __syncthreads();
  constexpr bool kGated = gated<BPolicy>();
  const Schedule sched(m, kGated ? 2 * n : n, k, kBm, kBn, splits);  // gated: n0 / 2 is C's column
  // First unit at or after u with a non-empty k range (split-K can leave the last ones empty).
  auto seek = [&](int64_t& u, int64_t& m0, int64_t& n0, int& kt, int& kt1) {
    for (int split; u < sched.units; u += gridDim.x) {
      sched.unit(u, kBn, m0, n0, split, kt, kt1);
      if (kt < kt1) return true;
    }
    return false;
  };
  constexpr int kProducerWgs = BPolicy::kProducerWgs, kThreads = kThreadsOf<BPolicy>;
  // Broadcast from lane 0, so that the compiler knows it is the same in the whole warp: what is
  // derived from it (a consumer's A rows, its descriptors) then stays in uniform registers.
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / kWgThreads, 0);
  if (wg < kProducerWgs) {  // producer
    if constexpr (BPolicy::kProducerRegs > 0) tma::setmaxnreg_dec<BPolicy::kProducerRegs>();
    const int pt = int(threadIdx.x);
    if (!BPolicy::kAllThreads && pt != 0) return;
    // Two cursors: `st` walks this block's k-steps, storing each into a stage; `ld` walks its
    // raw groups (kGroup consecutive k-steps of one work unit, one ring slot each) kSlots
    // groups ahead. Thread 0 refills a slot once `st` has left its group and every producer
    // thread is done with it (named barrier).
    constexpr int kGroup = BPolicy::kStepsPerSlot;
    struct Step {
      int64_t u, m0, n0;
      int kt, kt0, kt1;  // current step (or group start) and the unit's k range
      bool valid;
    };
    auto first = [&](Step& x) {
      x.valid = seek(x.u, x.m0, x.n0, x.kt, x.kt1);
      x.kt0 = x.kt;
    };
    auto next_step = [&](Step& x) {
      if (++x.kt >= x.kt1) x.u += gridDim.x, first(x);
    };
    auto next_group = [&](Step& x) {
      x.kt = (x.kt / kGroup + 1) * kGroup;
      if (x.kt >= x.kt1) x.u += gridDim.x, first(x);
    };
    Step st{int64_t(blockIdx.x), 0, 0, 0, 0, 0, false};
    first(st);
    Step ld = st;
    if constexpr (kSlots > 0)
      for (int i = 0; i < kSlots && ld.valid; ++i, next_group(ld))
        if (pt == 0) BPolicy::template issue_raw<kBn>(b, ld.n0, ld.kt / kGroup, ring + i * kSlotBytes, &raw_full[i]);
    int s = 0, slot = 0;
    uint32_t phase = 0, raw_phase = 0;
    while (st.valid) {
      tma::mbar_wait(&empty[s], phase ^ 1);
      if (pt == 0) {
        tma::mbar_arrive_expect_tx(&full[s], uint32_t(kBm * kBk * sizeof(T) + BPolicy::kTmaBytes));
        tma::load_2d(sa + size_t(s) * kBm * kBk, &map_a, st.kt * kBk, int(st.m0), &full[s]);
      }
      if constexpr (kSlots > 0)
        if (st.kt == st.kt0 || st.kt % kGroup == 0) tma::mbar_wait(&raw_full[slot], raw_phase);  // a new group
      BPolicy::template store<kBn>(b, pt, st.n0, st.kt, ring + slot * kSlotBytes, sw + size_t(s) * kBn * kBk, &full[s]);
      if constexpr (kSlots > 0) {
        if (st.kt + 1 == st.kt1 || (st.kt + 1) % kGroup == 0) {  // leaving the group: refill its slot
          tma::named_barrier_sync(1, kProducerWgs * kWgThreads);
          if (ld.valid) {
            if (pt == 0) BPolicy::template issue_raw<kBn>(b, ld.n0, ld.kt / kGroup, ring + slot * kSlotBytes, &raw_full[slot]);
            next_group(ld);
          }
          if (++slot == kSlots) slot = 0, raw_phase ^= 1;
        }
      }
      next_step(st);
      if (++s == kStages) s = 0, phase ^= 1;
    }
    return;
  }
  if constexpr (BPolicy::kProducerRegs > 0) {
    // Registers the producers gave back, shared by the two consumer warpgroups (of the 64 K
    // registers of the SM, as __launch_bounds__(kThreads, 1) allocates them: 8-register units).
    constexpr int kPerThread = (65536 / kThreads) / 8 * 8;
    constexpr int kConsumerRegs =
        ((kThreads * kPerThread - kProducerWgs * kWgThreads * BPolicy::kProducerRegs) / (2 * kWgThreads)) / 8 * 8;
    tma::setmaxnreg_inc<kConsumerRegs>();
  }
  const int c = wg - kProducerWgs, warp = (int(threadIdx.x) / 32) % 4, lane = int(threadIdx.x) % 32;
  int s = 0;
  uint32_t phase = 0;
  for (int64_t u = blockIdx.x; u < sched.units; u += gridDim.x) {
    int64_t m0, n0;
    int split, kt0, kt1;
    sched.unit(u, kBn, m0, n0, split, kt0, kt1);
    float acc[kBn / 2];
#pragma unroll
    for (int i = 0; i < kBn / 2; ++i) acc[i] = 0.f;
    int prev = -1;
    for (int kt = kt0; kt < kt1; ++kt) {
      tma::mbar_wait(&full[s], phase);
      const uint64_t da = tma::desc_k_major_sw128(sa + size_t(s) * kBm * kBk + size_t(c) * 64 * kBk);
      const uint64_t dw = tma::desc_k_major_sw128(sw + size_t(s) * kBn * kBk);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kBk / 16; ++kk)  // +32 bytes per 16 elements of K: +2 in the descriptor
        wgmma::wgmma_m64k16<kBn, T>(acc, da + 2 * kk, dw + 2 * kk, 1);
      wgmma::commit();
      wgmma::wait<1>();  // the previous k-step's wgmma has retired: release its stage
      if (prev >= 0 && lane == 0) tma::mbar_arrive(&empty[prev]);
      prev = s;
      if (++s == kStages) s = 0, phase ^= 1;
    }
    wgmma::wait<0>();
    if (prev >= 0 && lane == 0) tma::mbar_arrive(&empty[prev]);
    tc_gemm::Out o = out;  // split-K: this split's f32 plane of the workspace
    if (splits > 1) o.c = static_cast<float*>(out.c) + split * m * n;
    // Accumulator layout (m64nN): register 4j + r of thread (warp, lane) holds row 16 warp +
    // lane/4 + 8 (r/2), column 8 j + 2 (lane%4) + r%2.
    const int64_t row = m0 + 64 * c + 16 * warp + lane / 4;
    const bool rows_in = o.pairs && m0 + 64 * (c + 1) <= m;  // the warpgroup's rows in C (and pair stores)
    if constexpr (kGated) {
      // Gate columns 0 .. BN/2 - 1 are registers [0, BN/4), up's the next BN/4: act(gate) * up
      // in the first half, an m64n(BN/2) tile of C at column n0 / 2.
      constexpr int kHalf = kBn / 4;
#pragma unroll
      for (int i = 0; i < kHalf; ++i) acc[i] = glu(acc[i], acc[kHalf + i], b.gelu);
      store_tile<kBn / 2>(o, n0 / 2, row, lane, acc, rows_in && n0 / 2 + kBn / 2 <= n);
    } else {
      store_tile<kBn>(o, n0, row, lane, acc, rows_in && n0 + kBn <= n);
    }
  }
#else
  __trap();  // built for another architecture; the variants' supports() keep launches away
#endif
}

bool hopper();  // the device is sm_90 (hgemm_wgmma.cu)

// The launch both Hopper GEMM kernels share (this mainloop and q3_wgmma_rs, qgemm_rs.cuh): A's
// TMA map (boxes of box_rows x 64), the split-K workspace and shared-memory checks, a persistent
// grid over tiles x splits work units (blocks_per_sm blocks an SM at most: what the kernel's launch
// bounds were compiled for), then splitk_reduce, which finishes C from the f32 partials in
// p.workspace. `kernel` takes (A's map, b, extra..., out, splits, m, n, k).
template <class Kernel, class BArgs, class... Extra>
Status launch_persistent(Kernel kernel, int threads, size_t smem, int blocks_per_sm, int box_rows, bool bf16,
                         int64_t tiles, const BArgs& b,
                         const GemmProblem& p, const GemmConfig& c, const char* name, cudaStream_t s,
                         const Extra&... extra) {
  const std::string who = name;
  CUtensorMap ma{};
  if (!tma::encode_2d_sw128(&ma, bf16, p.a, uint64_t(p.m), uint64_t(p.k), uint64_t(p.lda), box_rows, kBk))
    return Status::error(who + ": the driver refused the TMA descriptor of A (alignment or size)");
  if (c.splits < 1) return Status::error(who + ": splits must be >= 1");
  if (gemm_workspace_bytes(p, c) > p.workspace_bytes || (c.splits > 1 && !p.workspace))
    return Status::error(who + ": split-K needs " + std::to_string(gemm_workspace_bytes(p, c)) + " bytes of workspace");
  int dev = 0, sms = 0, smem_optin = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (smem > size_t(smem_optin) ||
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)
    return Status::error(who + ": " + std::to_string(smem) + " bytes of shared memory not available");
  const unsigned grid = unsigned(std::min<int64_t>(tiles * c.splits, int64_t(sms) * blocks_per_sm));
  tc_gemm::Out out = tc_gemm::make_out(p);
  if (c.splits > 1) out = tc_gemm::Out{p.workspace, p.n, p.m, p.n, 0, 1.f, 0.f}, out.pairs = tc_gemm::pair_stores(out);
  kernel<<<grid, threads, smem, s>>>(ma, b, extra..., out, c.splits, p.m, p.n, p.k);
  if (Status st = launch_status(name); !st) return st;
  return c.splits > 1 ? splitk_reduce(p, c.splits, s) : Status::success();
}

// Launches this mainloop for one policy and tile width.
template <class T, int kBn, int kStages, class BPolicy>
Status launch(const GemmProblem& p, const GemmConfig& c, const typename BPolicy::Args& b, const char* name,
              cudaStream_t s) {
  constexpr int kTileN = gated<BPolicy>() ? kBn / 2 : kBn;  // C's columns a tile writes
  const int64_t tiles = ((p.m + kBm - 1) / kBm) * ((p.n + kTileN - 1) / kTileN);
  return launch_persistent(wgmma_gemm_kernel<T, kBn, kStages, BPolicy>, kThreadsOf<BPolicy>,
                           smem_bytes<T, kBn, kStages, BPolicy>(), 1, kBm, std::is_same_v<T, __nv_bfloat16>, tiles, b, p, c,
                           name, s);
}

}  // namespace lamina::kernels::wgmma_gemm

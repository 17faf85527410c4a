// q3_wgmma_rs: quantised weights as wgmma's register operand (sm_90a). Against q2_wgmma, the
// roles of the operands swap: the block computes C^T[n][m] = W[n][k] X[m][k]^T, with the 128
// weight rows of its tile as wgmma's M side (2 consumer warpgroups x 64 rows) and up to 256
// activation rows as its N side. The quantised bytes of W arrive by TMA into a ring of raw
// slots (q2_wgmma's slot layouts and those of the types only it reads, 4 k-steps each) and each consumer thread converts the
// bytes of its own A fragment straight into registers: no f16 copy of W is written to shared
// memory, there are no producer warpgroups doing the conversion, and a W tile is converted
// once per 64 x BM x 16 tensor-core product instead of once per 128 x 128 x 16 one.
//
//   block:  1 producer warpgroup (thread 0 issues every TMA), 2 consumer warpgroups; a tile of
//           BM activation rows x 128 weight rows, or x 256 (each consumer then owns two 64-row
//           halves: the X stage feeds twice the rows); one block an SM, or two (kBlocks, the
//           8-split config of 64 x 128 tiles: half the registers each, twice the warps to hide
//           a k-step's latency at 16-64 rows)
//   smem:   X stages [kStages][BM][64] f16, K-major, 128-byte swizzle (wgmma's B operand);
//           W ring [2][slot] of raw bytes (q2_wgmma's DequantB::issue_raw layout);
//           full/empty mbarriers for each X stage and each W slot
//   thread: warp w of consumer c, lane (g = lane / 4, t = lane % 4) owns weight rows
//           r0 = 64 c + 16 w + g and r0 + 8, k offsets 2t, 2t+1, 2t+8, 2t+9 of each k16 step
//   output: accumulator register 4j + r holds C[m0 + 8j + 2t + r % 2][n0 + r0 + 8 (r / 2)],
//           stored straight from registers (eight lanes write 32 consecutive bytes of a row)
//
// Gated (kGlu, a GemmProblem with b_up): the two 64-row halves of a consumer warpgroup are the
// same 64 output features of the gate matrix (half 0) and of the up matrix (half 1), so a thread
// holds gate and up of the same C elements and the epilogue writes act(gate) * up (SiLU, or GELU
// with tanh) in C's type: one kernel in place of two GEMMs, the GLU and the 16-bit conversion
// of its output for the down projection (the batching engine's steps).
//
// Grouped by expert (GemmProblem::groups, gemm_experts: a mixture of experts' rows): A's rows are
// sorted by expert (moe_sort's slots), the units are (tile of one expert's rows, 128 columns of C)
// read from the tile list in device memory, and each tile's W is its expert's, through that
// expert's tensor maps in a table in global memory (gemm_experts_args); rows past the tile's end
// (the next expert's) are multiplied but not stored. No split-K.
//
// The fragments' conversions and their values: qgemm_rs_frags.cuh.
// Figures: docs/benchmarks.md (lamina kbench gemm).
#pragma once

#include "kernels/common/activations.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/gemm/qgemm_rs_frags.cuh"

#include <cstring>
#include <vector>

namespace lamina::kernels::qgemm_rs {

using wgmma_gemm::kBk;
using wgmma_gemm::kWgThreads;

inline constexpr int kThreads = 3 * kWgThreads;

// Shared memory: X stages, the W ring (kBw / 128 sub-slots of q2_wgmma's layout per slot),
// barriers, and slack to align the base to 1024.
template <QKind kKind, int kBm, int kBw, int kStages>
constexpr size_t smem_bytes() {
  return size_t(kStages) * kBm * kBk * 2 + 2 * (kBw / 128) * Raw<kKind>::template kSlotBytes<128> + 1024 + 1024;
}

// f(integral_constant<int, I>) for I = 0 .. N - 1, unrolled.
template <int N, int I = 0, class F>
__device__ __forceinline__ void unroll(F&& f) {
  if constexpr (I < N) {
    f(std::integral_constant<int, I>{});
    unroll<N, I + 1>(f);
  }
}

// Registers a thread of each role gets (setmaxnreg) with kBlocks blocks resident per SM: one
// block takes the whole register file (168 a thread at launch, 40 / 232 after), two take half
// (80 at launch, 24 / 104 after: 128 x 24 + 256 x 104 <= 384 x 80).
template <int kBlocks>
inline constexpr int kProducerRegs = kBlocks == 1 ? 40 : 24;
template <int kBlocks>
inline constexpr int kConsumerRegs = kBlocks == 1 ? 232 : 104;

// The grouped launch's tiles and W tables (GemmGroups, typed); tiles null: one W (w, w_up).
template <QKind kKind>
struct Grouped {
  const int4* tiles = nullptr;  // [*count] {expert, first row, end row, 0}
  const int* count = nullptr;
  const typename Raw<kKind>::Args* w = nullptr;     // [n_expert]
  const typename Raw<kKind>::Args* w_up = nullptr;  // gated: the up matrices'
};

// A unit of the persistent grid: its rows of A (m0 .., stored below m_end), its columns of C, its
// K range, and the W it reads (the kernel's, or its tile's expert's from the table).
template <QKind kKind>
struct Unit {
  int64_t m0, n0, m_end;
  int split, kt0, kt1;
  const typename Raw<kKind>::Args* w;
  const typename Raw<kKind>::Args* w_up;
};
template <QKind kKind>
__device__ __forceinline__ Unit<kKind> unit_at(const wgmma_gemm::Schedule& sched, const Grouped<kKind>& grp, int64_t u, int tile_n,
                                               int64_t m, const typename Raw<kKind>::Args& w,
                                               const typename Raw<kKind>::Args& w_up) {
  Unit<kKind> r;
  if (!grp.tiles) {
    sched.unit(u, tile_n, r.m0, r.n0, r.split, r.kt0, r.kt1);
    r.m_end = m, r.w = &w, r.w_up = &w_up;
    return r;
  }
  const int4 t = grp.tiles[u / sched.grid_n];  // the tile's units one after another: its expert's W shared in L2
  r.m0 = t.y, r.m_end = t.z, r.n0 = (u % sched.grid_n) * tile_n;
  r.split = 0, r.kt0 = 0, r.kt1 = sched.ktiles;
  r.w = grp.w + t.x, r.w_up = grp.w_up ? grp.w_up + t.x : nullptr;
  return r;
}

// Orders the TMA unit's reads of a table's tensor maps in global memory after their writes
// through the generic proxy (a copy from the host, which no kernel fenced): fence.proxy.tensormap
// on each 128-byte CUtensorMap at the start of Args (the rest, the super-blocks' plane, is shorter).
// (Maps passed as kernel parameters need nothing.)
template <class Args>
__device__ __forceinline__ void acquire_maps(const Args* a) {
#pragma unroll
  for (int i = 0; i < int(sizeof(Args) / 128); ++i)
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(reinterpret_cast<uint64_t>(a) + 128 * i) : "memory");
}

template <QKind kKind, int kBm, int kBw, int kStages, bool kGlu, int kBlocks>
__global__ void __launch_bounds__(kThreads, kBlocks)
    qgemm_rs_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ typename Raw<kKind>::Args w,
                    const __grid_constant__ typename Raw<kKind>::Args w_up, bool gelu, const __grid_constant__ Grouped<kKind> grp,
                    tc_gemm::Out out, int splits, int64_t m, int64_t n, int64_t k) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // kBw = 256: each consumer warpgroup owns two 64-row halves (sub-slot h holds weight rows
  // 128 h .. 128 h + 127; gated, sub-slot 1 holds the up matrix's rows of sub-slot 0's gate
  // rows), so every X stage feeds twice the weight rows. kTileN: the block's columns of C.
  constexpr int kHalves = kBw / 128, kTileN = kGlu ? 128 : kBw;
  static_assert(kHalves == 1 || kHalves == 2, "128 or 256 weight rows per block");
  static_assert(!kGlu || kHalves == 2, "a gated block holds gate and up halves");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = tma::align_1024(smem_raw);
  constexpr size_t kStageBytes = size_t(kBm) * kBk * 2, kSubBytes = Raw<kKind>::template kSlotBytes<128>;
  constexpr size_t kSlotBytes = kHalves * kSubBytes;
  uint8_t* xs = smem;                          // [kStages][kBm][64] f16, swizzled
  uint8_t* ring = xs + kStages * kStageBytes;  // [2][kHalves][kSubBytes]
  auto* full_x = reinterpret_cast<uint64_t*>(ring + 2 * kSlotBytes);
  uint64_t* empty_x = full_x + kStages;
  uint64_t* full_w = empty_x + kStages;  // [2]
  uint64_t* empty_w = full_w + 2;        // [2]
  constexpr int kConsumerWarps = 8;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) tma::mbar_init(&full_x[s], 1), tma::mbar_init(&empty_x[s], kConsumerWarps);
    for (int i = 0; i < 2; ++i) tma::mbar_init(&full_w[i], kHalves), tma::mbar_init(&empty_w[i], kConsumerWarps);
    tma::mbar_fence_init();
  }
  __syncthreads();
  const wgmma_gemm::Schedule sched(m, n, k, kBm, kTileN, splits);
  const int64_t units = grp.tiles ? int64_t(*grp.count) * sched.grid_n : sched.units;
  constexpr int kGroup = Raw<kKind>::kStepsPerSlot;  // k-steps per W slot
  // Broadcast from lane 0, so that the compiler knows it is the same in the whole warp: what is
  // derived from it (a consumer's A rows, its descriptors) then stays in uniform registers.
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / kWgThreads, 0);
  if (wg == 0) {  // producer: thread 0 issues the copies, in the order the consumers use them
    tma::setmaxnreg_dec<kProducerRegs<kBlocks>>();
    if (threadIdx.x != 0) return;
    int s = 0, ws = 0;
    uint32_t phase = 0, wphase = 0;
    for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
      const Unit<kKind> un = unit_at(sched, grp, u, kTileN, m, w, w_up);
      const int64_t m0 = un.m0, n0 = un.n0;
      const int kt0 = un.kt0, kt1 = un.kt1;
      if (grp.tiles) {  // (the experts' tensor maps are in global memory, written by a copy from the host)
        acquire_maps(un.w);
        if constexpr (kGlu) acquire_maps(un.w_up);
      }
      for (int kt = kt0; kt < kt1; ++kt) {
        if (kt == kt0 || kt % kGroup == 0) {
          tma::mbar_wait(&empty_w[ws], wphase ^ 1);
          for (int h = 0; h < kHalves; ++h)  // one arrival (with its bytes) per sub-slot
            Raw<kKind>::template issue_raw<128>(kGlu && h == 1 ? *un.w_up : *un.w, kGlu ? n0 : n0 + 128 * h, kt / kGroup,
                                                ring + ws * kSlotBytes + h * kSubBytes, &full_w[ws]);
          if (++ws == 2) ws = 0, wphase ^= 1;
        }
        tma::mbar_wait(&empty_x[s], phase ^ 1);
        tma::mbar_arrive_expect_tx(&full_x[s], uint32_t(kStageBytes));
        tma::load_2d(xs + s * kStageBytes, &map_x, kt * kBk, int(m0), &full_x[s]);
        if (++s == kStages) s = 0, phase ^= 1;
      }
    }
    return;
  }
  tma::setmaxnreg_inc<kConsumerRegs<kBlocks>>();
  const int c = wg - 1, warp = (int(threadIdx.x) / 32) % 4, lane = int(threadIdx.x) % 32;
  const int r0 = 64 * c + 16 * warp + lane / 4, t = lane % 4;  // row within a 128-row sub-slot
  int s = 0, ws = 0;
  uint32_t phase = 0, wphase = 0;
  Frags<kKind> fr[kHalves];
  using I0 = std::integral_constant<int, 0>;
  using I1 = std::integral_constant<int, kHalves - 1>;
  for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    const Unit<kKind> un = unit_at(sched, grp, u, kTileN, m, w, w_up);
    const int64_t m0 = un.m0, n0 = un.n0;
    const int split = un.split, kt0 = un.kt0, kt1 = un.kt1;
    // (Split-K can leave the last units empty: the producer skips them, the k-step loop below
    // runs no step of theirs, and their partials are stored as zeros: splitk_reduce sums every plane.)
    // One accumulator array per half, not a 2-D array: ptxas kept the 2-D one on the stack
    // (and serialised the wgmmas reading it).
    float acc0[kBm / 2], acc1[kHalves == 2 ? kBm / 2 : 1];
#pragma unroll
    for (int i = 0; i < kBm / 2; ++i) acc0[i] = 0.f;
#pragma unroll
    for (int i = 0; i < int(sizeof(acc1) / sizeof(float)); ++i) acc1[i] = 0.f;
    int prev = -1;
    // Half h of k-step kt: convert its fragments into f (which the wgmma group before last has
    // stopped reading), then its four k16 products against the X stage, one commit group. After
    // each group only the newest stays in flight, so at half 0 the previous k-step is done with
    // its X stage.
    // s4c: kt's place in its W slot (kt % kGroup), a constant of the unrolled step.
    auto sub = [&](int kt, auto s4c, auto hc, uint32_t (&f)[16], float (&a)[kBm / 2]) {
      constexpr int h = decltype(hc)::value, s4 = decltype(s4c)::value;
      uint8_t* slot = ring + ws * kSlotBytes;
      if (h == 0 && (s4 == 0 || kt == kt0)) {
        // (the super-blocks' records first: their loads overlap the wait for the slot)
        if constexpr (Raw<kKind>::kSupers)
#pragma unroll
          for (int hh = 0; hh < kHalves; ++hh)
            fr[hh].load_supers(kGlu && hh == 1 ? *un.w_up : *un.w, kGlu ? n0 : n0 + 128 * hh, kt / kGroup, r0);
        tma::mbar_wait(&full_w[ws], wphase);
#pragma unroll
        for (int hh = 0; hh < kHalves; ++hh) fr[hh].load_aux(slot + hh * kSubBytes, r0);
      }
      fr[h].convert(slot + h * kSubBytes, r0, t, s4, f);
      if (h == kHalves - 1 && (s4 == kGroup - 1 || kt + 1 == kt1)) {  // done with this slot
        __syncwarp();
        if (lane == 0) tma::mbar_arrive(&empty_w[ws]);
        if (++ws == 2) ws = 0, wphase ^= 1;
      }
      if (h == 0) tma::mbar_wait(&full_x[s], phase);
      const uint64_t dx = tma::desc_k_major_sw128(xs + s * kStageBytes);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint32_t fk[4] = {f[4 * kk], f[4 * kk + 1], f[4 * kk + 2], f[4 * kk + 3]};
        wgmma::wgmma_m64k16_rs<kBm>(a, fk, dx + 2 * kk, 1);  // +32 bytes of K per k16: +2
      }
      wgmma::commit();
      wgmma::wait<1>();
      if (h == 0) {
        if (prev >= 0 && lane == 0) tma::mbar_arrive(&empty_x[prev]);
        prev = s;
      }
      if (h == kHalves - 1 && ++s == kStages) s = 0, phase ^= 1;
    };
    uint32_t fa[16], fb[16];
    // The k-steps a W slot (kGroup steps) at a time, unrolled, so that a step's place in its slot
    // is a constant: its fragments' offsets and the d words it takes are then fixed (a run-time
    // kt % kGroup made them chains of selects and address arithmetic in every step). A split's
    // range may start or end inside a slot. Fragment buffers alternate with each conversion: fa
    // for half 0 and fb for half 1, or, with one half, by the parity of kt.
    for (int g = kt0 - kt0 % kGroup; g < kt1; g += kGroup) {
      unroll<kGroup>([&](auto s4c) {
        constexpr int s4 = decltype(s4c)::value;
        const int kt = g + s4;
        if (kt < kt0 || kt >= kt1) return;
        if constexpr (kHalves == 2) sub(kt, s4c, I0{}, fa, acc0), sub(kt, s4c, I1{}, fb, acc1);
        else if constexpr (s4 % 2 == 0) sub(kt, s4c, I0{}, fa, acc0);
        else sub(kt, s4c, I0{}, fb, acc0);
      });
    }
    wgmma::wait<0>();
    if (lane == 0 && prev >= 0) tma::mbar_arrive(&empty_x[prev]);
    // After the block's last mainloop: the kernel after this one (splitk_reduce, launched with
    // PDL) may be scheduled while the epilogues store.
    if (u + gridDim.x >= units) pdl_launch_dependents();
    tc_gemm::Out o = out;  // split-K: this split's f32 plane of the workspace
    if (splits > 1) o.c = static_cast<float*>(out.c) + split * m * n;
    o.m = un.m_end;  // (grouped: the tile's rows only)
    auto store = [&](const float (&a)[kBm / 2], int64_t col) {  // a thread's two columns, every row
      // All of them in C: no tests per element. Not in the two-blocks-an-SM instances: their
      // consumers have 104 registers, and there the shorter epilogue's registers made ptxas
      // serialise the wgmmas, and split-K results came out wrong (GemmGpu, 8 splits).
      if constexpr (kBlocks == 1)
        if (m0 + kBm <= un.m_end && col + 8 < n) {
          tc_gemm::store_columns<kBm>(o, col, m0 + 2 * t, a);
          return;
        }
      const tc_gemm::OutColumn c0 = tc_gemm::out_column(o, col), c8 = tc_gemm::out_column(o, col + 8);
#pragma unroll
      for (int j = 0; j < kBm / 8; ++j) {
        const int64_t row = m0 + 8 * j + 2 * t;
        tc_gemm::out_store(o, c0, row, a[4 * j]);
        tc_gemm::out_store(o, c0, row + 1, a[4 * j + 1]);
        tc_gemm::out_store(o, c8, row, a[4 * j + 2]);
        tc_gemm::out_store(o, c8, row + 1, a[4 * j + 3]);
      }
    };
    if constexpr (kGlu) {
#pragma unroll
      for (int i = 0; i < kBm / 2; ++i) acc0[i] = glu(acc0[i], acc1[i], gelu);
      store(acc0, n0 + r0);
    } else {
      store(acc0, n0 + r0);
      if constexpr (kHalves == 2) store(acc1, n0 + 128 + r0);
    }
  }
#else
  __trap();  // built for another architecture; the variant's supports() keeps launches away
#endif
}

// Launches the persistent grid (wgmma_gemm::launch_persistent: split-K, shared memory, grid).
// A gated problem (p.b_up) takes the kGlu instances, without split-K (the GLU is not linear).
// kBlocks: blocks per SM the instance is compiled for (2: half the registers each, so that small
// tiles in many K splits keep twice the warps in flight; the grid fills what fits).
// Grouped (p.groups): the experts' tables stand for W (p.b, p.b_up), the tiles for A's row blocks.
template <QKind kKind, int kBm, int kBw, int kStages, bool kGlu = false, int kBlocks = 1>
Status launch(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  if (kGlu != (p.b_up != nullptr) || (kGlu && c.splits != 1)) return Status::error("q3_wgmma_rs: gated problem and instance differ");
  typename Raw<kKind>::Args w{}, w_up{};
  Grouped<kKind> grp;
  constexpr int kTileN = kGlu ? 128 : kBw;
  int64_t row_blocks = (p.m + kBm - 1) / kBm;
  if (p.groups) {
    if (c.splits != 1 || kBm != kGemmExpertsTileRows) return Status::error("q3_wgmma_rs: a grouped problem takes 64-row tiles, no split-K");
    grp.tiles = reinterpret_cast<const int4*>(p.groups->tiles), grp.count = p.groups->count;
    grp.w = static_cast<const typename Raw<kKind>::Args*>(p.b);
    grp.w_up = static_cast<const typename Raw<kKind>::Args*>(p.b_up);
    row_blocks = p.groups->max_tiles;
  } else {
    GemmProblem up = p;
    up.b = p.b_up;
    if (!qgemm_wgmma::make_args<kKind, 128>(p, w) || (kGlu && !qgemm_wgmma::make_args<kKind, 128>(up, w_up)))
      return Status::error("q3_wgmma_rs: the driver refused the TMA descriptors of W");
  }
  const int64_t tiles = row_blocks * ((p.n + kTileN - 1) / kTileN);
  return wgmma_gemm::launch_persistent(qgemm_rs_kernel<kKind, kBm, kBw, kStages, kGlu, kBlocks>, kThreads,
                                       smem_bytes<kKind, kBm, kBw, kStages>(), kBlocks, kBm, false, tiles, w, p, c, "q3_wgmma_rs", s,
                                       w_up, p.gelu, grp);
}

// The bytes of a table of the experts' W tensor maps for a grouped launch (empty when the driver
// refuses one): Raw<kKind>::Args a matrix, mats[e] the repacked n x k matrix of expert e.
template <QKind kKind>
std::vector<uint8_t> experts_args(const std::vector<const void*>& mats, int64_t n, int64_t k) {
  using Args = typename Raw<kKind>::Args;
  std::vector<uint8_t> bytes(mats.size() * sizeof(Args));
  for (size_t e = 0; e < mats.size(); ++e) {
    GemmProblem p;
    p.b = mats[e], p.n = n, p.k = k;
    Args a{};
    if (!qgemm_wgmma::make_args<kKind, 128>(p, a)) return {};
    std::memcpy(bytes.data() + e * sizeof(Args), &a, sizeof(Args));
  }
  return bytes;
}

// The instances: each launch<kind, bm, bw, 4> of run_kind below is compiled in a translation unit
// of its own, which src/CMakeLists.txt writes (qgemm_rs_<type>_<bm>x<bw>.cu in the build tree):
// one took minutes of nvcc, and twelve of them in three files set the length of every build. The
// dispatch (qgemm_rs.cu) declares them extern.
#define LAMINA_QGEMM_RS_EXTERN(kind)                                                                 \
  extern template Status launch<kind, 256, 128, 4>(const GemmProblem&, const GemmConfig&, cudaStream_t); \
  extern template Status launch<kind, 128, 128, 4>(const GemmProblem&, const GemmConfig&, cudaStream_t); \
  extern template Status launch<kind, 64, 128, 4>(const GemmProblem&, const GemmConfig&, cudaStream_t);  \
  extern template Status launch<kind, 64, 128, 4, false, 2>(const GemmProblem&, const GemmConfig&, cudaStream_t); \
  extern template Status launch<kind, 64, 256, 4>(const GemmProblem&, const GemmConfig&, cudaStream_t);   \
  extern template Status launch<kind, 64, 256, 4, true>(const GemmProblem&, const GemmConfig&, cudaStream_t); \
  extern template Status launch<kind, 128, 256, 4, true>(const GemmProblem&, const GemmConfig&, cudaStream_t);

// The dispatch of one weight type to its instances (qgemm_rs.cu).
template <QKind kKind>
Status run_kind(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  // Gated: bn = 128 columns of C, each block 128 gate and 128 up rows (kBw 256); 64 or 128
  // activation rows (256 would need 256 accumulators a thread).
  if (p.b_up) {
    if (c.stages == 4 && c.bn == 128 && c.splits == 1 && c.bm == 64) return launch<kKind, 64, 256, 4, true>(p, c, s);
    if (c.stages == 4 && c.bn == 128 && c.splits == 1 && c.bm == 128) return launch<kKind, 128, 256, 4, true>(p, c, s);
    return Status::error("q3_wgmma_rs: no gated instance for config " + c.str());
  }
  if (c.stages == 4 && c.bn == 128) {
    if (c.bm == 256) return launch<kKind, 256, 128, 4>(p, c, s);
    if (c.bm == 128) return launch<kKind, 128, 128, 4>(p, c, s);
    if (c.bm == 64 && c.splits == 8) return launch<kKind, 64, 128, 4, false, 2>(p, c, s);  // two blocks an SM
    if (c.bm == 64) return launch<kKind, 64, 128, 4>(p, c, s);
  }
  // Two 64-row halves per consumer warpgroup: half the X traffic per weight row (the fastest
  // config at 16-64 activation rows; at 128 and more, 256-row weight tiles never won in kbench).
  if (c.stages == 4 && c.bn == 256 && c.bm == 64) return launch<kKind, 64, 256, 4>(p, c, s);
  return Status::error("q3_wgmma_rs: no instance for config " + c.str());
}

// The dispatch of p.b_type to its kind's instances (qgemm_rs.cu).
Status run(const GemmProblem& p, const GemmConfig& c, cudaStream_t s);

}  // namespace lamina::kernels::qgemm_rs

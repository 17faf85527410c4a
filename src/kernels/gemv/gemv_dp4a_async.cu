// q_dp4a_async: decode's q_dp4a (batch 1; Q4_0 and Q8_0 repacked) fed by a ring of shared-memory
// stages per warp that cp.async fills, instead of q_dp4a_slots' two register slots.
//   - against q_dp4a_slots: a warp keeps kStages - 1 steps of weights in flight (3 of 2,304 bytes
//     each at 2 rows x unroll 2) where the slots keep one while the other is multiplied. ncu of
//     the slots in the Llama-3-8B decode chain (docs/benchmarks.md, fifty-eighth session): DRAM
//     at 19-44 % of its peak, 38-61 % of the stall samples on long scoreboards (the first use of
//     a loaded chunk), 117-124 registers: the loads in flight, not the arithmetic, set the pace,
//     and registers cannot hold more of them.
//   - a step is read from its stage into the registers of one Dp4aStep (LDS, conflict-free) and
//     multiplied by the same Dp4aStep::dot as the slots: the same products in the same order,
//     the same bits.
//   - the first kStages - 1 steps go out before the PDL wait (weights only); the gate/up pair's
//     matrices take turns step by step (each step one matrix).
// Layout of a stage (per warp): quants [kRows][kUnroll][32 lanes][16 bytes], then the d of
// each (row, unroll) run of 32 chunks, [kRows][kUnroll][64 bytes] (Q8_0: 32 of them used).
#include "kernels/common/mma.cuh"
#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_dp4a.cuh"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_x8.cuh"

#include <cuda_runtime.h>

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

// cp.async of 16 bytes marked evict-first in L2 (weights are read once per GEMV, as load_stream).
__device__ __forceinline__ void cp_async16_stream(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(mma::smem_addr(smem)), "l"(gmem),
               "r"(src_bytes), "l"(evict_first_policy()));
}

template <int kBits, int kRows, int kUnroll>
struct AsyncStage {
  using Step = Dp4aStep<kBits, kScaleD, kRows, kUnroll>;
  static constexpr int kQuantBytes = kRows * kUnroll * 32 * 16, kScaleBytes = kRows * kUnroll * 64;
  static constexpr int kBytes = kQuantBytes + kScaleBytes;

  // Chunks l0 + u*32 + lane of rows row0.. (rows past n clamped to n - 1, chunks past the row
  // zero-filled) into stage st: each lane its own quants, lanes 0..3 the run's 64 bytes of d.
  static __device__ __forceinline__ void issue(const uint8_t* w, int64_t row0, int64_t n, int64_t l0, int64_t k,
                                               uint8_t* st) {
    const size_t qrow = Step::quant_row(k), srow = Step::scale_row(k);
    const int64_t loads = Step::loads(k);
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = row0 + r < n ? row0 + r : n - 1;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t l = l0 + u * 32 + lane;
        const uint8_t* q = w + size_t(row) * qrow + size_t(l < loads ? l : 0) * 16;
        cp_async16_stream(st + ((r * kUnroll + u) * 32 + lane) * 16, q, l < loads ? 16 : 0);
        if (lane < 4) {  // the d of chunks l0 + u*32 .. + 31: 64 bytes (Q8_0: 32), zero past the row
          const size_t first = size_t(l0 + u * 32) * (Step::kPer / 16), at = first + size_t(lane) * 16;
          const size_t end = size_t(loads) * (Step::kPer / 16);  // the row's bytes of d
          const int bytes = at < end ? int(end - at < 16 ? end - at : 16) : 0;
          const uint8_t* d = w + size_t(n) * qrow + size_t(row) * srow + (bytes ? at : 0);
          cp_async16_stream(st + kQuantBytes + (r * kUnroll + u) * 64 + lane * 16, d, bytes);
        }
      }
    }
  }
  // The step in stage st into g, as Dp4aStep::load would have loaded it.
  static __device__ __forceinline__ void fetch(const uint8_t* st, typename Step::Regs& g) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        g.raw[r][u] = *reinterpret_cast<const uint4*>(st + ((r * kUnroll + u) * 32 + lane) * 16);
        const __half d = *reinterpret_cast<const __half*>(st + kQuantBytes + (r * kUnroll + u) * 64 + (lane * Step::kPer / 32) * 2);
        g.aux[r][u] = make_float2(__half2float(d), 0.f);
        g.qh[r][u] = 0u;
      }
  }
};

// w (, w_up): [n][k] repacked (gemv_repack); y: [n]; x from xin (int8 blocks of k); n a multiple
// of 32 for y8. Dynamic shared memory: x's blocks when made here (x8_smem_bytes, rounded to 16),
// then kWarps x kStages stages.
template <int kBits, int kRows, int kStages, bool kGateUp>
__global__ void __launch_bounds__(32 / kRows * 32) q_dp4a_async(const uint8_t* __restrict__ w, const uint8_t* __restrict__ w_up,
                                                                XSource xin, float* __restrict__ y, int64_t n, int64_t k, int,
                                                                Epilogue ep) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kUnroll = 2, kWarps = 32 / kRows, kMats = kGateUp ? 2 : 1;
  using Stage = AsyncStage<kBits, kRows, kUnroll>;
  using Step = typename Stage::Step;
  constexpr int64_t kStep = 32 * kUnroll;  // chunks a warp takes in one step
  const int warp = int(threadIdx.x / 32);
  const int64_t stride = int64_t(gridDim.x) * kWarps * kRows;
  const int64_t first = (int64_t(blockIdx.x) * kWarps + warp) * kRows;
  const size_t x_bytes = xin.x8 ? 0 : (x8_bytes(k) + 15) / 16 * 16;  // (as the launch's x8_smem_bytes, batch 1)
  uint8_t* ring = smem + x_bytes + size_t(warp) * kStages * Stage::kBytes;
  const int spm = int((Step::loads(k) + kStep - 1) / kStep);  // steps per matrix and row group
  // The warp's steps in order: rows row0.., matrix t / spm, chunks from (t % spm) * kStep; the
  // issue cursor runs kStages - 1 steps ahead of the multiply cursor.
  struct Cursor {
    int64_t row0;
    int t;
  };
  const auto advance = [&](Cursor& c) {
    if (++c.t == kMats * spm) c.t = 0, c.row0 += stride;
  };
  Cursor at_issue{first, 0}, at_take{first, 0};
  int slot_issue = 0;
  const auto issue = [&] {  // the step at at_issue into its stage; a group either way (the waits count groups)
    if (at_issue.row0 < n) {
      const bool up = kGateUp && at_issue.t >= spm;
      Stage::issue(up ? w_up : w, at_issue.row0, n, int64_t(up ? at_issue.t - spm : at_issue.t) * kStep, k,
                   ring + slot_issue * Stage::kBytes);
    }
    mma::cp_async_commit();
    advance(at_issue);
    if (++slot_issue == kStages) slot_issue = 0;
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue();  // weights never depend on an earlier kernel: before the wait
  pdl_wait();  // x comes from the kernel before (see kernels/common/pdl.cuh)
  RmsParts rms;
  if (xin.ss) rms.load(xin.ss, k);
  const uint8_t* xs = x8_source(xin, k, 1, smem);
  __shared__ float yv[2][kGemvMaxBatch][32];  // y of a pass, two buffers (publish_y8_rotating)
  float acc[kMats][kRows][1] = {};
  int pass = 0, slot = 0;
  typename Step::Regs g;
  while (at_take.row0 < n) {
    const Cursor c = at_take;
    advance(at_take);
    mma::cp_async_wait<kStages - 2>();  // this lane's copies of the step have landed
    __syncwarp();                       // and the other lanes'
    Stage::fetch(ring + slot * Stage::kBytes, g);
    if (++slot == kStages) slot = 0;
    issue();  // into the stage read one step ago (every lane is past it: the __syncwarp above)
    if (c.t == 0 && c.row0 + stride >= n) pdl_launch_dependents();  // this warp's last rows: the next kernel may launch
    if (kGateUp && c.t >= spm) Step::template dot<1>(g, xs, k, int64_t(c.t - spm) * kStep, 1, acc[kMats - 1]);
    else Step::template dot<1>(g, xs, k, int64_t(c.t) * kStep, 1, acc[0]);  // (two calls: acc stays in registers)
    if (c.t == kMats * spm - 1) {
      store_rows(acc, c.row0, n, 1, ep, y, xin.ss ? rms.scale(k, xin.norm_eps) : 1.f, yv[pass & 1], 0, pass,
                 c.row0 + 2 * stride < n);
#pragma unroll
      for (int m = 0; m < kMats; ++m)
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[m][r][0] = 0.f;
      ++pass;
    }
  }
  mma::cp_async_wait<0>();  // (the empty groups past the end)
}

template <int kBits, int kRows, int kStages>
Status async_launch(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  using Stage = AsyncStage<kBits, kRows, 2>;
  const size_t x = (x8_smem_bytes(p) + 15) / 16 * 16;
  const size_t smem = x + size_t(32 / kRows) * kStages * Stage::kBytes;
  auto run = [&](auto kernel) {
    unsigned grid = 0;
    if (Status st = persistent_grid_rows(kernel, "q_dp4a_async", p, c.warps, 32, smem, kDp4aBlocksPerSm, grid); !st.ok) return st;
    launch_pdl(kernel, grid, unsigned(c.warps * 32), smem, s, static_cast<const uint8_t*>(p.w), static_cast<const uint8_t*>(p.w_up),
               xsource_of(p), p.y, p.n, p.k, p.batch, epilogue_of(p));
    return launch_status("q_dp4a_async");
  };
  return p.w_up ? run(q_dp4a_async<kBits, kRows, kStages, true>) : run(q_dp4a_async<kBits, kRows, kStages, false>);
}

template <int kBits>
Status async_by_config(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (c.rows == 2 && c.warps == 16 && c.unroll == 2) return async_launch<kBits, 2, 4>(p, c, s);
  if (c.rows == 4 && c.warps == 8 && c.unroll == 2) return async_launch<kBits, 4, 4>(p, c, s);
  return Status::error("q_dp4a_async: no instance for config " + c.str());
}

Status gemv_dp4a_async_launch(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (p.batch != 1) return Status::error("q_dp4a_async: batch 1 only (decode)");
  if (p.k % 256) return Status::error("q_dp4a_async: k must be a multiple of 256 (16-byte rows of d for cp.async)");
  if (p.wtype == GgmlType::Q4_0) return async_by_config<4>(p, c, s);
  if (p.wtype == GgmlType::Q8_0) return async_by_config<8>(p, c, s);
  return Status::error("q_dp4a_async: q4_0 and q8_0 only");
}

bool async_types(GgmlType t) { return t == GgmlType::Q4_0 || t == GgmlType::Q8_0; }

}  // namespace

void register_dp4a_async_variants(std::vector<GemvVariant>& out) {
  GemvVariant v{"q_dp4a_async", "q_dp4a_slots with a cp.async ring of 4 stages per warp (3 steps in flight) instead of two register slots",
                WeightLayout::Repacked, async_types, gemv_dp4a_async_launch, {GemvConfig{2, 16, 2}, GemvConfig{4, 8, 2}},
                XRounding::Int8Blocks, /*writes_y8=*/true, /*fuses_norm=*/true, /*takes_x8_ss=*/true};
  v.max_batch = 1;
  out.push_back(v);
}

}  // namespace lamina::kernels

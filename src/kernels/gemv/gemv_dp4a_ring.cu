// q_dp4a_ring: q_dp4a's arithmetic (32-row blocks, y8 made in the block) fed from a ring of
// shared-memory stages that a producer warp fills with TMA bulk copies, ahead of the PDL wait.
//   - why: q_dp4a holds its loads in registers (16 warps x 128 registers fill an SM), so the
//     next GEMV's block is resident only once this one has left the SM, and it then has one step
//     of weights in flight when its wait returns: the HBM pipe drains at every kernel boundary.
//     lamina_chain_ceiling measured read-only chains: a kernel that triggers its dependents at
//     its start and has its first loads out before its wait, small enough that two fit on an
//     SM, takes 3.60 / 9.23 / 17.63 µs on 9 / 25 / 50 MiB against 4.26 / 9.78 / 18.40 for the
//     best kernel that waits first; a TMA ring of 3 x 32 KiB the same (3.62 / 9.59 / 18.37).
//   - here: 16 (or 8) consumer warps of 2 (or 4) rows and one producer warp; the ring is at most
//     ~104 KiB and the consumers are held to 56 (112) registers, so the blocks of two consecutive
//     GEMVs share an SM. Every thread triggers the next kernel at its start; the producer never
//     waits for the kernel before (weights never depend on it), so the ring fills while that
//     kernel runs; the consumers wait, then read each stage into registers, free it and multiply.
//   - a stage is the block's 32 rows x 64 chunks of 16 bytes of one matrix with their block
//     scales (layout: RingStage); stages go in q_dp4a's order: pass, matrix (gate, up), step.
//     Each lane of the producer copies one row (two cp.async.bulk: quants, scales).
//   - the arithmetic is q_dp4a's with unroll 2 (the same chunks per lane, in the same order):
//     outputs are bit-identical to q_dp4a with the same config.
//   - it covers decode's problem: batch 1, x given as int8 blocks (x8, or x8 with x8_ss), scale
//     rows in 16-byte multiples (k % 256 == 0 for Q4_0 / Q8_0, k % 128 for Q4_1); any other
//     problem runs q_dp4a with the same config.
// Measured (H100, 2026-11-23, llama2-7b presets; tuner in-graph timings with y8 / x8 as decode
// runs them; tg128 with the tuner's picks): slower except on Wo. Back to back, ring everywhere vs
// q_dp4a: q4_0 Q/K/V 14.82 vs 13.05 µs, gate/up 27.93 vs 22.40, W_down 14.93 vs 10.95, Wo 5.31
// vs 5.56; q8_0 gate/up 50.41 vs 35.39, W_down 23.33 vs 18.08 (~1.8 TB/s whatever the type: the
// ring's depth, one 36 KiB stage in flight while the other is read, limits it; 3 stages in 110
// KiB: tg128 q4_0 418 -> 441). Decode tg128: q4_0 ring on Wo only (the tuner's picks) 450.3 /
// 451.6 vs 475.9 / 477.2 t/s without it; ring everywhere 418.3 / 419.1 (also with every kernel
// asking for the same carveout, LAMINA_CARVEOUT=100: 418.6); q8_0 ring everywhere 252.5 vs 312.5.
// A kernel that overlaps the one before it costs the chain more than its own faster start gains.
// The tuner leaves it out (tuner_picks = false).
#include "kernels/common/tma.cuh"
#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_dp4a.cuh"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_x8.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

constexpr int kRingUnroll = 2;      // chunks per lane and row in a stage (q_dp4a's unroll)
constexpr int kRingMaxStages = 8;

// Bytes of dynamic shared memory for the ring: small enough that two blocks (of this GEMV and
// the next) fit in an SM's shared memory. LAMINA_RING_KIB=n overrides, for A/B measurements.
size_t ring_budget() {
  static const size_t bytes = [] {
    const char* e = std::getenv("LAMINA_RING_KIB");
    return (e && *e ? size_t(std::atoi(e)) : size_t(104)) * 1024;
  }();
  return bytes;
}

// One stage of the ring: the block's 32 rows x kStep chunks (16 bytes of quants each) of one
// matrix, then their block scales:
//   q  [32 rows][kStep * 16]        bytes l0 * 16 .. (l0 + chunks) * 16 of each quant row
//   sc [32 rows][kStep * kPer / 32 * kScaleBytes]   the scales of those blocks
// Rows of the repacked layout: w = [n][qrow] quants, then [n][srow] scales (Dp4aStep::load).
template <int kBits, bool kMin>
struct RingStage {
  using Step = Dp4aStep<kBits, kMin, 1, kRingUnroll>;
  static constexpr int kStep = 32 * kRingUnroll;                                  // chunks per row
  static constexpr int kQBytes = kStep * 16;                                      // per row
  static constexpr int kSBytes = kStep * Step::kPer / 32 * Step::kScaleBytes;     // per row
  static constexpr int kBytes = 32 * (kQBytes + kSBytes);
  int64_t loads, steps, qrow, srow;
  __host__ __device__ explicit RingStage(int64_t k)
      : loads(k * kBits / 128), steps((loads + kStep - 1) / kStep), qrow(k * kBits / 8), srow(k / 32 * Step::kScaleBytes) {}
  __host__ __device__ int chunks(int64_t step) const {
    const int64_t left = loads - step * kStep;
    return int(left < kStep ? left : kStep);
  }
  __host__ __device__ static uint32_t scale_bytes(int chunks) { return uint32_t(chunks * Step::kPer / 32 * Step::kScaleBytes); }
};

// w, w_up: [n][k] repacked; x8: int8 blocks of x (batch 1); y: [n]. Block: kWarps consumer
// warps of kRows rows (kWarps * kRows = 32), then the producer warp.
template <int kBits, bool kMin, int kRows, bool kGateUp>
__global__ void __launch_bounds__((32 / kRows + 1) * 32, 2)
    q_dp4a_ring(const uint8_t* __restrict__ w, const uint8_t* __restrict__ w_up, XSource xin, float* __restrict__ y,
                int64_t n, int64_t k, Epilogue ep, int stages) {
  constexpr int kWarps = 32 / kRows;
  constexpr int kMats = kGateUp ? 2 : 1;
  using Stage = RingStage<kBits, kMin>;
  using Step = Dp4aStep<kBits, kMin, kRows, kRingUnroll>;
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ uint64_t full[kRingMaxStages], empty[kRingMaxStages];
  __shared__ float yv[2][kGemvMaxBatch][32];  // y of a pass, two buffers (as publish_y8_block)
  const Stage S(k);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t block0 = int64_t(blockIdx.x) * 32, stride = int64_t(gridDim.x) * 32;

  pdl_launch_dependents();  // the next kernel's blocks may take the rest of the SM now
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) tma::mbar_init(&full[s], 1), tma::mbar_init(&empty[s], kWarps);
    tma::mbar_fence_init();
  }
  __syncthreads();

  if (warp == kWarps) {  // producer: weights never depend on an earlier kernel, so no wait
    const uint64_t policy = evict_first_policy();
    int it = 0;
    for (int64_t base = block0; base < n; base += stride)
      for (int mat = 0; mat < kMats; ++mat) {
        const uint8_t* wm = mat ? w_up : w;
        const int rows = int(n - base < 32 ? n - base : 32);
        for (int64_t step = 0; step < S.steps; ++step, ++it) {
          const int slot = it % stages, round = it / stages;
          if (round > 0) tma::mbar_wait(&empty[slot], (round - 1) & 1);
          const int chunks = S.chunks(step);
          const uint32_t sb = Stage::scale_bytes(chunks);
          if (lane == 0) tma::mbar_arrive_expect_tx(&full[slot], uint32_t(rows) * (uint32_t(chunks) * 16 + sb));
          __syncwarp();
          if (lane < rows) {
            uint8_t* q = ring + size_t(slot) * Stage::kBytes;
            const int64_t row = base + lane, l0 = step * Stage::kStep;
            tma::load_1d(q + lane * Stage::kQBytes, wm + row * S.qrow + l0 * 16, uint32_t(chunks) * 16, &full[slot], policy);
            tma::load_1d(q + 32 * Stage::kQBytes + lane * Stage::kSBytes,
                         wm + n * S.qrow + row * S.srow + int64_t(Stage::scale_bytes(int(l0))), sb, &full[slot], policy);
          }
        }
      }
    return;
  }

  pdl_wait();  // x comes from the kernel before (see kernels/common/pdl.cuh)
  RmsParts rms;
  if (xin.ss) rms.load(xin.ss, k);
  const uint8_t* xs = xin.x8;
  const int rl = warp * kRows;  // the warp's first row in its block's 32
  typename Step::Regs regs;
  int it = 0, pass = 0;
  for (int64_t base = block0; base < n; base += stride, ++pass) {
    float acc[kMats][kRows][kGemvMaxBatch] = {};
#pragma unroll
    for (int mat = 0; mat < kMats; ++mat)
      for (int64_t step = 0; step < S.steps; ++step, ++it) {
        const int slot = it % stages;
        tma::mbar_wait(&full[slot], (it / stages) & 1);
        const uint8_t* q = ring + size_t(slot) * Stage::kBytes;
        const uint8_t* sc = q + 32 * Stage::kQBytes;
        const int64_t l0 = step * Stage::kStep, blk0 = l0 * Step::kPer / 32;
        Step::template load_at<true>([&](int r, int64_t l) { return q + (rl + r) * Stage::kQBytes + (l - l0) * 16; },
                                     [&](int r, int64_t blk) { return sc + (rl + r) * Stage::kSBytes + (blk - blk0) * Step::kScaleBytes; },
                                     l0, k, regs);
        __syncwarp();
        if (lane == 0) tma::mbar_arrive(&empty[slot]);  // the stage is in registers: the producer may refill it
        Step::dot(regs, xs, k, l0, 1, acc[mat]);
      }
    // y8's barrier over the consumer warps only (the producer may have left)
    store_rows(acc, base + rl, n, 1, ep, y, xin.ss ? rms.scale(k, xin.norm_eps) : 1.f, yv[pass & 1], kWarps * 32);
  }
}

// Whether the ring covers p (else q_dp4a runs it): see the header.
bool ring_covers(const GemvProblem& p, int stage_scale_row) {
  auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  const bool x8_given = p.x8 && x8_smem_bytes(p) == 0;
  return p.batch == 1 && x8_given && stage_scale_row % 16 == 0 && aligned(p.w) && (!p.w_up || aligned(p.w_up)) &&
         (!p.y8 || p.n % 32 == 0);
}

template <int kBits, bool kMin, int kRows, int kUnroll, bool kGateUp>
struct RingLaunch {
  static Status run(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
    static_assert(kUnroll == kRingUnroll, "run_ring lists only unroll-2 shapes");
    using Stage = RingStage<kBits, kMin>;
    const Stage S(p.k);
    if (c.warps * kRows != 32) return Status::error("q_dp4a_ring: warps x rows must be 32 (config " + c.str() + ")");
    if (!ring_covers(p, int(S.srow))) return gemv_dp4a_launch(p, c, s);
    auto kernel = q_dp4a_ring<kBits, kMin, kRows, kGateUp>;
    const int stages = int(std::clamp<size_t>(ring_budget() / Stage::kBytes, 2, kRingMaxStages));
    const size_t smem = size_t(stages) * Stage::kBytes;
    static const bool attrs_ok =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) == cudaSuccess &&
        cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, int(cudaSharedmemCarveoutMaxShared)) ==
            cudaSuccess;
    if (!attrs_ok) return Status::error("q_dp4a_ring: a ring of " + std::to_string(smem) + " bytes does not fit in shared memory");
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const unsigned grid = unsigned(std::clamp<int64_t>((p.n + 31) / 32, 1, sms));  // one block per SM at most
    launch_pdl(kernel, grid, unsigned((c.warps + 1) * 32), smem, s, static_cast<const uint8_t*>(p.w),
               static_cast<const uint8_t*>(p.w_up), xsource_of(p), p.y, p.n, p.k, epilogue_of(p), stages);
    return launch_status("q_dp4a_ring");
  }
};

Status run_ring(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  return dp4a_dispatch<RingLaunch, Dp4aShape<2, 2>, Dp4aShape<4, 2>>("q_dp4a_ring", p, c, s);
}

}  // namespace

void register_dp4a_ring_variants(std::vector<GemvVariant>& out) {
  out.push_back({"q_dp4a_ring", "+ weights through a TMA ring in shared memory, filled before the PDL wait; two GEMVs per SM",
                 WeightLayout::Repacked, dp4a_types, run_ring, {GemvConfig{2, 16, 2}, GemvConfig{4, 8, 2}},
                 XRounding::Int8Blocks, /*writes_y8=*/true, /*fuses_norm=*/true, /*takes_x8_ss=*/true,
                 /*tuner_picks=*/false});
}

}  // namespace lamina::kernels

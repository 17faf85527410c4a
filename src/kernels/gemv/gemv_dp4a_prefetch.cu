// q_dp4a_prefetch: q_dp4a's 32-row blocks (gemv_dp4a.cu, kBlock32: y8 made in the block) with
// the block's first pass of weights copied into shared memory before the PDL wait.
//   - q_dp4a loads one step of weights (at most 16 bytes x rows x unroll per lane, 64 KiB per
//     SM) into registers before the wait; everything else is loaded after it. In the decode chain
//     the SMs that finish a GEMV early then hold one step of the next GEMV and idle until the
//     last SM is done: the HBM pipe drains at every kernel boundary (CUPTI trace: the 7B q4_0
//     Wo GEMV adds 6.1 µs to a token for 9.4 MB, 52 % of copy bandwidth).
//   - here warp 0 issues TMA bulk copies (cp.async.bulk, one per row and step) of pass 0 — the
//     block's first 32 rows, every step of the gate matrix and then of the up matrix while they
//     fit in the shared memory left after x (up to ~220 KiB) — as soon as the block is resident,
//     each step on an mbarrier of its own. Wo and W_down of a 7B model are one pass (128 blocks
//     x 32 rows): their whole weights are in flight before the kernel's input exists.
//   - later passes (and steps that did not fit) load from global memory as in q_dp4a; the
//     arithmetic, x sources and epilogues are q_dp4a's (bit-identical outputs).
//   - shapes whose scale rows are not 16-byte multiples (k % 256 for q4_0 / q8_0) run with
//     nothing prefetched.
// Measured (H100, 2026-11-23, llama2-7b presets): slower. Back to back (the tuner's in-graph
// timing) W_down q4_0 13.61 vs q_dp4a's 10.84 µs, Q/K/V 14.30 vs 12.94, Wo 5.49 vs 5.45; in the
// decode chain with every dp4a shape on this variant tg128 q4_0 421 vs 473 t/s, q8_0 273 vs 309.
// Not established why (the whole first pass is in flight before the wait, yet each SM computes
// only once its stage has landed). The tuner leaves it out (tuner_picks = false).
#include "kernels/common/tma.cuh"
#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_dp4a.cuh"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_x8.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

constexpr int kMaxStages = 16;

// Pass 0 in shared memory. Stages are (matrix, step) pairs in the order gate steps, up steps;
// dynamic shared memory holds, from its start:
//   x8   [x8_bytes]                      x made by the block (0 bytes when the caller gives x8)
//   sc   [mats][32 rows][srow]           scale rows of the matrices with any stage
//   q    stage s: [32 rows][row_bytes(s)]  quant bytes of chunks l0(s) .. l0(s) + row_bytes(s)/16
struct PrefetchPlan {
  int stages;         // 0 .. kMaxStages
  uint32_t x8_bytes;  // a multiple of 128
};

// The layout above for one launch (same arithmetic on host and device).
template <int kBits, bool kMin, int kUnroll>
struct PassLayout {
  static constexpr int64_t kStepLoads = 32 * kUnroll;  // 16-byte chunks per row and step
  int64_t loads, steps, qrow, srow;
  __host__ __device__ PassLayout(int64_t k)
      : loads(k * kBits / 128),
        steps((loads + kStepLoads - 1) / kStepLoads),
        qrow(k * kBits / 8),
        srow(k / 32 * (kMin ? 4 : 2)) {}
  __host__ __device__ int64_t l0(int s) const { return (s % steps) * kStepLoads; }
  __host__ __device__ uint32_t row_bytes(int s) const {
    const int64_t left = loads - l0(s);
    return uint32_t((left < kStepLoads ? left : kStepLoads) * 16);
  }
  __host__ __device__ int scale_mats(int stages) const { return stages == 0 ? 0 : stages > steps ? 2 : 1; }
  __host__ __device__ int64_t stage_offset(int stages, int s) const {  // from the start of sc
    return int64_t(scale_mats(stages)) * 32 * srow + (s / steps) * 32 * qrow + (s % steps) * 32 * kStepLoads * 16;
  }
};

// w, w_up: [n][k] repacked; x: see XSource; y: [batch][n].
template <int kBits, bool kMin, int kRows, int kUnroll, bool kGateUp>
__global__ void __launch_bounds__(32 / kRows * 32)
    q_dp4a_prefetch(const uint8_t* __restrict__ w, const uint8_t* __restrict__ w_up, XSource xin, float* __restrict__ y,
                    int64_t n, int64_t k, int batch, Epilogue ep, PrefetchPlan plan) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t bar[kMaxStages];
  __shared__ float yv[2][kGemvMaxBatch][32];  // y of a pass, two buffers (publish_y8_block)
  using Step = Dp4aStep<kBits, kMin, kRows, kUnroll>;
  const PassLayout<kBits, kMin, kUnroll> L(k);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t block0 = int64_t(blockIdx.x) * 32, stride = int64_t(gridDim.x) * 32;
  const int rows_valid = int(n - block0 < 32 ? n - block0 : 32);
  uint8_t* sc = smem + plan.x8_bytes;

  if (warp == 0 && plan.stages > 0) {  // weights never depend on an earlier kernel: before the wait
    if (lane == 0) {
      for (int s = 0; s < plan.stages; ++s) tma::mbar_init(&bar[s], 1);
      tma::mbar_fence_init();
      for (int s = 0; s < plan.stages; ++s)
        tma::mbar_arrive_expect_tx(&bar[s], uint32_t(rows_valid) * (L.row_bytes(s) + (s % L.steps ? 0 : uint32_t(L.srow))));
    }
    __syncwarp();
    const uint64_t policy = evict_first_policy();
    for (int s = 0; s < plan.stages; ++s) {
      const uint8_t* wm = kGateUp && s >= L.steps ? w_up : w;
      if (lane < rows_valid)
        tma::load_1d(sc + L.stage_offset(plan.stages, s) + lane * L.row_bytes(s),
                     wm + (block0 + lane) * L.qrow + L.l0(s) * 16, L.row_bytes(s), &bar[s], policy);
      if (lane == 0 && s % L.steps == 0)
        tma::load_1d(sc + (s / L.steps) * 32 * L.srow, wm + n * L.qrow + block0 * L.srow, uint32_t(rows_valid * L.srow),
                     &bar[s], policy);
    }
  }
  __syncthreads();  // the barriers are initialised before anyone waits on them
  pdl_wait();       // x comes from the kernel before (see kernels/common/pdl.cuh)
  RmsParts rms;
  if (xin.ss) rms.load(xin.ss, k);
  const uint8_t* xs = x8_source(xin, k, batch, smem);
  typename Step::Regs regs;
  const int rl = warp * kRows;  // the warp's first row in its block's 32
  int pass = 0;
  for (int64_t row0 = block0 + rl; row0 < n; row0 += stride, ++pass) {
    if (row0 + stride >= n) pdl_launch_dependents();  // this warp's last rows: the next kernel may launch
    float acc[kGateUp ? 2 : 1][kRows][kGemvMaxBatch] = {};
#pragma unroll
    for (int mat = 0; mat < (kGateUp ? 2 : 1); ++mat) {
      int s = mat * int(L.steps);
      for (int64_t l0 = 0; l0 < L.loads; l0 += L.kStepLoads, ++s) {
        if (pass == 0 && s < plan.stages) {
          tma::mbar_wait(&bar[s], 0);
          const uint8_t* q = sc + L.stage_offset(plan.stages, s);
          const uint8_t* sm = sc + mat * 32 * L.srow;
          const uint32_t rb = L.row_bytes(s);
          Step::template load_at<true>([&](int r, int64_t l) { return q + (rl + r) * rb + (l - l0) * 16; },
                                       [&](int r, int64_t blk) { return sm + (rl + r) * L.srow + blk * Step::kScaleBytes; },
                                       l0, k, regs);
        } else {
          Step::load(mat ? w_up : w, row0, n, l0, k, regs);
        }
        Step::dot(regs, xs, k, l0, batch, acc[mat]);
      }
    }
    store_rows(acc, row0, n, batch, ep, y, xin.ss ? rms.scale(k, xin.norm_eps) : 1.f, yv[pass & 1]);
  }
}

// The stages of pass 0 that fit in the shared memory left after x and the kernel's static
// shared memory (none when the scale rows are not 16-byte multiples or a matrix is misaligned).
template <int kBits, bool kMin, int kUnroll, class Kernel>
PrefetchPlan plan_for(Kernel kernel, const GemvProblem& p, size_t x8b, size_t& dyn_bytes) {
  const PassLayout<kBits, kMin, kUnroll> L(p.k);
  PrefetchPlan plan{0, uint32_t(x8b)};
  dyn_bytes = x8b;
  auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  if (L.srow % 16 || L.qrow % 16 || !aligned(p.w) || (p.w_up && !aligned(p.w_up))) return plan;
  int dev = 0, optin = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  cudaFuncAttributes fa{};
  cudaFuncGetAttributes(&fa, kernel);
  const int64_t budget = int64_t(optin) - int64_t(fa.sharedSizeBytes) - int64_t(x8b);
  const int mats = p.w_up ? 2 : 1;
  int64_t used = 0;
  for (int s = 0; s < std::min<int64_t>(kMaxStages, mats * L.steps); ++s) {
    const int64_t bytes = 32 * (int64_t(L.row_bytes(s)) + (s % L.steps ? 0 : L.srow));
    if (used + bytes > budget) break;
    used += bytes;
    plan.stages = s + 1;
  }
  if (plan.stages > 0) dyn_bytes = x8b + size_t(used);
  return plan;
}

template <int kBits, bool kMin, int kRows, int kUnroll, bool kGateUp>
struct PrefetchLaunch {
  static Status run(const GemvProblem& p, const GemvConfig& c, cudaStream_t s);
};

template <int kBits, bool kMin, int kRows, int kUnroll, bool kGateUp>
Status PrefetchLaunch<kBits, kMin, kRows, kUnroll, kGateUp>::run(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  auto kernel = q_dp4a_prefetch<kBits, kMin, kRows, kUnroll, kGateUp>;
  if (c.warps * kRows != 32) return Status::error("q_dp4a_prefetch: warps x rows must be 32 (config " + c.str() + ")");
  const size_t x8b = (x8_smem_bytes(p) + 127) / 128 * 128;
  size_t smem = 0;
  const PrefetchPlan plan = plan_for<kBits, kMin, kUnroll>(kernel, p, x8b, smem);
  unsigned grid = 0;
  if (Status st = persistent_grid(kernel, "q_dp4a_prefetch", p, c, kRows, smem, kDp4aBlocksPerSm, grid); !st.ok) return st;
  launch_pdl(kernel, grid, unsigned(c.warps * 32), smem, s, static_cast<const uint8_t*>(p.w),
             static_cast<const uint8_t*>(p.w_up), xsource_of(p), p.y, p.n, p.k, p.batch, epilogue_of(p), plan);
  return launch_status("q_dp4a_prefetch");
}

Status run_prefetch(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  return dp4a_dispatch<PrefetchLaunch, Dp4aShape<2, 4>, Dp4aShape<2, 2>, Dp4aShape<4, 2>>("q_dp4a_prefetch", p, c, s);
}

}  // namespace

void register_dp4a_prefetch_variants(std::vector<GemvVariant>& out) {
  out.push_back({"q_dp4a_prefetch", "+ the block's first pass of weights copied to shared memory (TMA) before the PDL wait",
                 WeightLayout::Repacked, dp4a_types, run_prefetch,
                 {GemvConfig{2, 16, 4}, GemvConfig{2, 16, 2}, GemvConfig{4, 8, 2}},
                 XRounding::Int8Blocks, /*writes_y8=*/true, /*fuses_norm=*/true, /*takes_x8_ss=*/true,
                 /*tuner_picks=*/false});
}

}  // namespace lamina::kernels

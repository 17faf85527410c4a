// q_dp4a_pipe: q_dp4a (gemv_dp4a.cu) with each warp's weight loads software-pipelined.
//   - q_dp4a loads a step of weights, waits for it, multiplies, and only then loads the next:
//     at k = 4096 a row group is one or two steps, so every warp alternates between a burst of
//     loads and a stretch (dp4a, warp reduction, epilogue, y8 fences) with none in flight.
//   - here the next step's loads (the next row group's, or the up matrix's, when this one ends)
//     go out before this step's dp4a, into a second register buffer: the warp always has one
//     step of weights in flight. Same bytes in flight per warp at half the unroll, twice the
//     weight registers.
//   - same arithmetic, epilogue and x sources as q_dp4a (bit-identical outputs).
// Why (CUPTI trace of the decode graph, H100, 2026-11-23): inside the chain the q4_0 gate/up GEMV
// ran at 60 % of copy bandwidth (28 µs for 50.7 MB), the down projection at 58 %, Q/K/V at 82 %.
// Measured: in the tuner's in-graph timing it wins none of the 7B decode shapes that make y8 and
// only q8_0 4096 x 4096 without (7.46 vs 7.52 µs); where the tuner took it for Wo (before the
// tuner timed y8) the decode chain lost (q4_0 tg128 426 vs 435 t/s): kept as a measured rung.
#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_dp4a.cuh"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_x8.cuh"

#include <cuda_runtime.h>

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

// Where a warp is in its work: row group row0 (kRows rows), matrix mat (gate, then up), step l0
// (in 16-byte loads) along k.
struct Cursor {
  int64_t row0;
  int mat;
  int64_t l0;
};

template <int kBits, bool kMin, int kRows, int kUnroll, bool kGateUp>
__global__ void __launch_bounds__(256) q_dp4a_pipe(const uint8_t* __restrict__ w, const uint8_t* __restrict__ w_up,
                                                   XSource xin, float* __restrict__ y, int64_t n, int64_t k, int batch,
                                                   Epilogue ep) {
  extern __shared__ __align__(16) uint8_t smem[];
  using Step = Dp4aStep<kBits, kMin, kRows, kUnroll>;
  constexpr int kMats = kGateUp ? 2 : 1;
  const int64_t stride = int64_t(gridDim.x) * (blockDim.x / 32) * kRows;  // between a warp's row groups
  const int64_t first = (int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * kRows;
  const int64_t steps = Step::loads(k);
  auto next = [&](Cursor c) {
    c.l0 += 32 * kUnroll;
    if (c.l0 < steps) return c;
    c.l0 = 0;
    if (++c.mat < kMats) return c;
    c.mat = 0;
    c.row0 += stride;
    return c;
  };
  auto load = [&](const Cursor& c, typename Step::Regs& g) { Step::load(kGateUp && c.mat ? w_up : w, c.row0, n, c.l0, k, g); };
  typename Step::Regs buf[2];
  Cursor cur{first, 0, 0};
  if (first < n) load(cur, buf[0]);  // weights never depend on an earlier kernel: before the wait
  pdl_wait();  // x comes from the kernel before (see kernels/common/pdl.cuh)
  // The next kernel may launch once every warp has its last weights on the way (as q_dp4a).
  if (first + stride >= n) pdl_launch_dependents();
  RmsParts rms;
  if (xin.ss) rms.load(xin.ss, k);
  const uint8_t* xs = x8_source(xin, k, batch, smem);
  float acc[kMats][kRows][kGemvMaxBatch] = {};
  while (cur.row0 < n) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // buf[half] holds cur's weights; buf[half ^ 1] gets the next step's
      if (cur.row0 >= n) break;
      const Cursor nx = next(cur);
      if (nx.row0 != cur.row0 && nx.row0 < n && nx.row0 + stride >= n) pdl_launch_dependents();
      if (nx.row0 < n) load(nx, buf[half ^ 1]);
      if (kGateUp && cur.mat) Step::dot(buf[half], xs, k, cur.l0, batch, acc[kMats - 1]);
      else Step::dot(buf[half], xs, k, cur.l0, batch, acc[0]);
      if (nx.row0 != cur.row0) {
        store_rows(acc, cur.row0, n, batch, ep, y, xin.ss ? rms.scale(k, xin.norm_eps) : 1.f);
#pragma unroll
        for (int m = 0; m < kMats; ++m)
#pragma unroll
          for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int b = 0; b < kGemvMaxBatch; ++b) acc[m][r][b] = 0.f;
      }
      cur = nx;
    }
  }
}

template <int kBits, bool kMin, int kRows, int kUnroll, bool kGateUp>
struct PipeLaunch {
  static Status run(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
    return launch_x8_persistent(q_dp4a_pipe<kBits, kMin, kRows, kUnroll, kGateUp>, "q_dp4a_pipe", p, c, kRows, s, kDp4aBlocksPerSm);
  }
};

Status run_pipe(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  return dp4a_dispatch<PipeLaunch, Dp4aShape<1, 4>, Dp4aShape<2, 2>, Dp4aShape<2, 1>, Dp4aShape<4, 1>>("q_dp4a_pipe", p, c, s);
}

}  // namespace

void register_dp4a_pipe_variants(std::vector<GemvVariant>& out) {
  out.push_back({"q_dp4a_pipe", "+ the next step's weight loads issued before this step's dp4a (two register buffers)",
                 WeightLayout::Repacked, dp4a_types, run_pipe,
                 {GemvConfig{2, 8, 2}, GemvConfig{1, 8, 4}, GemvConfig{2, 8, 1}, GemvConfig{4, 8, 1},
                  GemvConfig{2, 4, 2}, GemvConfig{1, 4, 4}},
                 XRounding::Int8Blocks, /*writes_y8=*/true, /*fuses_norm=*/true, /*takes_x8_ss=*/true});
}

}  // namespace lamina::kernels

// q_dp4a_experts_grouped: the experts' GEMVs of a step with many tokens, grouped by expert.
// Against q_dp4a_experts (gemv_experts.cu), whose grid's second dimension is the (token, pick)
// pair and which reads an expert's matrix once for each pair routed to it: here it is the expert.
// Qwen3-30B-A3B's 128 experts with 8 picks a token: 16 tokens make 128 pairs over about 81
// distinct experts, 64 tokens 512 pairs over about 127 — the pairs launch reads 1.6x and 4x the
// weights the grouped one reads (figures: docs/benchmarks.md, sixtieth session).
//   - block (x, e) scans the route's ids for the pairs that picked e, in ascending order (a
//     ballot a warp, the warps' counts in order): no sort, no kernel before it, no scratch; an
//     expert nobody picked costs its blocks one scan;
//   - the expert's x rows (up to `cap`, sized by the launch from the pairs an expert is expected
//     to get) are quantised into shared memory (q_dp4a's int8 blocks); then for each of the
//     block's row passes, kGroupB pairs at a time multiply the same weight rows (Dp4aStep::dot_mats
//     over kGroupB batch rows): the first group reads them from memory, the others from L1/L2;
//   - a persistent grid: the blocks that fit on the device (two an SM at least, the launch
//     bounds), shared among the experts expected to have pairs, each looping over its rows;
//   - each pair's sums, warp reduction and epilogue are q_dp4a_experts' (its batch row b of the
//     same steps), so a token's output does not depend on which launch ran it, nor on the
//     tokens beside it.
#include "kernels/common/launch_status.h"
#include "kernels/common/pdl.cuh"
#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_experts.cuh"
#include "kernels/gemv/gemv_experts_grouped.h"
#include "kernels/gemv/gemv_x8.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

namespace lamina::kernels {
namespace gemv_detail {
namespace {

constexpr int kGroupB = 4;  // pairs multiplied together: the batch rows dot_mats unrolls for

// Shared memory: [cap][x8_bytes(k)] int8 x rows | [groups] int32 the expert's pairs.
inline size_t grouped_smem(int64_t k, int groups, int cap) { return size_t(cap) * x8_bytes(k) + 4 * size_t(groups); }

template <int kBits, int kScales, bool kGateUp, int kRows, int kUnroll>
// (Two blocks an SM at least: its blocks are short — a scan, x rows, a pass — and at 118-165
// registers, one block an SM left the SM idle through each block's chain of latencies.)
__global__ void __launch_bounds__(kExpWarps * 32, 2) q_dp4a_experts_grouped(ExpertArgs a, int groups, int cap) {
  extern __shared__ __align__(16) uint8_t smem[];
  using Step = Dp4aStep<kBits, kScales, kRows, kUnroll>;
  constexpr int kMats = kGateUp ? 2 : 1;
  __shared__ int warp_hits[kExpWarps];
  const size_t xb = x8_bytes(a.k);
  int32_t* pairs = reinterpret_cast<int32_t*>(smem + size_t(cap) * xb);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int32_t e = int32_t(blockIdx.y);
  pdl_wait();  // the ids (the router's) and x come from the kernels before
  // The pairs that picked e, ascending.
  int count = 0;
  for (int base = 0; base < groups; base += blockDim.x) {
    const int g = base + int(threadIdx.x);
    const bool hit = g < groups && a.ids[g / a.picks * a.ids_stride + g % a.picks] == e;
    const unsigned m = __ballot_sync(0xFFFFFFFFu, hit);
    if (lane == 0) warp_hits[warp] = __popc(m);
    __syncthreads();
    int at = count;
    for (int w = 0; w < kExpWarps; ++w) {
      if (w == warp) at += __popc(m & ((1u << lane) - 1u));
      if (w < warp) at += warp_hits[w];
      count += warp_hits[w];
    }
    if (hit) pairs[at] = g;
    __syncthreads();  // warp_hits is rewritten; pairs is read below
  }
  if (count == 0) return;  // (an exit counts as the PDL trigger)
  const uint8_t* w[kMats];
  w[0] = a.w[e];
  if constexpr (kGateUp) w[1] = a.w_up[e];
  const Epilogue ep{nullptr, nullptr, kGateUp, a.gelu, nullptr, nullptr, nullptr, nullptr, GemvArgmax{}};
  const int64_t stride = int64_t(gridDim.x) * kExpWarps * kRows;
  const int64_t first = (int64_t(blockIdx.x) * kExpWarps + warp) * kRows;
  for (int c0 = 0; c0 < count; c0 += cap) {  // (more pairs than x rows fit: the weights again, from L2)
    const int nc = min(cap, count - c0);
    if (c0 > 0) __syncthreads();  // the x rows before are no longer read
    for (int b = 0; b < nc; ++b)
      quantize_x_to_smem(a.x + int64_t(pairs[c0 + b]) / a.x_share * a.x_stride, a.k, 1, smem + size_t(b) * xb);
    __syncthreads();
    const bool last = c0 + cap >= count;
    for (int64_t row0 = first; row0 < a.n; row0 += stride) {
      if (last && row0 + stride >= a.n) pdl_launch_dependents();  // this warp's last rows
      // kGroupB pairs at a time over the same rows: the first pass brings the rows' weights from
      // memory, the others find them in L1 / L2.
      for (int s0 = 0; s0 < nc; s0 += kGroupB) {
        const int nb = min(kGroupB, nc - s0);
        float acc[kMats][kRows][kGroupB] = {};
        for (int64_t l0 = 0; l0 < Step::loads(a.k); l0 += 32 * kUnroll) {
          typename Step::Regs regs[kMats];
#pragma unroll
          for (int m = 0; m < kMats; ++m) Step::load(w[m], row0, a.n, l0, a.k, regs[m]);
          Step::template dot_mats<kGroupB, kMats>(regs, smem + size_t(s0) * xb, a.k, l0, nb, acc);
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int b = 0; b < kGroupB; ++b) {
            if (b >= nb) break;
            const float g = warp_sum(acc[0][r][b]);
            const float up = kGateUp ? warp_sum(acc[kMats - 1][r][b]) : 0.f;
            const int64_t pair = pairs[c0 + s0 + b];
            if (lane == 0 && row0 + r < a.n) a.y[pair * a.n + row0 + r] = ep.apply(g, up, row0 + r, 0, a.n);
          }
      }
    }
  }
}

template <class Kernel>
Status launch_grouped(Kernel kernel, int rows, const GemvExperts& p, int n_expert, cudaStream_t s) {
  int dev = 0, smem_max = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  // Experts expected to have pairs (experts_expected); x rows for 1.5x an expert's expected share
  // (whole kGroupB), within a quarter of a block's shared memory limit (so that several blocks
  // share an SM), at least kGroupB.
  const double active = std::max(1.0, experts_expected(p.groups, n_expert));
  const int share = int(std::ceil(1.5 * p.groups / active));
  const size_t xb = x8_bytes(p.k), budget = size_t(smem_max) / 4;
  const int fits = budget > 4 * size_t(p.groups) ? int((budget - 4 * size_t(p.groups)) / xb) : 0;
  const int cap = std::max(kGroupB, std::min((share + kGroupB - 1) / kGroupB * kGroupB, fits / kGroupB * kGroupB));
  const size_t smem = grouped_smem(p.k, p.groups, cap);
  if (smem + sizeof(int) * kExpWarps > size_t(smem_max)) return Status::error("q_dp4a_experts_grouped: x rows and pairs do not fit in shared memory");
  if (smem > 48 * 1024 && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)
    return Status::error("q_dp4a_experts_grouped: cannot raise the shared memory limit");
  // Blocks that fit on the device (two an SM at least: the launch bounds), shared among the
  // experts expected to have pairs, each looping over its passes; no more than an expert's rows
  // need. (One block an SM, at 158-165 registers, had left the SMs idle through each pass's load
  // latency; a block a pass had spent the step in short blocks' prologues: docs/benchmarks.md,
  // sixtieth session.)
  int sms = 0, per_sm = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kExpWarps * 32, smem);
  const int64_t needed = (p.n + kExpWarps * rows - 1) / (kExpWarps * rows);
  const int64_t fit = std::max<int64_t>(1, int64_t(double(sms) * std::max(per_sm, 1) / active));  // one wave of the busy experts' blocks
  const dim3 grid(unsigned(std::min(needed, fit)), unsigned(n_expert));
  launch_pdl(kernel, grid, dim3(kExpWarps * 32), smem, s, expert_args(p), p.groups, cap);
  return launch_status("q_dp4a_experts_grouped");
}

}  // namespace
}  // namespace gemv_detail

Status gemv_experts_grouped(const GemvExperts& p, int n_expert, cudaStream_t s) {
  using namespace gemv_detail;
  if (Status v = validate_experts(p, "q_dp4a_experts_grouped"); !v) return v;
  if (p.groups > kGemvExpertsGroupedMaxPairs || n_expert < 1 || n_expert > 65535)
    return Status::error("q_dp4a_experts_grouped: more than 4096 pairs, or no experts");
  return by_dp4a_type(p.wtype, [&]<int kBits, int kScales>() {
    if (p.w_up)
      return launch_grouped(q_dp4a_experts_grouped<kBits, kScales, true, kExpRows, kExpUnroll>, kExpRows, p, n_expert, s);
    if (experts_short_rows(kBits, p.k))
      return launch_grouped(q_dp4a_experts_grouped<kBits, kScales, false, kExpShortRows, kExpShortUnroll>, kExpShortRows, p,
                            n_expert, s);
    return launch_grouped(q_dp4a_experts_grouped<kBits, kScales, false, kExpRows, kExpUnroll>, kExpRows, p, n_expert, s);
  });
}

}  // namespace lamina::kernels

// q_dp4a_experts: a mixture of experts' decode matmuls, one launch for all of a few tokens' experts.
// Against q_dp4a (gemv_dp4a_kernel.cuh), one launch a matrix: the grid's second dimension is the
// (token, pick) pairs; block row g reads its pair's expert id, which the router left in device
// memory, and multiplies that expert's matrices (a table of pointers, one a expert). A Qwen3-30B-A3B-shape step had run
// 8 experts x 2 GEMV launches a layer with the ids on the host (a round trip per layer, no graph);
// now it runs 2 launches a layer and records as a graph (figures: docs/benchmarks.md, fifty-ninth
// session).
//   - the same weight step as q_dp4a (Dp4aStep: repacked layouts, int8 x blocks, dp4a), 8 warps x
//     2 rows, two 16-byte steps in flight a lane (4 rows, one step, for short rows: gemv_experts.cuh),
//     no overlap across passes (an expert's matrix is short: 768 x 2048 for Qwen3-30B-A3B's gate);
//   - the weights are read after the PDL wait (which expert is only known then);
//   - each block quantises its group's x into shared memory (x differs by pick for W_down).
#include "kernels/common/launch_status.h"
#include "kernels/common/pdl.cuh"
#include "kernels/gemv/gemv_experts.cuh"

#include <cuda_runtime.h>

#include <algorithm>

namespace lamina::kernels {
namespace gemv_detail {
namespace {

template <int kBits, int kScales, bool kGateUp, int kRows, int kUnroll>
__global__ void __launch_bounds__(kExpWarps * 32) q_dp4a_experts(ExpertArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  using Step = Dp4aStep<kBits, kScales, kRows, kUnroll>;
  constexpr int kMats = kGateUp ? 2 : 1;
  pdl_wait();  // the ids (the router's) and x come from the kernels before
  const int64_t g = blockIdx.y;
  const int32_t e = a.ids[g / a.picks * a.ids_stride + g % a.picks];
  const uint8_t* w[kMats];
  w[0] = a.w[e];
  if constexpr (kGateUp) w[1] = a.w_up[e];
  const XSource xin{a.x + g / a.x_share * a.x_stride, nullptr, nullptr, 0.f, nullptr, nullptr, nullptr};
  const uint8_t* xs = x8_source(xin, a.k, 1, smem);
  const Epilogue ep{nullptr, nullptr, kGateUp, a.gelu, nullptr, nullptr, nullptr, nullptr, GemvArgmax{}};
  float* y = a.y + g * a.n;
  const int64_t stride = int64_t(gridDim.x) * kExpWarps * kRows;
  for (int64_t row0 = (int64_t(blockIdx.x) * kExpWarps + threadIdx.x / 32) * kRows; row0 < a.n; row0 += stride) {
    if (row0 + stride >= a.n) pdl_launch_dependents();  // this warp's last rows
    float acc[kMats][kRows][1] = {};
    for (int64_t l0 = 0; l0 < Step::loads(a.k); l0 += 32 * kUnroll) {
      typename Step::Regs regs[kMats];
#pragma unroll
      for (int m = 0; m < kMats; ++m) Step::load(w[m], row0, a.n, l0, a.k, regs[m]);
      Step::template dot_mats<1, kMats>(regs, xs, a.k, l0, 1, acc);
    }
    store_rows<kMats, kRows, 1>(acc, row0, a.n, 1, ep, y);
  }
}

template <class Kernel>
Status launch_experts(Kernel kernel, int rows, const GemvExperts& p, cudaStream_t s) {
  const size_t smem = x8_bytes(p.k);
  if (smem > 48 * 1024 && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)
    return Status::error("q_dp4a_experts: x does not fit in shared memory");
  int dev = 0, sms = 0, per_sm = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kExpWarps * 32, smem);
  // As many blocks as fit on the device, shared among the groups, but no more than a group's rows need.
  const int64_t needed = (p.n + kExpWarps * rows - 1) / (kExpWarps * rows);
  const int64_t fit = std::max<int64_t>(1, int64_t(sms) * std::max(per_sm, 1) / p.groups);
  const dim3 grid(unsigned(std::min(needed, fit)), unsigned(p.groups));
  launch_pdl(kernel, grid, dim3(kExpWarps * 32), smem, s, expert_args(p));
  return launch_status("q_dp4a_experts");
}

}  // namespace
}  // namespace gemv_detail

// (q_dp4a's k: whole blocks of its type, 32 or 256 elements; x's int8 blocks are 32.)
bool gemv_experts_supports(GgmlType t, int64_t k) {
  return gemv_detail::dp4a_types(t) && k > 0 && k % traits(t).block_elems == 0;
}

Status gemv_experts(const GemvExperts& p, cudaStream_t s) {
  using namespace gemv_detail;
  if (Status v = validate_experts(p, "q_dp4a_experts"); !v) return v;
  return by_dp4a_type(p.wtype, [&]<int kBits, int kScales>() {
    if (p.w_up) return launch_experts(q_dp4a_experts<kBits, kScales, true, kExpRows, kExpUnroll>, kExpRows, p, s);
    if (experts_short_rows(kBits, p.k) && p.groups >= kExpShortMinPairs)
      return launch_experts(q_dp4a_experts<kBits, kScales, false, kExpShortRows, kExpShortUnroll>, kExpShortRows, p, s);
    return launch_experts(q_dp4a_experts<kBits, kScales, false, kExpRows, kExpUnroll>, kExpRows, p, s);
  });
}

}  // namespace lamina::kernels

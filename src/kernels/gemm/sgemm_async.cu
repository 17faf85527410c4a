// SGEMM rung s6_cp_async: s5's warp-arranged 128 x 128 block with a multi-stage cp.async
// pipeline instead of register prefetch. Global -> shared copies bypass the registers; the
// k-contiguous operand is transposed on the way with 4-byte copies, the other one moves in
// 16-byte copies; out-of-range elements are zero-filled by the copy itself (src size 0).
// Config: bk (8 or 16) and stages (2..4). Figures: docs/benchmarks.md (lamina kbench gemm).
#include "kernels/common/mma.cuh"
#include "kernels/gemm/sgemm_common.cuh"

namespace lamina::kernels {
namespace {

using namespace gemm_detail;

template <int kBk>
using KTile = float[kBk][kTile + kPad];  // k-major shared tile of one operand

// Issues the copies of tile (o0, k0) of X into s (each thread kBk/8 chunks of 4 elements).
template <int kBk>
__device__ __forceinline__ void issue_tile(const FOperand& x, int64_t o0, int64_t k0, KTile<kBk>& s, int t) {
#pragma unroll
  for (int r = 0; r < kBk / 8; ++r) {
    const int f = t + r * kThreads;
    if (x.k_contig) {
      const int o = f / (kBk / 4), kq = (f % (kBk / 4)) * 4;
      const bool row_in = o0 + o < x.outer;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const bool in = row_in && k0 + kq + i < x.k;
        mma::cp_async4(&s[kq + i][o], in ? x.p + (o0 + o) * x.ld + k0 + kq + i : x.p, in ? 4 : 0);
      }
    } else {
      const int kk = f / (kTile / 4), oq = (f % (kTile / 4)) * 4;
      const bool k_in = k0 + kk < x.k;
      if (x.vec_ok && k_in && o0 + oq + 3 < x.outer) {
        mma::cp_async16(&s[kk][oq], x.p + (k0 + kk) * x.ld + o0 + oq, 16);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const bool in = k_in && o0 + oq + i < x.outer;
          mma::cp_async4(&s[kk][oq + i], in ? x.p + (k0 + kk) * x.ld + o0 + oq + i : x.p, in ? 4 : 0);
        }
      }
    }
  }
}

template <int kBk, int kStages>
__global__ void __launch_bounds__(kThreads, 2) s6_cp_async(FOperand a, FOperand b, FOut c) {
  extern __shared__ __align__(16) float smem[];
  auto* as = reinterpret_cast<KTile<kBk>*>(smem);
  auto* bs = as + kStages;
  const int t = threadIdx.x, ty = warp_arranged_ty(t), tx = warp_arranged_tx(t);
  const int row0 = ty * 4, col0 = tx * 4;
  const int64_t m0 = int64_t(blockIdx.y) * kTile, n0 = int64_t(blockIdx.x) * kTile;
  const int64_t tiles = (a.k + kBk - 1) / kBk;
  float acc[8][8] = {};
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < tiles) issue_tile<kBk>(a, m0, st * kBk, as[st], t), issue_tile<kBk>(b, n0, st * kBk, bs[st], t);
    mma::cp_async_commit();
  }
  for (int64_t kt = 0; kt < tiles; ++kt) {
    mma::cp_async_wait<kStages - 2>();
    __syncthreads();
    const int64_t next = kt + kStages - 1;
    if (next < tiles) {
      const int st = int(next % kStages);
      issue_tile<kBk>(a, m0, next * kBk, as[st], t);
      issue_tile<kBk>(b, n0, next * kBk, bs[st], t);
    }
    mma::cp_async_commit();
    const int st = int(kt % kStages);
#pragma unroll
    for (int p = 0; p < kBk; ++p) outer_product_8x8<true>(as[st][p], bs[st][p], row0, col0, acc);
  }
  store_8x8<true>(c, m0 + row0, n0 + col0, acc);
}

template <int kBk, int kStages>
Status launch(const GemmProblem& p, cudaStream_t s) {
  auto kernel = s6_cp_async<kBk, kStages>;
  const size_t smem = size_t(2 * kStages) * sizeof(KTile<kBk>);
  if (smem > 48 * 1024 && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)
    return Status::error("s6_cp_async: shared memory of " + std::to_string(smem) + " bytes not available");
  const dim3 grid(unsigned((p.n + kTile - 1) / kTile), unsigned((p.m + kTile - 1) / kTile));
  kernel<<<grid, kThreads, smem, s>>>(operand_a(p), operand_b(p), out_c(p));
  return launch_status("s6_cp_async");
}

Status run_s6(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  if (c.bk == 8 && c.stages == 2) return launch<8, 2>(p, s);
  if (c.bk == 8 && c.stages == 3) return launch<8, 3>(p, s);
  if (c.bk == 16 && c.stages == 3) return launch<16, 3>(p, s);
  if (c.bk == 16 && c.stages == 4) return launch<16, 4>(p, s);
  return Status::error("s6_cp_async: no instance for config " + c.str());
}

}  // namespace

void register_sgemm_async_variants(std::vector<GemmVariant>& out) {
  out.push_back({"s6_cp_async", "+ multi-stage cp.async pipeline (zero-filled edges)", f32_only, run_s6,
                 {GemmConfig{128, 128, 8, 3}, GemmConfig{128, 128, 8, 2}, GemmConfig{128, 128, 16, 3},
                  GemmConfig{128, 128, 16, 4}},
                 false});
}

}  // namespace lamina::kernels

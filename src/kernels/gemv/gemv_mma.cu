// v6_mma: f16 / bf16 GEMV on tensor cores (mma.sync m16n8k16, f32 accumulate) — batch is the
// MMA's n = 8 dimension, so batch 2..8 costs (almost) the same as batch 1.
//
// Warp tile: 16 rows x 32 k per step (two MMAs). Lane (g = lane/4, q = lane%4) loads 16
// contiguous bytes of row g and of row g+8 at k = kk + 8q; a dot product does not care about
// the order of k, so the A fragment uses those halves in a permuted k order and x is read in
// the same order:
//   MMA m in {0,1}: A regs {W[g][p..p+1], W[g+8][p..p+1], W[g][p+2..p+3], W[g+8][p+2..p+3]}
//                   B regs {x[g][p..p+1], x[g][p+2..p+3]}   with p = kk + 8q + 4m
// (the m16n8k16 fragments: a0/a1 rows g/g+8 at k 2q..2q+1, a2/a3 at k 2q+8..2q+9; b0 at k
// 2q..2q+1, b1 at 2q+8..2q+9, column g). The `warps` warps of a block split K for the same 16
// rows and reduce through shared memory; `unroll` steps of loads in flight per lane.
// x is rounded to the weights' 16-bit type (as cuBLAS's f16 GEMM takes it); the GPU test checks
// against an fp64 reference of the same rounded x.
#include "kernels/common/mma.cuh"
#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_internal.h"

#include <cuda_runtime.h>

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

using mma::mma16816;
using mma::pack2;

template <class T, int kUnroll, bool kGateUp>
__global__ void __launch_bounds__(256) v6_mma(const T* __restrict__ w, const T* __restrict__ w_up,
                                              const float* __restrict__ x, float* __restrict__ y, int64_t n, int64_t k,
                                              int batch, Epilogue ep) {
  __shared__ float partial[8][kGateUp ? 2 : 1][16][8];  // [warp][mat][row][batch]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int g = lane / 4, q = lane % 4;
  const int64_t row0 = int64_t(blockIdx.x) * 16;
  pdl_wait();  // x comes from the kernel before (see kernels/common/pdl.cuh)
  const int64_t ra = min(row0 + g, n - 1), rb = min(row0 + g + 8, n - 1);  // clamp: loads stay in bounds
  const bool has_x = g < batch;
  const float* xg = x + int64_t(has_x ? g : 0) * k;
  float c[2][4] = {};
  const int64_t chunks = k / 32;
  for (int mat = 0; mat < (kGateUp ? 2 : 1); ++mat) {
    const T* wm = mat ? w_up : w;
    for (int64_t c0 = warp; c0 < chunks; c0 += int64_t(warps) * kUnroll) {
      uint4 lo[kUnroll], hi[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t ch = c0 + int64_t(u) * warps;
        const int64_t kk = ch * 32 + 8 * q;
        lo[u] = ch < chunks ? load_stream(wm + ra * k + kk) : make_uint4(0, 0, 0, 0);
        hi[u] = ch < chunks ? load_stream(wm + rb * k + kk) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t ch = c0 + int64_t(u) * warps;
        if (ch >= chunks) break;
        const int64_t kk = ch * 32 + 8 * q;
        float4 x0 = make_float4(0, 0, 0, 0), x1 = x0;
        if (has_x) {
          x0 = *reinterpret_cast<const float4*>(xg + kk);
          x1 = *reinterpret_cast<const float4*>(xg + kk + 4);
        }
        mma16816<T>(c[mat], lo[u].x, hi[u].x, lo[u].y, hi[u].y, pack2<T>(x0.x, x0.y), pack2<T>(x0.z, x0.w));
        mma16816<T>(c[mat], lo[u].z, hi[u].z, lo[u].w, hi[u].w, pack2<T>(x1.x, x1.y), pack2<T>(x1.z, x1.w));
      }
    }
  }
  pdl_launch_dependents();  // all weights are in: the next kernel may launch
  // C fragment: c0,c1 = rows g, columns (batch) 2q, 2q+1; c2,c3 = row g+8.
#pragma unroll
  for (int mat = 0; mat < (kGateUp ? 2 : 1); ++mat) {
    partial[warp][mat][g][2 * q] = c[mat][0];
    partial[warp][mat][g][2 * q + 1] = c[mat][1];
    partial[warp][mat][g + 8][2 * q] = c[mat][2];
    partial[warp][mat][g + 8][2 * q + 1] = c[mat][3];
  }
  __syncthreads();
  // 16 rows x 8 batch columns: thread t < 128 sums over the warps.
  const int t = threadIdx.x;
  if (t < 128) {
    const int r = t / 8, b = t % 8;
    if (b < batch && row0 + r < n) {
      float s[2] = {0.f, 0.f};
      for (int wi = 0; wi < warps; ++wi)
#pragma unroll
        for (int mat = 0; mat < (kGateUp ? 2 : 1); ++mat) s[mat] += partial[wi][mat][r][b];
      y[int64_t(b) * n + row0 + r] = ep.apply(s[0], kGateUp ? s[1] : 0.f, row0 + r, b, n);
    }
  }
}

template <class T, int kUnroll>
Status launch_t(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  const Epilogue ep = epilogue_of(p);
  const unsigned grid = unsigned((p.n + 15) / 16);
  const auto* w = static_cast<const T*>(p.w);
  const auto* wu = static_cast<const T*>(p.w_up);
  if (p.w_up) launch_pdl(v6_mma<T, kUnroll, true>, grid, unsigned(c.warps * 32), 0, s, w, wu, p.x, p.y, p.n, p.k, p.batch, ep);
  else launch_pdl(v6_mma<T, kUnroll, false>, grid, unsigned(c.warps * 32), 0, s, w, wu, p.x, p.y, p.n, p.k, p.batch, ep);
  return launch_status("v6_mma");
}

template <class T>
Status launch_unroll(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (c.unroll == 2) return launch_t<T, 2>(p, c, s);
  if (c.unroll == 4) return launch_t<T, 4>(p, c, s);
  return Status::error("v6_mma: no instance for config " + c.str());
}

Status run_mma(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (p.k % 32) return Status::error("v6_mma: k must be a multiple of 32");
  if (c.warps < 1 || c.warps > 8) return Status::error("v6_mma: 1..8 warps");
  if (p.wtype == GgmlType::F16) return launch_unroll<__half>(p, c, s);
  if (p.wtype == GgmlType::BF16) return launch_unroll<__nv_bfloat16>(p, c, s);
  return Status::error("v6_mma: f16 and bf16 only");
}

bool half_types(GgmlType t) { return t == GgmlType::F16 || t == GgmlType::BF16; }

}  // namespace

void register_mma_variants(std::vector<GemvVariant>& out) {
  out.push_back({"v6_mma", "tensor cores: batch as the MMA's n, permuted-k fragments from 16-byte loads, split-K warps",
                 WeightLayout::Gguf, half_types, run_mma,
                 {GemvConfig{16, 8, 2}, GemvConfig{16, 8, 4}, GemvConfig{16, 4, 4}, GemvConfig{16, 4, 2}},
                 XRounding::WeightType});
}

}  // namespace lamina::kernels

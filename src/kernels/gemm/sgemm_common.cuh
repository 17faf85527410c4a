// Device helpers shared by the SGEMM rungs: guarded operand reads, the 128x128 block's thread
// arrangements (described as layouts), and the alpha/beta epilogue.
#pragma once

#include "core/layout.h"
#include "kernels/gemm/gemm_internal.h"

namespace lamina::kernels::gemm_detail {

// X[o][kk] or 0 outside the matrix.
__device__ __forceinline__ float load_elem(const FOperand& x, int64_t o, int64_t kk) {
  if (o >= x.outer || kk >= x.k) return 0.f;
  return x.k_contig ? x.p[o * x.ld + kk] : x.p[kk * x.ld + o];
}

// Four consecutive elements along X's contiguous index starting at (o, kk): 16-byte load when
// allowed and fully inside, else element by element (zeros outside).
__device__ __forceinline__ float4 load4(const FOperand& x, int64_t o, int64_t kk) {
  if (x.k_contig) {
    if (x.vec_ok && o < x.outer && kk + 3 < x.k) return *reinterpret_cast<const float4*>(x.p + o * x.ld + kk);
    return make_float4(load_elem(x, o, kk), load_elem(x, o, kk + 1), load_elem(x, o, kk + 2), load_elem(x, o, kk + 3));
  }
  if (x.vec_ok && kk < x.k && o + 3 < x.outer) return *reinterpret_cast<const float4*>(x.p + kk * x.ld + o);
  return make_float4(load_elem(x, o, kk), load_elem(x, o + 1, kk), load_elem(x, o + 2, kk), load_elem(x, o + 3, kk));
}

// C[i][j] = alpha * v + beta * C[i][j]; C is not read when beta == 0 (it may hold garbage).
__device__ __forceinline__ void store_elem(const FOut& c, int64_t i, int64_t j, float v) {
  if (i >= c.m || j >= c.n) return;
  float* p = c.c + i * c.ldc + j;
  *p = c.beta == 0.f ? c.alpha * v : c.alpha * v + c.beta * *p;
}
__device__ __forceinline__ void store4(const FOut& c, int64_t i, int64_t j, float4 v) {
  if (c.vec_ok && i < c.m && j + 3 < c.n) {
    float4* p = reinterpret_cast<float4*>(c.c + i * c.ldc + j);
    float4 r = make_float4(c.alpha * v.x, c.alpha * v.y, c.alpha * v.z, c.alpha * v.w);
    if (c.beta != 0.f) {
      const float4 o = *p;
      r.x += c.beta * o.x, r.y += c.beta * o.y, r.z += c.beta * o.z, r.w += c.beta * o.w;
    }
    *p = r;
    return;
  }
  store_elem(c, i, j, v.x);
  store_elem(c, i, j + 1, v.y);
  store_elem(c, i, j + 2, v.z);
  store_elem(c, i, j + 3, v.w);
}

// The 128 x 128 block tiles with 256 threads and 8 x 8 outputs per thread.
inline constexpr int kTile = 128, kThreads = 256, kPad = 4;  // pad keeps rows 16-byte aligned
// Output rows (or columns) of one thread, by rung:
//   blocked (s2-s4):  thread coordinate t owns 8 consecutive rows:  8:1 from 8 t
//   strided (s5-s6):  two 4-row runs 64 apart:                      (4,2):(1,64) from 4 t
LAMINA_LHD layout::Layout blocked8() { return layout::make_layout({8}, {1}); }
LAMINA_LHD layout::Layout strided4x2() { return layout::make_layout({4, 2}, {1, 64}); }
// s5-s6 thread grid: 8 warps as 4 (rows) x 2 (cols), each warp 4 x 8 lanes; the thread's
// (row, col) coordinate in the 16 x 16 grid is warp + lane coordinates:
//   ty = 4 * (warp / 2) + lane / 8,   tx = 8 * (warp % 2) + lane % 8.
// A warp then reads 4 distinct A rows and 8 consecutive float4 of B per k: no bank conflicts.
__device__ __forceinline__ int warp_arranged_ty(int tid) { return 4 * ((tid / 32) / 2) + (tid % 32) / 8; }
__device__ __forceinline__ int warp_arranged_tx(int tid) { return 8 * ((tid / 32) % 2) + (tid % 32) % 8; }

// One k of the 8 x 8 outer product: a_k / b_k are row k of the k-major shared tiles; the thread's
// rows and columns start at row0 / col0 and follow the blocked or strided layout (two float4 each).
template <bool kStrided>
__device__ __forceinline__ void outer_product_8x8(const float* a_k, const float* b_k, int row0, int col0,
                                                  float (&acc)[8][8]) {
  constexpr layout::Layout own = kStrided ? strided4x2() : blocked8();
  float av[8], bv[8];
#pragma unroll
  for (int h = 0; h < 8; h += 4) {
    *reinterpret_cast<float4*>(&av[h]) = *reinterpret_cast<const float4*>(a_k + row0 + own(h));
    *reinterpret_cast<float4*>(&bv[h]) = *reinterpret_cast<const float4*>(b_k + col0 + own(h));
  }
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] += av[i] * bv[j];
}

// The thread's 8 x 8 outputs into C (rows from r0, columns from c0, same layout as above).
template <bool kStrided>
__device__ __forceinline__ void store_8x8(const FOut& c, int64_t r0, int64_t c0, const float (&acc)[8][8]) {
  constexpr layout::Layout own = kStrided ? strided4x2() : blocked8();
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; j += 4)
      store4(c, r0 + own(i), c0 + own(j), make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
}

}  // namespace lamina::kernels::gemm_detail

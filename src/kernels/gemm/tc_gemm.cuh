// The tensor-core GEMM mainloop (mma.sync m16n8k16, sm_80+), shared by the f16/bf16 HGEMM and
// the quantised-weight GEMM: C[m][n] = alpha * A[m][k] * W[n][k]^T + beta * C.
//
//   block tile BM x BN x 32, 8 warps as 2 (m) x 4 (n), warp tile (BM/2) x (BN/4)
//   A: [BM][32] f16/bf16 per stage, 64-byte rows, copied with 16-byte cp.async (zero-filled
//      outside the matrix) into a Swizzle<2,3,3> layout: chunk c of row r lands in chunk
//      c ^ ((r/2) % 4), so ldmatrix's 8 rows hit 8 different 16-byte bank groups
//   B: a policy (BPolicy) fills a [BN][32] tile of the same type and layout: plain f16/bf16
//      weights are copied like A; quantised weights are copied raw into a staging buffer and
//      dequantised into the tile once per k-step (no dequantised copy of W in memory)
//   STAGES-deep cp.async pipeline; blocks visit tiles in groups of 8 block-rows for L2 reuse
//   epilogue: alpha, beta (C not read when beta = 0), C in f32 / f16 / bf16, edges masked
#pragma once

#include <type_traits>

#include "core/layout.h"
#include "kernels/common/mma.cuh"
#include "kernels/gemm/gemm_internal.h"

namespace lamina::kernels::tc_gemm {

inline constexpr int kBk = 32, kThreads = 256;
// Offsets (in elements) of a [rows][32] 16-bit tile: row-major, then the swizzle.
using TileSwizzle = layout::Swizzle<2, 3, 3>;
__device__ __forceinline__ int tile_off(int row, int col) { return int(TileSwizzle{}(row * kBk + col)); }

// Where C goes: c[i*ldc + j], or for columns from col1 (col2) on, c1 (c2) with row stride ldc1
// (ldc2) from their column 0 (GemmProblem::parts; col1 = col2 = max: one C).
struct Out {
  void* c;
  int64_t ldc, m, n;
  int type;  // 0 f32, 1 f16, 2 bf16
  float alpha, beta;
  int64_t col1 = INT64_MAX, col2 = INT64_MAX;
  void* c1 = nullptr;
  void* c2 = nullptr;
  int64_t ldc1 = 0, ldc2 = 0;
  bool pairs = false;  // pair_stores(*this): two adjacent columns may be stored at once
};

// Whether every store of C (and, with beta, every load of it) may take a pair of adjacent columns
// (an even column and the next) as one: each part's row stride even and its pointer aligned to
// the pair. (Parts start at multiples of 8 columns, so a pair never straddles two.)
inline bool pair_stores(const Out& o) {
  const uintptr_t pair = o.type == 0 ? 8 : 4;
  auto ok = [&](const void* c, int64_t ld) { return !c || (ld % 2 == 0 && reinterpret_cast<uintptr_t>(c) % pair == 0); };
  return ok(o.c, o.ldc) && ok(o.c1, o.ldc1) && ok(o.c2, o.ldc2);
}

__device__ __forceinline__ float out_load(const Out& o, void* c, int64_t idx) {
  if (o.type == 0) return static_cast<const float*>(c)[idx];
  if (o.type == 1) return __half2float(static_cast<const __half*>(c)[idx]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(c)[idx]);
}
// Column j of C as the stores see it: its part's pointer and row stride and the column within
// the part (in: j < n). Resolved once for the stores of a column (or of a pair of columns 2q,
// 2q + 1, which lie in the same part: parts start at multiples of 8), not at every store.
struct OutColumn {
  void* c;
  int64_t ld, j;
  bool in;
};
__device__ __forceinline__ OutColumn out_column(const Out& o, int64_t j) {
  OutColumn col{o.c, o.ldc, j, j < o.n};
  if (j >= o.col1) {
    const bool second = j >= o.col2;
    col.c = second ? o.c2 : o.c1, col.ld = second ? o.ldc2 : o.ldc1, col.j = j - (second ? o.col2 : o.col1);
  }
  return col;
}
// The column d to the right of col (j + d), in col's part.
__device__ __forceinline__ OutColumn next_column(const Out& o, OutColumn col, int64_t j, int d) {
  col.j += d, col.in = j + d < o.n;
  return col;
}
__device__ __forceinline__ void out_store(const Out& o, const OutColumn& col, int64_t i, float v) {
  if (i >= o.m || !col.in) return;
  const int64_t idx = i * col.ld + col.j;
  v = o.beta == 0.f ? o.alpha * v : o.alpha * v + o.beta * out_load(o, col.c, idx);
  if (o.type == 0) static_cast<float*>(col.c)[idx] = v;
  else if (o.type == 1) static_cast<__half*>(col.c)[idx] = __float2half_rn(v);
  else static_cast<__nv_bfloat16*>(col.c)[idx] = __float2bfloat16_rn(v);
}

__device__ __forceinline__ void store_pair(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }
__device__ __forceinline__ void store_pair(__half* p, float a, float b) { *reinterpret_cast<__half2*>(p) = __floats2half2_rn(a, b); }
__device__ __forceinline__ void store_pair(__nv_bfloat16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ float2 load_pair(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float2 load_pair(const __half* p) { return __half22float2(*reinterpret_cast<const __half2*>(p)); }
__device__ __forceinline__ float2 load_pair(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
// alpha a + beta c, as out_store computes it (c read only with kBeta).
template <bool kBeta>
__device__ __forceinline__ float blend(const Out& o, float a, float c) {
  return kBeta ? o.alpha * a + o.beta * c : o.alpha * a;
}
// One warp's m64nN wgmma accumulators (register 4 q + r: row `row` + 8 (r / 2), column n0 + 8 q +
// 2 (lane % 4) + r % 2) as pairs of columns, without bounds checks: for Out::pairs outputs whose
// rows row .. row + 8 and columns n0 .. n0 + N - 1 the caller has checked. One branch on the type
// and beta for the whole tile: the per-element stores (out_store) test bounds, beta and the type
// at each element, and their unrolled code (several times this) stalled the warps on instruction
// fetch. With beta (a residual added by the GEMM), C's pairs are read the same way.
// (With beta, C is read kReadAhead steps at a time before any of them is written: the loads
// cannot pass the stores before them, which may alias, so one at a time each waited a round trip.)
inline constexpr int kReadAhead = 4;
template <int kN, class E, bool kBeta>
__device__ __forceinline__ void store_pairs_as(const Out& o, int64_t n0, int64_t row, int lane, const float* acc) {
  static_assert(kN / 8 % kReadAhead == 0);
#pragma unroll
  for (int q0 = 0; q0 < kN / 8; q0 += kReadAhead) {
    float2 c[kReadAhead][2] = {};
    if constexpr (kBeta) {
#pragma unroll
      for (int g = 0; g < kReadAhead; ++g) {
        const OutColumn oc = out_column(o, n0 + 8 * (q0 + g) + 2 * (lane % 4));
        const E* p = static_cast<const E*>(oc.c) + row * oc.ld + oc.j;
        c[g][0] = load_pair(p), c[g][1] = load_pair(p + 8 * oc.ld);
      }
    }
#pragma unroll
    for (int g = 0; g < kReadAhead; ++g) {
      const int q = q0 + g;
      const OutColumn oc = out_column(o, n0 + 8 * q + 2 * (lane % 4));
      E* p = static_cast<E*>(oc.c) + row * oc.ld + oc.j;
      store_pair(p, blend<kBeta>(o, acc[4 * q], c[g][0].x), blend<kBeta>(o, acc[4 * q + 1], c[g][0].y));
      store_pair(p + 8 * oc.ld, blend<kBeta>(o, acc[4 * q + 2], c[g][1].x), blend<kBeta>(o, acc[4 * q + 3], c[g][1].y));
    }
  }
}
// f(E{}, std::bool_constant<beta != 0>{}) for C's element type E: the one branch on the type and
// beta that a whole tile's stores take (store_pairs, store_columns).
template <class F>
__device__ __forceinline__ void with_type_and_beta(const Out& o, F&& f) {
  auto typed = [&](auto beta) {
    if (o.type == 1) f(__half{}, beta);
    else if (o.type == 0) f(float{}, beta);
    else f(__nv_bfloat16{}, beta);
  };
  if (o.beta == 0.f) typed(std::false_type{});
  else typed(std::true_type{});
}
template <int kN>
__device__ __forceinline__ void store_pairs(const Out& o, int64_t n0, int64_t row, int lane, const float* acc) {
  with_type_and_beta(o, [&](auto e, auto beta) { store_pairs_as<kN, decltype(e), decltype(beta)::value>(o, n0, row, lane, acc); });
}

template <class E>
__device__ __forceinline__ E from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
// q3_wgmma_rs's transposed accumulators (register 4 j + r of a thread: row row0 + 8 j + r % 2 of
// column col + 8 (r / 2)) stored without bounds, beta or type tests per element (one branch on the
// type and beta for them all): for outputs whose rows and both columns the caller has checked.
template <class E>
__device__ __forceinline__ float to_f32(E v) {
  if constexpr (std::is_same_v<E, float>) return v;
  else if constexpr (std::is_same_v<E, __half>) return __half2float(v);
  else return __bfloat162float(v);
}
template <int kRows, class E, bool kBeta>
__device__ __forceinline__ void store_columns_as(const Out& o, int64_t col, int64_t row0, const float* a) {
  static_assert(kRows / 8 % kReadAhead == 0);
  const OutColumn c0 = out_column(o, col), c8 = out_column(o, col + 8);
  E* p0 = static_cast<E*>(c0.c) + row0 * c0.ld + c0.j;
  E* p8 = static_cast<E*>(c8.c) + row0 * c8.ld + c8.j;
  // Register 4 j + r: row 8 j + r % 2 of column 0 (r < 2) or 8 (r >= 2).
  auto at = [&](int j, int r) { return (r < 2 ? p0 + (8 * j + r) * c0.ld : p8 + (8 * j + r - 2) * c8.ld); };
#pragma unroll
  for (int j0 = 0; j0 < kRows / 8; j0 += kReadAhead) {
    float c[kReadAhead][4] = {};
    if constexpr (kBeta) {
#pragma unroll
      for (int g = 0; g < kReadAhead; ++g)
#pragma unroll
        for (int r = 0; r < 4; ++r) c[g][r] = to_f32(*at(j0 + g, r));
    }
#pragma unroll
    for (int g = 0; g < kReadAhead; ++g)
#pragma unroll
      for (int r = 0; r < 4; ++r) *at(j0 + g, r) = from_f32<E>(blend<kBeta>(o, a[4 * (j0 + g) + r], c[g][r]));
  }
}
template <int kRows>
__device__ __forceinline__ void store_columns(const Out& o, int64_t col, int64_t row0, const float* a) {
  with_type_and_beta(o, [&](auto e, auto beta) { store_columns_as<kRows, decltype(e), decltype(beta)::value>(o, col, row0, a); });
}

// Copies a [rows][32] tile of a k-contiguous 16-bit matrix X[outer][k] (row stride ld) into a
// swizzled shared tile: rows*4 chunks of 16 bytes spread over the block's threads.
template <class T, int kRows>
__device__ __forceinline__ void copy_tile(const T* x, int64_t ld, int64_t outer, int64_t k, int64_t o0, int64_t k0, T* s) {
#pragma unroll
  for (int r = 0; r < kRows * 4 / kThreads; ++r) {
    const int f = int(threadIdx.x) + r * kThreads, row = f / 4, c = f % 4;
    const bool in = o0 + row < outer && k0 + c * 8 < k;
    mma::cp_async16(s + tile_off(row, c * 8), in ? x + (o0 + row) * ld + k0 + c * 8 : x, in ? 16 : 0);
  }
}

// Plain f16/bf16 weights W[n][k]: copied like A, one tile per stage.
template <class T>
struct PlainB {
  struct Args {
    const T* w;
    int64_t ld;
  };
  template <int kBn, int kStages>
  static constexpr size_t smem_bytes() { return size_t(kStages) * kBn * kBk * sizeof(T); }
  template <int kBn, int kStages>
  __device__ static void issue(const Args& b, int64_t n, int64_t k, int64_t n0, int64_t kt, int stage, uint8_t* smem) {
    copy_tile<T, kBn>(b.w, b.ld, n, k, n0, kt * kBk, reinterpret_cast<T*>(smem) + size_t(stage) * kBn * kBk);
  }
  template <int kBn, int kStages>
  __device__ static const T* prepare(const Args&, int64_t, int64_t, int64_t, int64_t, int stage, uint8_t* smem) {
    return reinterpret_cast<const T*>(smem) + size_t(stage) * kBn * kBk;
  }
};

template <class T, int kBm, int kBn, int kStages, class BPolicy>
__global__ void __launch_bounds__(kThreads, 2) tc_gemm_kernel(const T* __restrict__ a, int64_t lda,
                                                           typename BPolicy::Args b, Out out, int64_t m, int64_t n,
                                                           int64_t k) {
  constexpr int kWtm = kBm / 2, kWtn = kBn / 4, kMt = kWtm / 16, kNt = kWtn / 8;
  static_assert(kNt % 2 == 0, "B fragments are loaded two n8 tiles at a time");
  extern __shared__ __align__(128) uint8_t smem[];
  T* as = reinterpret_cast<T*>(smem);
  uint8_t* bsmem = smem + size_t(kStages) * kBm * kBk * sizeof(T);

  // Grouped tile order: 8 block-rows share the B tiles they stream while they run together.
  const int64_t grid_m = (m + kBm - 1) / kBm, grid_n = (n + kBn - 1) / kBn;
  const int64_t pid = blockIdx.x, per_group = 8 * grid_n, first_m = (pid / per_group) * 8;
  const int64_t group_m = grid_m - first_m < 8 ? grid_m - first_m : 8;
  const int64_t m0 = (first_m + (pid % per_group) % group_m) * kBm, n0 = ((pid % per_group) / group_m) * kBn;

  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int wm = warp / 4, wn = warp % 4;
  const int64_t tiles = (k + kBk - 1) / kBk;
  float acc[kMt][kNt][4] = {};

#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < tiles) {
      copy_tile<T, kBm>(a, lda, m, k, m0, st * kBk, as + size_t(st) * kBm * kBk);
      BPolicy::template issue<kBn, kStages>(b, n, k, n0, st, st, bsmem);
    }
    mma::cp_async_commit();
  }
  for (int64_t kt = 0; kt < tiles; ++kt) {
    mma::cp_async_wait<kStages - 2>();
    __syncthreads();
    const int64_t next = kt + kStages - 1;
    if (next < tiles) {
      const int st = int(next % kStages);
      copy_tile<T, kBm>(a, lda, m, k, m0, next * kBk, as + size_t(st) * kBm * kBk);
      BPolicy::template issue<kBn, kStages>(b, n, k, n0, next, st, bsmem);
    }
    mma::cp_async_commit();
    const int st = int(kt % kStages);
    const T* at = as + size_t(st) * kBm * kBk;
    const T* bt = BPolicy::template prepare<kBn, kStages>(b, n, k, n0, kt, st, bsmem);
#pragma unroll
    for (int kk = 0; kk < kBk; kk += 16) {
      uint32_t af[kMt][4], bf[kNt][2];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt)
        mma::ldmatrix_x4(af[mt], at + tile_off(wm * kWtm + mt * 16 + lane % 16, kk + (lane / 16) * 8));
#pragma unroll
      for (int np = 0; np < kNt / 2; ++np) {
        uint32_t r[4];
        mma::ldmatrix_x4(r, bt + tile_off(wn * kWtn + np * 16 + lane % 8 + (lane / 16) * 8, kk + ((lane / 8) % 2) * 8));
        bf[2 * np][0] = r[0], bf[2 * np][1] = r[1], bf[2 * np + 1][0] = r[2], bf[2 * np + 1][1] = r[3];
      }
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt)
          mma::mma16816<T>(acc[mt][nt], af[mt][0], af[mt][1], af[mt][2], af[mt][3], bf[nt][0], bf[nt][1]);
    }
  }
  mma::cp_async_wait<0>();
  // Accumulator fragment: c0, c1 at (row lane/4, cols 2(lane%4) + 0..1), c2, c3 eight rows down.
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      const int64_t i = m0 + wm * kWtm + mt * 16 + lane / 4, j = n0 + wn * kWtn + nt * 8 + 2 * (lane % 4);
      const OutColumn c0 = out_column(out, j), c1 = next_column(out, c0, j, 1);
      out_store(out, c0, i, acc[mt][nt][0]);
      out_store(out, c1, i, acc[mt][nt][1]);
      out_store(out, c0, i + 8, acc[mt][nt][2]);
      out_store(out, c1, i + 8, acc[mt][nt][3]);
    }
}

inline Out make_out(const GemmProblem& p) {
  const int type = p.c_type == GgmlType::F32 ? 0 : p.c_type == GgmlType::F16 ? 1 : 2;
  Out o{p.c, p.ldc, p.m, p.n, type, p.alpha, p.beta};
  if (p.parts[0].c) o.col1 = p.parts[0].col0, o.c1 = p.parts[0].c, o.ldc1 = p.parts[0].ldc;
  if (p.parts[0].c && p.parts[1].c) o.col2 = p.parts[1].col0, o.c2 = p.parts[1].c, o.ldc2 = p.parts[1].ldc;
  o.pairs = pair_stores(o);
  return o;
}

template <class T, int kBm, int kBn, int kStages, class BPolicy>
Status launch(const GemmProblem& p, const typename BPolicy::Args& b, const char* name, cudaStream_t s) {
  auto kernel = tc_gemm_kernel<T, kBm, kBn, kStages, BPolicy>;
  const size_t smem = size_t(kStages) * kBm * kBk * sizeof(T) + BPolicy::template smem_bytes<kBn, kStages>();
  if (smem > 48 * 1024 && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)
    return Status::error(std::string(name) + ": shared memory of " + std::to_string(smem) + " bytes not available");
  const int64_t blocks = ((p.m + kBm - 1) / kBm) * ((p.n + kBn - 1) / kBn);
  kernel<<<unsigned(blocks), kThreads, smem, s>>>(static_cast<const T*>(p.a), p.lda, b, make_out(p), p.m, p.n, p.k);
  return launch_status(name);
}

}  // namespace lamina::kernels::tc_gemm

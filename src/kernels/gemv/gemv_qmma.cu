// q_mma (Q4_0 / Q8_0) and q4k_mma (Q4_K), repacked: GEMVs for a batch of several rows on int8 tensor cores. Against
// q_dp4a, which runs one dp4a chain per weight row and batch row (so that its cost grows with
// every batch row), the batch is the n = 8 side of mma.sync m16n8k32 (int8 x int8 -> int32): one
// MMA multiplies a 32-weight block of 16 rows with the same block of all 8 batch rows, and 8 batch
// rows cost little more than one. x is the same int8 blocks q_dp4a takes
// (kernels/common/q8_blocks.h) and every block's sum is exact in int32, so the outputs are
// q_dp4a's up to the order of the float sums.
//
//   block:  `warps` warps share a group of 16 x kTiles weight rows and split K between them in
//           steps of kUnroll 64-byte runs of each row; the grid is persistent over the row groups;
//           the warps' partial sums meet in shared memory and one pass applies the epilogue
//           (bias, residual, the gate/up pair's act(gate) * up).
//   lane:   g = lane / 4, t = lane % 4 holds weight rows g and g + 8 of each 16-row tile and
//           batch row g of x (the B column), and its C fragment rows g, g + 8 x batch rows 2t, 2t+1.
//   A:      lane t loads 16 bytes (16t..16t+15) of each row's 64-byte run, and a 4 x 4 transpose
//           inside the quad (quad_transpose) leaves it word t of each of the run's four 16-byte
//           chunks: Q4, four blocks, whose word t holds elements 4t..4t+3 in its low nibbles (a0 /
//           a1) and 16+4t..16+4t+3 in its high ones (a2 / a3); Q8, two blocks of two chunks, word t
//           of each (elements 4t.., a0 / a1, and 16+4t.., a2 / a3). That is the MMA's own k order,
//           so x's bytes 4t..4t+3 and 16+4t..16+4t+3 are its B fragment (b0, b1). The Q4 offset -8
//           enters as the MMA's C input: -8 x the block's sum of x.
//   x:      the int8 blocks in shared memory (the caller's copied, or made here), rows padded
//           (qmma_x_stride) so that a warp's B loads, 8 rows x 16 bytes, are one wavefront; a lane
//           reads its column's facts, and those of its C columns come by shuffles.
//   steps:  the next step's weights (or the next group's first) are loaded before this step's
//           products, the first step's before the PDL wait.
//   x's largest element (kept apart as a wide integer Q at its index m, the byte there 0): Q is
//           split into signed base-256 digits Q = d0 + 256 d1 + 65536 d2 (|Q| < 2^21, so each fits
//           int8); d0 takes the empty byte in x's own B fragment, d1 and d2 ride in two B fragments
//           that are zero but for that byte: S = (A x + C) + 256 (A d1 + 256 A d2) adds exactly
//           w[m] Q to the block's sum (the d2 product only where a warp has a d2: |Q| >= 32768).
//
// Its first form loaded the 4 (Q4) or 8 (Q8) bytes of a block a lane needs directly, with no
// transpose, no weights in flight across steps and x read through L1: slower at every shape.
// Figures: docs/benchmarks.md (lamina kbench gemv --x8, batch 1..8; forty-first session).
#include "kernels/common/mma.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_x8.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

// Warps a block may have: 16 for the one-tile, one-run instances (bounded to 128 registers, so
// that 16 warps fit an SM: 8 in each of two blocks, or 16 in one), 8 for the others.
constexpr int kMaxWarps = 16;

// Bytes of one batch row of x in shared memory: x8_bytes(k) rounded up to 128, plus 16, so that
// rows g = 0..7 start 16 bytes (four banks) apart.
__host__ __device__ constexpr size_t qmma_x_stride(int64_t k) { return (x8_bytes(k) + 127) / 128 * 128 + 16; }

// 4 x 4 transpose of 32-bit words inside each quad of lanes (t = lane % 4): word s of lane t
// becomes word t of lane s, by two butterfly exchanges (4 shuffles).
__device__ __forceinline__ uint4 quad_transpose(uint4 v, int t) {
  uint32_t a = (t & 1) ? v.x : v.y, b = (t & 1) ? v.z : v.w;
  a = __shfl_xor_sync(0xffffffffu, a, 1), b = __shfl_xor_sync(0xffffffffu, b, 1);
  if (t & 1) v.x = a, v.z = b;
  else v.y = a, v.w = b;
  a = (t & 2) ? v.x : v.z, b = (t & 2) ? v.y : v.w;
  a = __shfl_xor_sync(0xffffffffu, a, 2), b = __shfl_xor_sync(0xffffffffu, b, 2);
  if (t & 2) v.x = a, v.y = b;
  else v.z = a, v.w = b;
  return v;
}

// The x side of one 32-element block for this lane: its B fragments (x's bytes 4t..4t+3 and
// 16+4t..16+4t+3, with d0 in the byte of the largest element; the d1 and d2 planes), and for its
// C columns 2t, 2t+1 the steps d and the blocks' sums.
struct XBlock {
  uint32_t bx0, bx1, bd1_0, bd1_1, bd2_0, bd2_1;
  float d0, d1;  // the steps of columns 2t, 2t+1
  int s0, s1;    // their blocks' sums of x in steps (the largest element's Q included)
  bool has_d2;   // some lane of the warp has a nonzero d2
};

__device__ __forceinline__ XBlock x_block(const uint8_t* xg, int64_t k, int64_t blk, int t) {
  XBlock x;
  const uint8_t* q = xg + blk * 32;
  const X8Facts f = x8_facts(xg, k, blk);
  x.bx0 = *reinterpret_cast<const uint32_t*>(q + 4 * t);
  x.bx1 = *reinterpret_cast<const uint32_t*>(q + 16 + 4 * t);
  // Q = d0 + 256 d1 + 65536 d2, each digit a signed byte, at element m: lane (m / 4) % 4, b1 when
  // m >= 16, byte m % 4.
  const int d0 = int(int8_t(f.big & 0xFF)), r1 = (f.big - d0) >> 8;
  const int d1 = int(int8_t(r1 & 0xFF)), d2 = (r1 - d1) >> 8;
  const int shift = 8 * (f.m & 3);
  const bool here = ((f.m >> 2) & 3) == t, upper = f.m >> 4;
  const uint32_t p0 = here ? uint32_t(d0 & 0xFF) << shift : 0u;
  const uint32_t p1 = here ? uint32_t(d1 & 0xFF) << shift : 0u;
  const uint32_t p2 = here ? uint32_t(d2 & 0xFF) << shift : 0u;
  x.bx0 |= upper ? 0u : p0, x.bx1 |= upper ? p0 : 0u;
  x.bd1_0 = upper ? 0u : p1, x.bd1_1 = upper ? p1 : 0u;
  x.bd2_0 = upper ? 0u : p2, x.bd2_1 = upper ? p2 : 0u;
  x.has_d2 = __any_sync(0xffffffffu, p2 != 0u);
  // Columns 2t and 2t + 1 are the B columns of lanes 8t and 8t + 4.
  x.d0 = __shfl_sync(0xffffffffu, f.d, 8 * t), x.d1 = __shfl_sync(0xffffffffu, f.d, 8 * t + 4);
  x.s0 = __shfl_sync(0xffffffffu, f.sum, 8 * t), x.s1 = __shfl_sync(0xffffffffu, f.sum, 8 * t + 4);
  return x;
}

// One block's sum S[4] (rows g, g+8 x columns 2t, 2t+1) in int32 from the A fragments (a0 / a1:
// elements 4t..4t+3 of rows g / g+8, a2 / a3: 16+4t..), x's largest element included, scaled into
// acc: acc[i] += d_x(column) (A(row) S[i] - B(row) sum_x(column)), with the weights' scale pair
// (A, B) = (d, 0) for Q4_0 / Q8_0 and (d sc, dmin m) for Q4_K; Q4_0's -8 offset is the MMA's C
// input, -8 sum_x. The three products are independent (S = E0 + 256 (E1 + 256 E2)), and E2 is
// left out when no column of the warp has a d2 (|Q| < 32768: nearly always).
template <bool kOffset8, bool kMin>
__device__ __forceinline__ void block_dot(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, float2 w_g, float2 w_g8,
                                          const XBlock& x, float (&acc)[4]) {
  const int c0 = kOffset8 ? -8 * x.s0 : 0, c1 = kOffset8 ? -8 * x.s1 : 0;
  int e0[4] = {c0, c1, c0, c1}, e1[4] = {0, 0, 0, 0};
  mma::mma16832_s8(e0, a0, a1, a2, a3, x.bx0, x.bx1);
  mma::mma16832_s8(e1, a0, a1, a2, a3, x.bd1_0, x.bd1_1);
  if (x.has_d2) {  // (warp-uniform)
    int e2[4] = {0, 0, 0, 0};
    mma::mma16832_s8(e2, a0, a1, a2, a3, x.bd2_0, x.bd2_1);
#pragma unroll
    for (int i = 0; i < 4; ++i) e1[i] += 256 * e2[i];
  }
  const float s[4] = {float(e0[0] + 256 * e1[0]), float(e0[1] + 256 * e1[1]), float(e0[2] + 256 * e1[2]),
                      float(e0[3] + 256 * e1[3])};
  if constexpr (kMin) {
    acc[0] += x.d0 * (w_g.x * s[0] - w_g.y * float(x.s0));
    acc[1] += x.d1 * (w_g.x * s[1] - w_g.y * float(x.s1));
    acc[2] += x.d0 * (w_g8.x * s[2] - w_g8.y * float(x.s0));
    acc[3] += x.d1 * (w_g8.x * s[3] - w_g8.y * float(x.s1));
  } else {
    acc[0] += w_g.x * x.d0 * s[0];
    acc[1] += w_g.x * x.d1 * s[1];
    acc[2] += w_g8.x * x.d0 * s[2];
    acc[3] += w_g8.x * x.d1 * s[3];
  }
}

// Weight policies: one step of one 16-row tile, kUnroll 64-byte runs of rows g and g+8 (lane t
// loads bytes 16t..16t+15 of each run; quad_transpose then leaves it word t of the run's four
// 16-byte chunks), what the run's blocks' A fragments are in those words, and their scale pairs.
// A 32-weight block of x meets block s of run r: x block 4r + s (Q4), 2r + s (Q8).

// Q4_0 / Q8_0 in the repacked layout (gemv.h): quant rows, then the f16 d plane.
template <int kBits, int kUnroll_>
struct QRuns {
  static constexpr int kUnroll = kUnroll_;
  static constexpr int kBlocks = kBits == 4 ? 4 : 2;  // 32-weight blocks in a 64-byte run
  static constexpr bool kOffset8 = kBits == 4, kMin = false;
  uint4 v[2][kUnroll];
  __half d[2][kUnroll][kBlocks];

  static __device__ __forceinline__ int64_t runs(int64_t k) { return (k * kBits / 8 + 63) / 64; }

  // Runs r0 .. r0 + kUnroll - 1 of rows r[0], r[1] (clamped by the caller) of the matrix at w.
  __device__ __forceinline__ void load(const uint8_t* w, const int64_t (&r)[2], int64_t n, int64_t k, int64_t r0, int t) {
    const size_t qrow = size_t(k) * kBits / 8, srow = size_t(k / 32) * 2;
    const int64_t chunks = int64_t(qrow / 16), nblk = k / 32;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint8_t* qp = w + size_t(r[h]) * qrow;
      const uint8_t* sp = w + size_t(n) * qrow + size_t(r[h]) * srow;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t chunk = 4 * (r0 + u) + t;
        v[h][u] = chunk < chunks ? load_stream(qp + chunk * 16) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int s = 0; s < kBlocks; ++s) {
          const int64_t blk = (r0 + u) * kBlocks + s;
          d[h][u][s] = blk < nblk ? *reinterpret_cast<const __half*>(sp + blk * 2) : __ushort_as_half(0);
        }
      }
    }
  }

  // Block s's A fragments from the transposed words of rows g (v0) and g+8 (v1): Q4, word s's low
  // nibbles (elements 4t..) and high (16+4t..); Q8, words 2s (4t..) and 2s+1 (16+4t..).
  static __device__ __forceinline__ void frag(const uint4& v0, const uint4& v1, int s, uint32_t& a0, uint32_t& a1,
                                              uint32_t& a2, uint32_t& a3) {
    if constexpr (kBits == 4) {
      const uint32_t w0 = s == 0 ? v0.x : s == 1 ? v0.y : s == 2 ? v0.z : v0.w;
      const uint32_t w1 = s == 0 ? v1.x : s == 1 ? v1.y : s == 2 ? v1.z : v1.w;
      a0 = w0 & 0x0F0F0F0Fu, a1 = w1 & 0x0F0F0F0Fu;
      a2 = (w0 >> 4) & 0x0F0F0F0Fu, a3 = (w1 >> 4) & 0x0F0F0F0Fu;
    } else {
      a0 = s == 0 ? v0.x : v0.z, a2 = s == 0 ? v0.y : v0.w;
      a1 = s == 0 ? v1.x : v1.z, a3 = s == 0 ? v1.y : v1.w;
    }
  }
  __device__ __forceinline__ float2 scale(int h, int u, int s, int64_t) const { return make_float2(__half2float(d[h][u][s]), 0.f); }
};

// Q4_K in the repacked layout (gemv.h): quant rows in Q4_0's order, as QRuns<4> reads them, and
// the 16-byte super-block headers; run r is blocks 4 (r % 2) .. 4 (r % 2) + 3 of super-block r / 2.
template <int kUnroll_>
struct Q4kRuns {
  static constexpr int kUnroll = kUnroll_;
  static constexpr int kBlocks = 4;
  static constexpr bool kOffset8 = false, kMin = true;
  uint4 v[2][kUnroll], hd[2][kUnroll];  // the run's quants, its super-block's header

  static __device__ __forceinline__ int64_t runs(int64_t k) { return k / 256 * 2; }

  __device__ __forceinline__ void load(const uint8_t* w, const int64_t (&r)[2], int64_t n, int64_t k, int64_t r0, int t) {
    const size_t qrow = size_t(k) / 2, hrow = size_t(k) / 16;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t run = r0 + u;
        const bool in = run < runs(k);
        v[h][u] = in ? load_stream(w + size_t(r[h]) * qrow + size_t(run) * 64 + 16 * t) : make_uint4(0, 0, 0, 0);
        hd[h][u] = in ? __ldg(reinterpret_cast<const uint4*>(w + size_t(n) * qrow + size_t(r[h]) * hrow + size_t(run / 2) * 16))
                      : make_uint4(0, 0, 0, 0);
      }
  }

  static __device__ __forceinline__ void frag(const uint4& v0, const uint4& v1, int s, uint32_t& a0, uint32_t& a1,
                                              uint32_t& a2, uint32_t& a3) {
    QRuns<4, 1>::frag(v0, v1, s, a0, a1, a2, a3);
  }
  // (d sc, dmin m) of block 4 (run % 2) + s.
  __device__ __forceinline__ float2 scale(int h, int u, int s, int64_t run) const {
    float sc, m;
    scale_min(4 * int(run % 2) + s, hd[h][u], sc, m);
    const float2 dd = __half22float2(*reinterpret_cast<const __half2*>(&hd[h][u].x));
    return make_float2(dd.x * sc, dd.y * m);
  }
};

// y[b][n] for the 16 kTiles rows of each group: see the header for the layout of work.
// (The one-tile, one-run instances are bounded to 128 registers: 16 warps an SM.)
template <class Step, int kTiles, bool kGateUp>
__global__ void __launch_bounds__(kTiles == 1 && Step::kUnroll == 1 ? 512 : 256)
    q_mma(const uint8_t* __restrict__ w, const uint8_t* __restrict__ w_up, XSource xin, float* __restrict__ y, int64_t n,
          int64_t k, int batch, Epilogue ep) {
  constexpr int kMats = kGateUp ? 2 : 1;
  constexpr int kRows = 16 * kTiles;
  constexpr int kUnroll = Step::kUnroll;
  extern __shared__ __align__(16) uint8_t smem[];          // x as int8 blocks, when made here
  constexpr int kWarpCap = kTiles == 1 && kUnroll == 1 ? kMaxWarps : 8;
  __shared__ float partial[kWarpCap][kMats][kRows][8];  // [warp][mat][row][batch]
  static_assert(sizeof(partial) <= 16 * 1024, "persistent_grid_rows opts in to more shared memory only above 32 KiB of x");
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t nblk = k / 32, runs = Step::runs(k);
  const int64_t groups = (n + kRows - 1) / kRows;
  // This lane's rows of group grp (clamped to n - 1: loads stay in bounds; only rows < n are stored).
  const auto rows_of = [&](int64_t grp, int ti, int64_t (&r)[2]) {
    r[0] = min(grp * kRows + 16 * ti + g, n - 1);
    r[1] = min(grp * kRows + 16 * ti + 8 + g, n - 1);
  };
  Step cur[kMats][kTiles], nxt[kMats][kTiles];
  const auto load = [&](int64_t grp, int64_t r0, Step (&st)[kMats][kTiles]) {
#pragma unroll
    for (int mat = 0; mat < kMats; ++mat)
#pragma unroll
      for (int ti = 0; ti < kTiles; ++ti) {
        int64_t r[2];
        rows_of(grp, ti, r);
        st[mat][ti].load(mat ? w_up : w, r, n, k, r0, t);
      }
  };
  // The first step's weights go out before the wait: they never depend on an earlier kernel.
  const int64_t first = int64_t(warp) * kUnroll, stride = int64_t(warps) * kUnroll;
  if (blockIdx.x < groups && first < runs) load(blockIdx.x, first, cur);
  pdl_wait();  // x comes from the kernel before (kernels/common/pdl.cuh)
  // x in shared memory, rows padded so that a warp's B loads (8 rows x 16 bytes) hit 32 banks:
  // the caller's blocks copied, or x quantised here.
  const size_t xrow = qmma_x_stride(k);
  if (xin.x8) {
    const size_t words = x8_bytes(k) / 16;
    for (int b = 0; b < batch; ++b)
      for (size_t i = threadIdx.x; i < words; i += blockDim.x)
        reinterpret_cast<uint4*>(smem + size_t(b) * xrow)[i] =
            reinterpret_cast<const uint4*>(xin.x8 + size_t(b) * x8_bytes(k))[i];
  } else {
    quantize_x_to_smem(xin.x, k, batch, smem, xrow);
  }
  __syncthreads();
  // Batch rows past the batch read row 0; their columns are never stored.
  const uint8_t* xg = smem + size_t(g < batch ? g : 0) * xrow;
  for (int64_t grp = blockIdx.x; grp < groups; grp += gridDim.x) {
    const int64_t row0 = grp * kRows;
    float acc[kMats][kTiles][4] = {};
    for (int64_t r0 = first; r0 < runs; r0 += stride) {
      // The next step's weights (this group's next runs, or the next group's first) before this
      // step's products.
      const bool more = r0 + stride < runs, next_grp = grp + gridDim.x < groups;
      if (more) load(grp, r0 + stride, nxt);
      else if (next_grp) load(grp + gridDim.x, first, nxt);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (r0 + u >= runs) break;
        uint4 a[kMats][kTiles][2];
#pragma unroll
        for (int mat = 0; mat < kMats; ++mat)
#pragma unroll
          for (int ti = 0; ti < kTiles; ++ti)
#pragma unroll
            for (int h = 0; h < 2; ++h) a[mat][ti][h] = quad_transpose(cur[mat][ti].v[h][u], t);
#pragma unroll
        for (int s = 0; s < Step::kBlocks; ++s) {
          const int64_t blk = (r0 + u) * Step::kBlocks + s;
          if (blk >= nblk) break;
          const XBlock xb = x_block(xg, k, blk, t);
#pragma unroll
          for (int mat = 0; mat < kMats; ++mat)
#pragma unroll
            for (int ti = 0; ti < kTiles; ++ti) {
              uint32_t a0, a1, a2, a3;
              Step::frag(a[mat][ti][0], a[mat][ti][1], s, a0, a1, a2, a3);
              const Step& st = cur[mat][ti];
              block_dot<Step::kOffset8, Step::kMin>(a0, a1, a2, a3, st.scale(0, u, s, r0 + u), st.scale(1, u, s, r0 + u), xb,
                                                    acc[mat][ti]);
            }
        }
      }
      if (more || next_grp)
#pragma unroll
        for (int mat = 0; mat < kMats; ++mat)
#pragma unroll
          for (int ti = 0; ti < kTiles; ++ti) cur[mat][ti] = nxt[mat][ti];
    }
    if (grp + gridDim.x >= groups) pdl_launch_dependents();  // this block's last weights are in
    // C fragment: acc[.][.][0..1] = row g, batch rows 2t, 2t+1; [2..3] = row g + 8.
#pragma unroll
    for (int mat = 0; mat < kMats; ++mat)
#pragma unroll
      for (int ti = 0; ti < kTiles; ++ti)
#pragma unroll
        for (int i = 0; i < 4; ++i) partial[warp][mat][16 * ti + g + 8 * (i / 2)][2 * t + i % 2] = acc[mat][ti][i];
    __syncthreads();
    for (int idx = threadIdx.x; idx < kRows * 8; idx += blockDim.x) {
      const int r = idx / 8, b = idx % 8;
      if (b >= batch || row0 + r >= n) continue;
      float s[2] = {0.f, 0.f};
      for (int wi = 0; wi < warps; ++wi)
#pragma unroll
        for (int mat = 0; mat < kMats; ++mat) s[mat] += partial[wi][mat][r][b];
      y[int64_t(b) * n + row0 + r] = ep.apply(s[0], kGateUp ? s[1] : 0.f, row0 + r, b, n);
    }
    __syncthreads();  // partial is reused by the next group
  }
}

template <class Step, int kTiles>
Status launch_t(const char* name, const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  const auto run = [&](auto kernel) {
    const size_t smem = size_t(p.batch) * qmma_x_stride(p.k);  // x, copied or made here
    unsigned grid = 0;
    if (Status st = persistent_grid_rows(kernel, name, p, c.warps, 16 * kTiles, smem, 0, grid); !st.ok) return st;
    launch_pdl(kernel, grid, unsigned(c.warps * 32), smem, s, static_cast<const uint8_t*>(p.w),
               static_cast<const uint8_t*>(p.w_up), xsource_of(p), p.y, p.n, p.k, p.batch, epilogue_of(p));
    return launch_status(name);
  };
  if (p.w_up) return run(q_mma<Step, kTiles, true>);
  return run(q_mma<Step, kTiles, false>);
}

// The configs' instances for a weight policy template (QRuns<kBits, .> or Q4kRuns<.>).
template <template <int> class Runs>
Status launch_configs(const char* name, const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (c.warps < 1 || c.warps > (c.rows == 16 && c.unroll == 1 ? kMaxWarps : 8))
    return Status::error(std::string(name) + ": 1..16 warps (16 rows, unroll 1), else 1..8");
  if (c.rows == 16 && c.unroll == 1) return launch_t<Runs<1>, 1>(name, p, c, s);
  if (c.rows == 16 && c.unroll == 2) return launch_t<Runs<2>, 1>(name, p, c, s);
  if (c.rows == 32 && c.unroll == 1) return launch_t<Runs<1>, 2>(name, p, c, s);
  return Status::error(std::string(name) + ": no instance for config " + c.str());
}
template <int kUnroll>
using Q4Runs = QRuns<4, kUnroll>;
template <int kUnroll>
using Q8Runs = QRuns<8, kUnroll>;

Status run_qmma(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (p.wtype == GgmlType::Q4_0) return launch_configs<Q4Runs>("q_mma", p, c, s);
  if (p.wtype == GgmlType::Q8_0) return launch_configs<Q8Runs>("q_mma", p, c, s);
  return Status::error("q_mma: q4_0 and q8_0 only");
}

Status run_q4k_mma(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (p.wtype != GgmlType::Q4_K) return Status::error("q4k_mma: q4_K only");
  if (p.k % 256) return Status::error("q4k_mma: k must be a multiple of 256");
  return launch_configs<Q4kRuns>("q4k_mma", p, c, s);
}

bool qmma_types(GgmlType t) { return t == GgmlType::Q4_0 || t == GgmlType::Q8_0; }
bool q4k_type(GgmlType t) { return t == GgmlType::Q4_K; }

}  // namespace

void register_qmma_variants(std::vector<GemvVariant>& out) {
  const std::vector<GemvConfig> configs = {GemvConfig{16, 8, 1}, GemvConfig{16, 16, 1}, GemvConfig{16, 8, 2},
                                           GemvConfig{32, 8, 1}, GemvConfig{16, 4, 2},  GemvConfig{32, 4, 1}};
  out.push_back({"q_mma", "q4_0/q8_0 repacked; the batch as the n side of int8 mma.sync m16n8k32, split-K warps",
                 WeightLayout::Repacked, qmma_types, run_qmma, configs, XRounding::Int8Blocks});
  out.push_back({"q4k_mma", "q_mma's loop on q4_K repacked: Q4_0's quant runs, (d sc, dmin m) per row and block",
                 WeightLayout::Repacked, q4k_type, run_q4k_mma, configs, XRounding::Int8Blocks});
}

}  // namespace lamina::kernels

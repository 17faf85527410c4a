// The SGEMM ladder (fp32 on CUDA cores), rungs s0..s5; s6 (cp.async) is in sgemm_async.cu.
//   s0_naive      one thread per C element, operands straight from global memory
//   s1_smem       32 x 32 tiles of A and B staged in shared memory
//   s2_regtile    128 x 128 block tile, BK = 8, each thread 8 x 8 outputs in registers
//   s3_vec        + 16-byte global loads, A stored transposed (k-major) so fragments are float4
//   s4_dbuf       + double-buffered shared memory, next tile prefetched into registers
//   s5_warptile   + warps arranged 4 x 8 lanes over strided 4 x 4 sub-tiles: conflict-free reads
// Every rung takes all four layouts of A and B (runtime strides), any M, N, K, alpha and beta.
// Figures: docs/benchmarks.md (lamina kbench gemm).
#include "kernels/gemm/sgemm_common.cuh"

namespace lamina::kernels {
namespace {

using namespace gemm_detail;

__global__ void s0_naive(FOperand a, FOperand b, FOut c) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t i = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  if (i >= c.m || j >= c.n) return;
  float acc = 0.f;
  for (int64_t p = 0; p < a.k; ++p) acc += load_elem(a, i, p) * load_elem(b, j, p);
  store_elem(c, i, j, acc);
}

__global__ void s1_smem(FOperand a, FOperand b, FOut c) {
  __shared__ float as[32][33], bs[32][33];  // as[m][k], bs[k][n]; +1 column against conflicts
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t i = int64_t(blockIdx.y) * 32 + ty, j = int64_t(blockIdx.x) * 32 + tx;
  float acc = 0.f;
  for (int64_t k0 = 0; k0 < a.k; k0 += 32) {
    as[ty][tx] = load_elem(a, int64_t(blockIdx.y) * 32 + ty, k0 + tx);
    bs[ty][tx] = load_elem(b, int64_t(blockIdx.x) * 32 + tx, k0 + ty);
    __syncthreads();
#pragma unroll
    for (int p = 0; p < 32; ++p) acc += as[ty][p] * bs[p][tx];
    __syncthreads();
  }
  store_elem(c, i, j, acc);
}

// Element e of a kTile x 8 tile, ordered so that consecutive threads read consecutive addresses.
__device__ __forceinline__ void tile_coord(const FOperand& x, int e, int& o, int& kk) {
  if (x.k_contig) o = e / 8, kk = e % 8;
  else kk = e / kTile, o = e % kTile;
}

__global__ void __launch_bounds__(kThreads, 2) s2_regtile(FOperand a, FOperand b, FOut c) {
  constexpr int kBk = 8;
  constexpr layout::Layout kBlocked8 = blocked8();
  __shared__ float as[kTile][kBk + 1], bs[kBk][kTile];  // A not transposed yet: as[m][k]
  const int t = threadIdx.x, tr = t / 16, tc = t % 16;
  const int64_t m0 = int64_t(blockIdx.y) * kTile, n0 = int64_t(blockIdx.x) * kTile;
  float acc[8][8] = {};
  for (int64_t k0 = 0; k0 < a.k; k0 += kBk) {
#pragma unroll
    for (int r = 0; r < kTile * kBk / kThreads; ++r) {
      int o, kk;
      tile_coord(a, t + r * kThreads, o, kk);
      as[o][kk] = load_elem(a, m0 + o, k0 + kk);
      tile_coord(b, t + r * kThreads, o, kk);
      bs[kk][o] = load_elem(b, n0 + o, k0 + kk);
    }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < kBk; ++p) {
      float av[8], bv[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) av[i] = as[tr * 8 + kBlocked8(i)][p], bv[i] = bs[p][tc * 8 + kBlocked8(i)];
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
  store_8x8<false>(c, m0 + tr * 8, n0 + tc * 8, acc);
}

// One float4 chunk of a kTile x 8 tile per thread: its coordinate and its store into the
// k-major shared tile s[8][kTile + kPad] (transposing when k is the contiguous index).
struct Chunk {
  int o, kk;
  __device__ Chunk(const FOperand& x, int t) {
    if (x.k_contig) o = t / 2, kk = (t % 2) * 4;
    else kk = t / (kTile / 4), o = (t % (kTile / 4)) * 4;
  }
  __device__ void store(const FOperand& x, float (*s)[kTile + kPad], float4 v) const {
    if (x.k_contig) s[kk][o] = v.x, s[kk + 1][o] = v.y, s[kk + 2][o] = v.z, s[kk + 3][o] = v.w;
    else *reinterpret_cast<float4*>(&s[kk][o]) = v;
  }
};

template <bool kDbuf, bool kWarpArranged>
__global__ void __launch_bounds__(kThreads, 2) s3_to_s5(FOperand a, FOperand b, FOut c) {
  constexpr int kBk = 8, kBufs = kDbuf ? 2 : 1;
  __shared__ __align__(16) float as[kBufs][kBk][kTile + kPad], bs[kBufs][kBk][kTile + kPad];
  const int t = threadIdx.x;
  const int ty = kWarpArranged ? warp_arranged_ty(t) : t / 16, tx = kWarpArranged ? warp_arranged_tx(t) : t % 16;
  const int row0 = ty * (kWarpArranged ? 4 : 8), col0 = tx * (kWarpArranged ? 4 : 8);
  const int64_t m0 = int64_t(blockIdx.y) * kTile, n0 = int64_t(blockIdx.x) * kTile;
  const Chunk ca(a, t), cb(b, t);
  float acc[8][8] = {};
  auto compute = [&](int buf) {
#pragma unroll
    for (int p = 0; p < kBk; ++p) outer_product_8x8<kWarpArranged>(as[buf][p], bs[buf][p], row0, col0, acc);
  };
  const int64_t tiles = (a.k + kBk - 1) / kBk;
  if constexpr (kDbuf) {
    ca.store(a, as[0], load4(a, m0 + ca.o, ca.kk));
    cb.store(b, bs[0], load4(b, n0 + cb.o, cb.kk));
    __syncthreads();
    for (int64_t kt = 0; kt < tiles; ++kt) {
      float4 na, nb;
      const bool more = kt + 1 < tiles;
      if (more) na = load4(a, m0 + ca.o, (kt + 1) * kBk + ca.kk), nb = load4(b, n0 + cb.o, (kt + 1) * kBk + cb.kk);
      compute(int(kt % 2));
      if (more) ca.store(a, as[(kt + 1) % 2], na), cb.store(b, bs[(kt + 1) % 2], nb);
      __syncthreads();
    }
  } else {
    for (int64_t kt = 0; kt < tiles; ++kt) {
      ca.store(a, as[0], load4(a, m0 + ca.o, kt * kBk + ca.kk));
      cb.store(b, bs[0], load4(b, n0 + cb.o, kt * kBk + cb.kk));
      __syncthreads();
      compute(0);
      __syncthreads();
    }
  }
  store_8x8<kWarpArranged>(c, m0 + row0, n0 + col0, acc);
}

dim3 tiles_grid(const GemmProblem& p, int tile) {
  return dim3(unsigned((p.n + tile - 1) / tile), unsigned((p.m + tile - 1) / tile));
}

Status run_s0(const GemmProblem& p, const GemmConfig&, cudaStream_t s) {
  s0_naive<<<tiles_grid(p, 16), dim3(16, 16), 0, s>>>(operand_a(p), operand_b(p), out_c(p));
  return launch_status("s0_naive");
}
Status run_s1(const GemmProblem& p, const GemmConfig&, cudaStream_t s) {
  s1_smem<<<tiles_grid(p, 32), dim3(32, 32), 0, s>>>(operand_a(p), operand_b(p), out_c(p));
  return launch_status("s1_smem");
}
Status run_s2(const GemmProblem& p, const GemmConfig&, cudaStream_t s) {
  s2_regtile<<<tiles_grid(p, kTile), kThreads, 0, s>>>(operand_a(p), operand_b(p), out_c(p));
  return launch_status("s2_regtile");
}
template <bool kDbuf, bool kWarp>
Status run_s3_5(const GemmProblem& p, const GemmConfig&, cudaStream_t s) {
  s3_to_s5<kDbuf, kWarp><<<tiles_grid(p, kTile), kThreads, 0, s>>>(operand_a(p), operand_b(p), out_c(p));
  return launch_status("s3..s5");
}

}  // namespace

void register_sgemm_variants(std::vector<GemmVariant>& out) {
  const GemmConfig big{128, 128, 8, 1};
  out.push_back({"s0_naive", "one thread per C element", f32_only, run_s0, {GemmConfig{16, 16, 1, 1}}, true});
  out.push_back({"s1_smem", "32x32 tiles of A and B in shared memory", f32_only, run_s1, {GemmConfig{32, 32, 32, 1}}, true});
  out.push_back({"s2_regtile", "128x128 block, 8x8 outputs per thread in registers", f32_only, run_s2, {big}, true});
  out.push_back({"s3_vec", "+ float4 loads, A transposed in shared memory", f32_only, run_s3_5<false, false>, {big}, true});
  out.push_back({"s4_dbuf", "+ double buffering with register prefetch", f32_only, run_s3_5<true, false>, {big}, true});
  out.push_back({"s5_warptile", "+ 4x8-lane warps over strided 4x4 sub-tiles (no bank conflicts)", f32_only,
                 run_s3_5<true, true>, {GemmConfig{128, 128, 8, 2}}, false});
}

}  // namespace lamina::kernels

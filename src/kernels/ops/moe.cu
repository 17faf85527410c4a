// A mixture of experts' routing and the weighted sum of its experts' outputs, on the device, so
// that a decode step's experts need no host round trip (the expert matmuls read the ids:
// kernels/gemv/gemv_experts.cu) and the step can be recorded as a graph.
#include "kernels/common/launch_status.h"
#include "kernels/common/pdl.cuh"
#include "kernels/ops/ops.h"
#include "kernels/ops/moe_router.h"
#include "kernels/ops/moe_slots.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>

namespace lamina::kernels {
namespace {

constexpr int kRoutePer = kMoeRouteMaxExperts / 32;  // logits a lane

// (value, index) order of the top-k: the larger value first, the lower index among equal ones.
__device__ __forceinline__ bool before(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

// One warp per row of logits [rows][n_expert]; out [rows][2k]: the ids (int32 bits), ascending,
// then their weights. Expert e = lane + 32 i sits in register slot i of its lane.
__global__ void moe_route_kernel(const float* __restrict__ logits, int64_t rows, int n_expert, int k, bool renorm,
                                 float* __restrict__ out) {
  pdl_enter();
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const float* l = logits + row * n_expert;
  float v[kRoutePer];
  float mx = -FLT_MAX;
#pragma unroll
  for (int i = 0; i < kRoutePer; ++i) {
    const int e = lane + 32 * i;
    v[i] = e < n_expert ? l[e] : -FLT_MAX;
    mx = fmaxf(mx, v[i]);
  }
  for (int o = 16; o; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
  // Softmax as the host computes it: float exponentials, their sum in f64, each divided in f64.
  double sum = 0;
#pragma unroll
  for (int i = 0; i < kRoutePer; ++i) {
    v[i] = lane + 32 * i < n_expert ? expf(v[i] - mx) : -3.f;  // (-3: no such expert, below all)
    if (v[i] >= 0.f) sum += v[i];
  }
  for (int o = 16; o; o /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
  // Probabilities; a NaN one (NaN logits) becomes -1: below every probability but above a taken
  // expert (-2), so that the k picks are always k distinct experts of the row.
#pragma unroll
  for (int i = 0; i < kRoutePer; ++i) {
    if (v[i] >= 0.f) v[i] = float(double(v[i]) / sum);
    if (isnan(v[i])) v[i] = -1.f;
  }
  // k rounds of a warp argmax over the experts not yet taken; lane j keeps round j's pick.
  int my_id = n_expert;
  float my_p = 0.f, chosen = 0.f;
  for (int j = 0; j < k; ++j) {
    float best = -4.f;
    int bi = n_expert;
#pragma unroll
    for (int i = 0; i < kRoutePer; ++i)
      if (before(v[i], lane + 32 * i, best, bi)) best = v[i], bi = lane + 32 * i;
    for (int o = 16; o; o /= 2) {
      const float ob = __shfl_xor_sync(0xFFFFFFFFu, best, o);
      const int oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
      if (before(ob, oi, best, bi)) best = ob, bi = oi;
    }
#pragma unroll
    for (int i = 0; i < kRoutePer; ++i)
      if (lane + 32 * i == bi) v[i] = -2.f;  // taken (a register slot by a run-time index would go to local memory)
    if (lane == j) my_id = bi, my_p = best;
    chosen += best;  // (in order of probability, as the host sums them)
  }
  if (!renorm) chosen = 1.f;
  // Lane j < k writes its pick at its rank among the picks' ids (ids are distinct).
  int rank = 0;
  for (int j = 0; j < k; ++j) rank += __shfl_sync(0xFFFFFFFFu, my_id, j) < my_id;
  if (lane < k) {
    float* o = out + row * 2 * k;
    reinterpret_cast<int32_t*>(o)[rank] = my_id;
    o[k + rank] = my_p / chosen;
  }
}

// y[t][c] += w_tj d[row of pair t k + j][c] for j = 0..k-1 in order, each an fmaf
// (add_rows_scaled's bits, one pick at a time); the pair's row is the pair itself, or
// pair_slot[pair] (d's rows in moe_sort's slot order); blockIdx.y the row t.
__global__ void add_routed_kernel(float* __restrict__ y, const float* __restrict__ d, int64_t cols,
                                  const float* __restrict__ route, int k, const int32_t* __restrict__ pair_slot) {
  pdl_enter();
  const int64_t t = blockIdx.y;
  const float* w = route + t * 2 * k + k;
  float* yt = y + t * cols;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    float v = yt[c];
    for (int j = 0; j < k; ++j) {
      const int64_t pair = t * k + j, row = pair_slot ? pair_slot[pair] : pair;
      v = __fmaf_rn(w[j], d[row * cols + c], v);
    }
    yt[c] = v;
  }
}

// pair_slot[slot_pair[s]] = s: where each pair's row lies in moe_sort's order.
__global__ void pair_slots_kernel(const int32_t* __restrict__ slot_pair, int64_t pairs, int32_t* __restrict__ pair_slot) {
  pdl_enter();
  for (int64_t s = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; s < pairs; s += int64_t(gridDim.x) * blockDim.x)
    pair_slot[slot_pair[s]] = int32_t(s);
}

// A mixture of experts' pairs (token t, pick j: pair t k + j) sorted by expert for the grouped
// GEMM (gemm_experts): slot_pair[s] is the pair in slot s, the slots expert 0's pairs first, then
// expert 1's, each expert's in pair order (a stable counting sort: the order does not depend on
// timing); tiles [count][4] = {expert, first slot, end slot, 0}, each expert's slots cut every
// tile_rows. One block of kSortThreads: a count an expert (shared atomics), their exclusive sums
// (one thread: n_expert <= 256), then the pairs kSortThreads at a time, each warp's equal ids
// found by __match_any_sync and the warps before it counted per expert in shared memory.
constexpr int kSortThreads = 1024, kSortWarps = kSortThreads / 32;
__global__ void __launch_bounds__(kSortThreads) moe_sort_kernel(const float* __restrict__ route, int64_t pairs, int k,
                                                               int n_expert, int tile_rows, int32_t* __restrict__ slot_pair,
                                                               int32_t* __restrict__ tiles, int32_t* __restrict__ count) {
  pdl_enter();
  __shared__ int cnt[kMoeRouteMaxExperts], base[kMoeRouteMaxExperts], first_tile[kMoeRouteMaxExperts];
  __shared__ int warp_cnt[kSortWarps][kMoeRouteMaxExperts];
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  auto id_of = [&](int64_t p) {  // the pair's expert (the route's ids are int32 bits), -1 for none
    const int e = __float_as_int(route[(p / k) * 2 * k + p % k]);
    return e >= 0 && e < n_expert ? e : -1;
  };
  for (int e = tid; e < n_expert; e += kSortThreads) cnt[e] = 0;
  __syncthreads();
  for (int64_t p = tid; p < pairs; p += kSortThreads)
    if (const int e = id_of(p); e >= 0) atomicAdd(&cnt[e], 1);
  __syncthreads();
  if (tid == 0) {
    int slots = 0, t = 0;
    for (int e = 0; e < n_expert; ++e) {
      base[e] = slots, first_tile[e] = t;
      slots += cnt[e], t += (cnt[e] + tile_rows - 1) / tile_rows;
    }
    *count = t;
  }
  __syncthreads();
  for (int e = tid; e < n_expert; e += kSortThreads)
    for (int i = 0; i * tile_rows < cnt[e]; ++i) {
      int32_t* tile = tiles + 4 * (first_tile[e] + i);
      tile[0] = e, tile[1] = base[e] + i * tile_rows, tile[2] = base[e] + min(cnt[e], (i + 1) * tile_rows), tile[3] = 0;
    }
  for (int64_t p0 = 0; p0 < pairs; p0 += kSortThreads) {
    const int64_t p = p0 + tid;
    const int e = p < pairs ? id_of(p) : -1;
    for (int i = lane; i < n_expert; i += 32) warp_cnt[warp][i] = 0;
    __syncwarp();
    const unsigned same = __match_any_sync(0xFFFFFFFFu, e);
    const int rank = __popc(same & ((1u << lane) - 1));
    if (e >= 0 && rank == 0) warp_cnt[warp][e] = __popc(same);
    __syncthreads();
    if (e >= 0) {
      int before = 0;
      for (int w = 0; w < warp; ++w) before += warp_cnt[w][e];
      slot_pair[base[e] + before + rank] = int32_t(p);
    }
    __syncthreads();
    for (int i = tid; i < n_expert; i += kSortThreads) {
      int add = 0;
      for (int w = 0; w < kSortWarps; ++w) add += warp_cnt[w][i];
      base[i] += add;
    }
    __syncthreads();
  }
}

// The rows the grouped GEMM reads and writes, moved between pair order and slot order. A thread
// moves kRowVec consecutive columns of a row (two 16-byte loads in flight), a block 256 threads of
// them (2,048 columns: Qwen3-30B-A3B's hidden row in one block row), blockIdx.y striding the slots:
// one element a thread made 32 blocks a slot of a 512-token prompt's 4,096 pairs, and the blocks'
// scheduling, not the bytes, set the time. cols % kRowVec == 0 and 16-byte aligned rows (the
// launchers check; otherwise a thread moves one element).
constexpr int kRowVec = 8, kRowThreads = 256;

// out[s][c] = x[slot_pair[s] / share][c] as f16 (the grouped GEMM's A rows).
template <bool kVec>
__global__ void gather_rows_f16_kernel(const float* __restrict__ x, int64_t share, const int32_t* __restrict__ slot_pair,
                                       int64_t slots, int64_t cols, __half* __restrict__ out) {
  pdl_enter();
  constexpr int kPer = kVec ? kRowVec : 1;
  const int64_t c = (int64_t(blockIdx.x) * kRowThreads + threadIdx.x) * kPer;
  if (c >= cols) return;
  for (int64_t s = blockIdx.y; s < slots; s += gridDim.y) {
    const float* xr = x + int64_t(slot_pair[s]) / share * cols + c;
    __half* o = out + s * cols + c;
    if constexpr (kVec) {
      const float4 a = reinterpret_cast<const float4*>(xr)[0], b = reinterpret_cast<const float4*>(xr)[1];
      const __half2 h[4] = {__floats2half2_rn(a.x, a.y), __floats2half2_rn(a.z, a.w), __floats2half2_rn(b.x, b.y),
                            __floats2half2_rn(b.z, b.w)};
      *reinterpret_cast<uint4*>(o) = *reinterpret_cast<const uint4*>(h);
    } else {
      *o = __float2half_rn(*xr);
    }
  }
}

// dst[slot_pair[s]][c] = src[s][c]: the grouped GEMM's rows back in pair order.
template <bool kVec>
__global__ void scatter_rows_kernel(const float* __restrict__ src, const int32_t* __restrict__ slot_pair, int64_t slots,
                                    int64_t cols, float* __restrict__ dst) {
  pdl_enter();
  constexpr int kPer = kVec ? kRowVec : 1;
  const int64_t c = (int64_t(blockIdx.x) * kRowThreads + threadIdx.x) * kPer;
  if (c >= cols) return;
  for (int64_t s = blockIdx.y; s < slots; s += gridDim.y) {
    const float* i = src + s * cols + c;
    float* o = dst + int64_t(slot_pair[s]) * cols + c;
    if constexpr (kVec) {
      const float4 a = reinterpret_cast<const float4*>(i)[0], b = reinterpret_cast<const float4*>(i)[1];
      reinterpret_cast<float4*>(o)[0] = a, reinterpret_cast<float4*>(o)[1] = b;
    } else {
      *o = *i;
    }
  }
}

// A mixture of experts' router for many rows: out [rows][n] = x [rows][k] W [n][k]^T in f32, n
// <= 256 (the experts). The SGEMM rungs' 128 x 128 tiles made 4 blocks of a 512-row prompt's 128
// columns (251 µs of Qwen3-30B-A3B's shape a layer), the GEMVs a warp a column. Here: tiles of
// kRtM rows x kRtN columns, 256 threads of 4 rows x 4 columns each, K in chunks of kRtK through
// shared memory ([kk][row] and [kk][col], a warp storing 32 consecutive words), and K split over
// blockIdx.z into f32 planes [split][rows][n] that router_sum adds in split order (the same bits
// whatever the timing).
constexpr int kRtM = 64, kRtN = 64, kRtK = 32, kRtThreads = 256;
constexpr int kRtXVec = kRtM * kRtK / 4 / kRtThreads, kRtWVec = kRtN * kRtK / 4 / kRtThreads;  // float4s a thread
// Thread tid's float4 i of a chunk: x row (tid + kRtThreads i) % kRtM at k offset 4 ((tid +
// kRtThreads i) / kRtM); W column (tid + kRtThreads i) % kRtN likewise (a warp: 32 rows or columns
// at one offset).
struct RouterChunk {
  float4 x[kRtXVec], w[kRtWVec];
};
__device__ __forceinline__ RouterChunk router_load(const float* __restrict__ x, const float* __restrict__ w, int64_t rows, int n,
                                                   int64_t k, int64_t m0, int n0, int64_t kb, int64_t k1, int tid) {
  RouterChunk c;
#pragma unroll
  for (int i = 0; i < kRtXVec; ++i) {
    const int v = tid + kRtThreads * i, r = v % kRtM, kk = (v / kRtM) * 4;
    c.x[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (m0 + r < rows && kb + kk < k1) c.x[i] = *reinterpret_cast<const float4*>(x + (m0 + r) * k + kb + kk);
  }
#pragma unroll
  for (int i = 0; i < kRtWVec; ++i) {
    const int v = tid + kRtThreads * i, col = v % kRtN, kk = (v / kRtN) * 4;
    c.w[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (n0 + col < n && kb + kk < k1) c.w[i] = *reinterpret_cast<const float4*>(w + int64_t(n0 + col) * k + kb + kk);
  }
  return c;
}

// Each of the 256 threads owns 4 rows x 4 columns of a 64 x 64 tile: 2 shared float4 loads for 16
// FMAs (the 32 x 64 tile's 2 x 4 a thread: 2 for 8, bound by the shared memory's pipe; 4 x 8 with
// 64 threads: too few warps). Each chunk's loads are issued into registers before the chunk before
// it is multiplied.
__global__ void __launch_bounds__(kRtThreads) router_matmul_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                                   int64_t rows, int n, int64_t k, int64_t k_per,
                                                                   float* __restrict__ out) {
  pdl_enter();
  __shared__ __align__(16) float xs[kRtK][kRtM];
  __shared__ __align__(16) float ws[kRtK][kRtN];
  const int tid = int(threadIdx.x);
  const int64_t m0 = int64_t(blockIdx.x) * kRtM, k0 = int64_t(blockIdx.z) * k_per, k1 = min(k, k0 + k_per);
  const int n0 = int(blockIdx.y) * kRtN;
  const int tr = (tid / 16) * 4, tc = (tid % 16) * 4;  // this thread's rows tr .. tr + 3 and columns tc .. tc + 3
  float acc[4][4] = {};
  RouterChunk next = router_load(x, w, rows, n, k, m0, n0, k0, k1, tid);
  for (int64_t kb = k0; kb < k1; kb += kRtK) {
#pragma unroll
    for (int i = 0; i < kRtXVec; ++i) {
      const int v = tid + kRtThreads * i, r = v % kRtM, kk = (v / kRtM) * 4;
      xs[kk][r] = next.x[i].x, xs[kk + 1][r] = next.x[i].y, xs[kk + 2][r] = next.x[i].z, xs[kk + 3][r] = next.x[i].w;
    }
#pragma unroll
    for (int i = 0; i < kRtWVec; ++i) {
      const int v = tid + kRtThreads * i, col = v % kRtN, kk = (v / kRtN) * 4;
      ws[kk][col] = next.w[i].x, ws[kk + 1][col] = next.w[i].y, ws[kk + 2][col] = next.w[i].z, ws[kk + 3][col] = next.w[i].w;
    }
    __syncthreads();
    if (kb + kRtK < k1) next = router_load(x, w, rows, n, k, m0, n0, kb + kRtK, k1, tid);
#pragma unroll
    for (int kk = 0; kk < kRtK; ++kk) {
      const float4 a = *reinterpret_cast<const float4*>(&xs[kk][tr]);
      const float4 b = *reinterpret_cast<const float4*>(&ws[kk][tc]);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
  float* o = out + int64_t(blockIdx.z) * rows * n;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (m0 + tr + i < rows && n0 + tc + j < n) o[(m0 + tr + i) * n + n0 + tc + j] = acc[i][j];
}

// out[i] = sum over s of parts[s][i], s = 0 .. splits - 1 in order.
__global__ void router_sum_kernel(const float* __restrict__ parts, int64_t count, int splits, float* __restrict__ out) {
  pdl_enter();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    float v = parts[i];
    for (int s = 1; s < splits; ++s) v += parts[int64_t(s) * count + i];
    out[i] = v;
  }
}

}  // namespace

Status moe_route(const float* logits, int64_t rows, int n_expert, int k, bool renorm, float* out, cudaStream_t s) {
  if (!logits || !out || rows < 0 || n_expert < 1 || n_expert > kMoeRouteMaxExperts || k < 1 || k > kMoeRouteMaxPicks || k > n_expert)
    return Status::error("moe_route: bad arguments (1 <= k <= 32, k <= n_expert <= 256)");
  constexpr int kWarps = 4;
  if (rows) launch_pdl(moe_route_kernel, unsigned((rows + kWarps - 1) / kWarps), kWarps * 32, 0, s, logits, rows, n_expert, k, renorm, out);
  return launch_status("moe_route");
}

Status add_routed(float* y, const float* d, int64_t rows, int64_t cols, const float* route, int k, cudaStream_t s) {
  if (!y || !d || !route || rows < 1 || rows > 65535 || cols <= 0 || k < 1) return Status::error("add_routed: bad arguments");
  constexpr int kThreads = 256;
  launch_pdl(add_routed_kernel, dim3(unsigned((cols + kThreads - 1) / kThreads), unsigned(rows)), dim3(kThreads), 0, s, y, d, cols,
             route, k, static_cast<const int32_t*>(nullptr));
  return launch_status("add_routed");
}

Status moe_pair_slots(const int32_t* slot_pair, int64_t pairs, int32_t* pair_slot, cudaStream_t s) {
  if (!slot_pair || !pair_slot || pairs < 1) return Status::error("moe_pair_slots: bad arguments");
  launch_pdl(pair_slots_kernel, dim3(unsigned(std::min<int64_t>((pairs + 255) / 256, 1024))), dim3(256), 0, s, slot_pair, pairs,
             pair_slot);
  return launch_status("moe_pair_slots");
}

Status add_routed_slots(float* y, const float* d, int64_t rows, int64_t cols, const float* route, int k, const int32_t* pair_slot,
                        cudaStream_t s) {
  if (!y || !d || !route || !pair_slot || rows < 1 || rows > 65535 || cols <= 0 || k < 1)
    return Status::error("add_routed_slots: bad arguments");
  constexpr int kThreads = 256;
  launch_pdl(add_routed_kernel, dim3(unsigned((cols + kThreads - 1) / kThreads), unsigned(rows)), dim3(kThreads), 0, s, y, d, cols,
             route, k, pair_slot);
  return launch_status("add_routed_slots");
}

Status moe_sort(const float* route, int64_t rows, int k, int n_expert, int tile_rows, int32_t* slot_pair, int32_t* tiles,
                int32_t* count, cudaStream_t s) {
  if (!route || !slot_pair || !tiles || !count || rows < 1 || k < 1 || n_expert < 1 || n_expert > kMoeRouteMaxExperts ||
      tile_rows < 1 || rows * k > INT32_MAX)
    return Status::error("moe_sort: bad arguments");
  launch_pdl(moe_sort_kernel, dim3(1), dim3(kSortThreads), 0, s, route, rows * k, k, n_expert, tile_rows, slot_pair, tiles, count);
  return launch_status("moe_sort");
}

// The rows kernels' grid: column blocks of kRowThreads threads (kRowVec columns each when vec),
// and up to 2,048 block rows striding the slots.
static dim3 rows_grid(int64_t slots, int64_t cols, bool vec) {
  const int64_t per_block = int64_t(kRowThreads) * (vec ? kRowVec : 1);
  return dim3(unsigned((cols + per_block - 1) / per_block), unsigned(std::min<int64_t>(slots, 2048)));
}

static bool rows_vec(const void* a, const void* b, int64_t cols) {
  return cols % kRowVec == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
}

Status gather_rows_f16(const float* x, int64_t share, const int32_t* slot_pair, int64_t slots, int64_t cols, void* out,
                       cudaStream_t s) {
  if (!x || !slot_pair || !out || share < 1 || slots < 1 || cols < 1) return Status::error("gather_rows_f16: bad arguments");
  const bool vec = rows_vec(x, out, cols);
  launch_pdl(vec ? gather_rows_f16_kernel<true> : gather_rows_f16_kernel<false>, rows_grid(slots, cols, vec), dim3(kRowThreads), 0,
             s, x, share, slot_pair, slots, cols, static_cast<__half*>(out));
  return launch_status("gather_rows_f16");
}

Status scatter_rows(const float* src, const int32_t* slot_pair, int64_t slots, int64_t cols, float* dst, cudaStream_t s) {
  if (!src || !slot_pair || !dst || slots < 1 || cols < 1) return Status::error("scatter_rows: bad arguments");
  const bool vec = rows_vec(src, dst, cols);
  launch_pdl(vec ? scatter_rows_kernel<true> : scatter_rows_kernel<false>, rows_grid(slots, cols, vec), dim3(kRowThreads), 0, s,
             src, slot_pair, slots, cols, dst);
  return launch_status("scatter_rows");
}

int router_matmul_splits(int64_t rows, int n, int64_t k, int sms) {
  const int64_t tiles = ((rows + kRtM - 1) / kRtM) * ((n + kRtN - 1) / kRtN);
  // Blocks for 4x the SMs, a chunk each at least (a 64-row step of Qwen3-30B-A3B's router: 2
  // tiles, 64 splits of 32; a 512-token prompt: 16 tiles, 32 splits of 64).
  const int64_t want = (4 * int64_t(sms) + tiles - 1) / tiles, most = std::max<int64_t>(1, k / kRtK);
  return int(std::clamp<int64_t>(want, 1, most));
}

Status router_matmul(const float* x, int64_t rows, int64_t k, const float* w, int n, float* out, float* parts, int splits,
                     cudaStream_t s) {
  if (!x || !w || !out || rows < 1 || k < 4 || k % 4 || n < 1 || n > kMoeRouteMaxExperts || splits < 1 || (splits > 1 && !parts) ||
      reinterpret_cast<uintptr_t>(x) % 16 || reinterpret_cast<uintptr_t>(w) % 16)
    return Status::error("router_matmul: bad arguments (k a multiple of 4, n <= 256, 16-byte aligned rows)");
  // Whole chunks a split, so that no chunk straddles two.
  const int64_t k_per = ((k + splits - 1) / splits + kRtK - 1) / kRtK * kRtK;
  const int used = int((k + k_per - 1) / k_per);
  const dim3 grid(unsigned((rows + kRtM - 1) / kRtM), unsigned((n + kRtN - 1) / kRtN), unsigned(used));
  launch_pdl(router_matmul_kernel, grid, dim3(kRtThreads), 0, s, x, w, rows, n, k, k_per, used > 1 ? parts : out);
  if (Status st = launch_status("router_matmul"); !st || used == 1) return st;
  const int64_t count = rows * int64_t(n);
  launch_pdl(router_sum_kernel, dim3(unsigned(std::min<int64_t>((count + 255) / 256, 1024))), dim3(256), 0, s,
             static_cast<const float*>(parts), count, used, out);
  return launch_status("router_sum");
}

}  // namespace lamina::kernels

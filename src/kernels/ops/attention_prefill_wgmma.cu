// Prompt attention rungs v3_wgmma and v4_overlap (Hopper): flash-attention with both products on
// wgmma. One kernel; the consumer warpgroups' loop is what differs (consume_serial,
// consume_overlapped).
//
// v3_wgmma changes against v2_pipelined (mma.sync, 8 warps, 128 queries, 64-key tiles by cp.async):
// - S = Q K^T and O += P V are warpgroup MMAs (m64n128k16 and m64nHDk16). Q (scaled, rounded to
//   f16) is written once into shared memory in the swizzled K-major layout TMA would give; P is
//   the softmax's registers rounded to f16 (A from registers); K and V are read straight from
//   shared memory through matrix descriptors, so no thread loads a B fragment (v2's ldmatrix per
//   16 x 16 of K and V are gone). (Q's fragments kept in registers as the A of every tile's
//   Q K^T came back changed after the first tile at head_dim 128: wrong scores from the second
//   tile on. In shared memory they also free 32 registers a thread.)
// - K and V tiles of 128 keys arrive by TMA (a 2-D tensor map over the cache [n_ctx][kvd], one
//   box of 128 keys x 64 d per half of the head, 128-byte swizzle), two stages deep, issued by
//   one thread of a producer warpgroup whose registers go to the consumers (setmaxnreg 40 /
//   232). K is the
//   K-major B of Q K^T; V, [key][d] with d contiguous, is the MN-major B of P V (transposed
//   descriptor), so neither is rearranged.
// - Two consumer warpgroups of 64 query rows share each tile: while one runs its softmax the
//   other's MMAs can issue.
// v4_overlap changes against v3_wgmma: a warpgroup issues tile i's S = Q K^T before tile i - 1's
// P V and runs tile i's softmax while P V is on the tensor cores (the rescale of O waits for it),
// and the two warpgroups take turns to issue (named barriers), so that one's softmax runs beside
// the other's products; in v3 both often reach their softmax together (the shared stages keep them
// in step) and the tensor cores wait. It holds two stages at once, so it keeps three.
// A paged cache (the batching engine's prompt chunks): position j's row is the slot
// table[j / block_tokens] * block_tokens + j % block_tokens, so a 128-key tile arrives as 128 /
// block_tokens boxes of block_tokens keys each (block_tokens a multiple of 8, the swizzle's
// period, so the boxes stacked make the one box's layout), or one box inside a block of a multiple
// of 128; boxes wholly past the last key are not loaded (a table has no entry there).
// Unwritten cache rows: a tile may reach past the block's last key (n_keys) into positions no
// prompt wrote. Their scores are masked (replaced), but a real row's P V multiplies their V rows
// by 0, and 0 x NaN is NaN; so the producer warp zeroes those V rows of the last tile in shared
// memory before it signals the tile's V to the consumers. (Rows past `rows`, padding, may still
// come out NaN: they are never stored.)
// Needs an sm_90a build (wgmma, TMA, setmaxnreg): compiled for another architecture the kernel
// traps rather than leave the output unwritten.
//
// Layouts: q [rows][n_head][HD] f32; caches [n_ctx][n_head_kv][HD] f16 (rows: positions, or a
// paged cache's slots); out (and out16) like q.
// Shared memory: per stage K then V, each HD / 64 boxes of [128 keys][64 d] (16 KiB); then per
// consumer warpgroup its Q, HD / 64 boxes of [64 rows][64 d] (8 KiB); then the barriers.
#include "kernels/common/launch_status.h"
#include "kernels/common/tma.cuh"
#include "kernels/common/wgmma_ops.cuh"
#include "kernels/common/wgmma_rs_mn.cuh"
#include "kernels/ops/attention_prefill.cuh"

#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

namespace lamina::kernels {
namespace wgmma_gemm {
bool hopper();  // the device is sm_90 (hgemm_wgmma.cu)
}
namespace prefill {
namespace {

constexpr int kTileQ = 128;          // query rows per block: two consumer warpgroups of 64
constexpr int kTileN = 128;          // keys per K / V tile
constexpr int kBoxD = 64;            // d per TMA box: one 128-byte swizzled row per key
constexpr int kBoxBytes = kTileN * kBoxD * 2;
constexpr int kQBoxBytes = 64 * kBoxD * 2;
// K / V stages: v3 has a tile's compute to hide the next load behind (3 stages measured the same);
// v4 holds two stages at once (tile j's K, tile j - 1's V), so 2 stages left it waiting on loads.
constexpr int kStagesV3 = 2, kStagesV4 = 3;
constexpr int kWg = 128, kThreads = 3 * kWg;  // producer warpgroup, then two consumers
constexpr int kProducerRegs = 40, kConsumerRegs = 232;  // 128 x 40 + 256 x 232 = 384 x 168
constexpr int kQBarrier = 1, kTurn = 3;  // named barriers: kQBarrier + c, kTurn + c (warpgroup c's)

// Keys per TMA box: the whole 128-key tile from a contiguous cache; from a paged one, a block's
// keys (or 128 of a longer block's).
__host__ __device__ constexpr int box_keys_of(bool paged, int block_tokens) {
  return paged && block_tokens < kTileN ? block_tokens : kTileN;
}

template <int HD>
constexpr size_t kStageBytes = size_t(2) * (HD / kBoxD) * kBoxBytes;  // K and V
template <int HD>
constexpr size_t kQBytes = size_t(2) * (HD / kBoxD) * kQBoxBytes;  // both consumer warpgroups
template <int HD, int kStages>
constexpr size_t kSmemBytes = kStages * kStageBytes<HD> + kQBytes<HD> + (3 * kStages + 1) * sizeof(uint64_t) + 1024;  // + alignment

// Descriptor of an MN-major B tile written by TMA with 128-byte swizzle: 64 N elements per
// 128-byte row, successive K rows 128 bytes apart, 8-row groups 1024 bytes apart (stride byte
// offset), the next 64 N elements `lbo` bytes on (leading byte offset: the next box).
__device__ __forceinline__ uint64_t desc_mn_major_sw128(const void* tile, uint32_t lbo) {
  const uint64_t addr = tma::smem_u32(tile);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}

// Pins registers that a wgmma reads or writes at this point of the instruction stream: the
// compiler sees the wgmma and its fence and wait as separate asm statements, and may otherwise
// move plain arithmetic on them across (the softmax's rescale of O after the fence, a read of S
// before the wait).
template <int N>
__device__ __forceinline__ void pin(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void pin(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// The warpgroup's 64 query rows from `first` (q: [rows][n_head][HD] f32; rows past `rows` are
// zeros), scaled and rounded to f16, into HD / 64 boxes of [64][64] with the 128-byte swizzle of
// a TMA tile: element (r, d) of box d / 64 at byte r * 128 + 16 ((d % 64 / 8) ^ (r % 8)) + 2 (d % 8).
// Every load is issued before the first store, so a block start waits for one trip to memory, not
// one per 8 elements (a loop of load, convert, store per chunk waited kIters times: ncu put 7 % of
// the 8k-token kernel's warp samples on it).
template <int HD, class Box>
__device__ __forceinline__ void write_q(const float* __restrict__ q, int rows, int64_t qd, int h, int first, float qscale,
                                        Box box) {
  constexpr int kIters = 64 * HD / 8 / kWg;  // 8-element chunks per thread
  static_assert(64 * HD / 8 % kWg == 0);
  float4 v[kIters][2];
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int e = int(threadIdx.x) % kWg + it * kWg, r = e / (HD / 8), d0 = e % (HD / 8) * 8;
    v[it][0] = v[it][1] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (first + r < rows) {
      const float* src = q + int64_t(first + r) * qd + int64_t(h) * HD + d0;
      v[it][0] = *reinterpret_cast<const float4*>(src), v[it][1] = *reinterpret_cast<const float4*>(src + 4);
    }
  }
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int e = int(threadIdx.x) % kWg + it * kWg, r = e / (HD / 8), d0 = e % (HD / 8) * 8;
    const float4 lo = v[it][0], hi = v[it][1];
    const uint4 u = make_uint4(mma::pack2<__half>(lo.x * qscale, lo.y * qscale), mma::pack2<__half>(lo.z * qscale, lo.w * qscale),
                               mma::pack2<__half>(hi.x * qscale, hi.y * qscale), mma::pack2<__half>(hi.z * qscale, hi.w * qscale));
    *reinterpret_cast<uint4*>(box(d0 / kBoxD) + r * 128 + ((d0 % kBoxD / 8) ^ (r % 8)) * 16) = u;
  }
}

// What a consumer warpgroup needs of the block: its smem pieces, barriers and rows.
template <int HD, int kStages>
struct Consumer {
  static constexpr int kBoxes = HD / kBoxD;
  uint8_t* smem;
  uint64_t *full_k, *full_v, *empty;
  int c, lane, r0, p0, n_keys, n_tiles;
  int tiles;  // the tiles this warpgroup multiplies (0 .. tiles - 1); the rest it only waits out

  __device__ uint8_t* k_box(int st, int b) const { return smem + st * kStageBytes<HD> + b * kBoxBytes; }
  __device__ uint8_t* v_box(int st, int b) const { return smem + st * kStageBytes<HD> + (kBoxes + b) * kBoxBytes; }
  __device__ uint8_t* q_box(int b) const { return smem + kStages * kStageBytes<HD> + (c * kBoxes + b) * kQBoxBytes; }
  static __device__ int stage(int i) { return i % kStages; }
  static __device__ uint32_t phase(int i) { return uint32_t(i / kStages) & 1u; }

  // S = Q K^T of tile i (issued and committed; not waited for).
  __device__ void issue_s(float (&s_acc)[kTileN / 2], int i) const {
    tma::mbar_wait(&full_k[stage(i)], phase(i));
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk)  // 16 d per step: 32 bytes into a box's 128-byte rows
      wgmma::wgmma_m64k16<kTileN, __half>(s_acc, tma::desc_k_major_sw128(q_box(kk / 4) + (kk % 4) * 32),
                                          tma::desc_k_major_sw128(k_box(stage(i), kk / 4) + (kk % 4) * 32), kk > 0);
    wgmma::commit();
  }
  // O += P V of tile i (issued and committed; not waited for).
  __device__ void issue_pv(float (&o_acc)[HD / 2], uint32_t (&pa)[kTileN / 16][4], int i) const {
    tma::mbar_wait(&full_v[stage(i)], phase(i));
    pin(o_acc);
    pin(pa);
    wgmma::fence();
#pragma unroll
    for (int kc = 0; kc < kTileN / 16; ++kc)  // 16 keys per step: 16 rows of 128 bytes
      wgmma::wgmma_rs_mn<HD>(o_acc, pa[kc], desc_mn_major_sw128(v_box(stage(i), 0) + kc * 16 * 128, kBoxBytes), 1);
    wgmma::commit();
  }
  // Tile i's stage is read: one arrival per warp.
  __device__ void release(int i) const {
    __syncwarp();
    if (lane == 0) tma::mbar_arrive(&empty[stage(i)]);
  }
  // A tile this warpgroup does not multiply: waited for (so that its arrival counts toward the
  // right phase) and released.
  __device__ void wait_out(int i) const {
    tma::mbar_wait(&full_k[stage(i)], phase(i));
    tma::mbar_wait(&full_v[stage(i)], phase(i));
    release(i);
  }
};

// v3: per tile, S, its softmax, then P V, each waited for before the next.
template <int HD, int kStages>
__device__ __forceinline__ void consume_serial(const Consumer<HD, kStages>& w, float (&o_acc)[HD / 2], float (&m)[2], float (&l)[2]) {
  auto& o = reinterpret_cast<float (&)[HD / 8][4]>(o_acc);
  uint32_t pa[kTileN / 16][4];
  for (int i = 0; i < w.tiles; ++i) {
    float s_acc[kTileN / 2];
    w.issue_s(s_acc, i);
    wgmma::wait<0>();
    pin(s_acc);
    auto& s = reinterpret_cast<float (&)[kTileN / 8][4]>(s_acc);
    mask_tile<kTileN>(s, i * kTileN, w.p0 + w.r0);
    softmax_step<kTileN, HD>(s, m, l, o);
#pragma unroll
    for (int kc = 0; kc < kTileN / 16; ++kc) p_fragments<kTileN>(s, kc, pa[kc]);
    w.issue_pv(o_acc, pa, i);
    wgmma::wait<0>();
    pin(o_acc);
    pin(pa);
    w.release(i);
  }
}

// v4: the loop in sections, one per tile and one more: section j issues tile j's S and tile
// j - 1's P V back to back, then runs tile j's softmax while they are on the tensor cores (O's
// rescale waits for P V). The two warpgroups take turns to issue (named barriers kTurn + c: a
// warpgroup waits for its turn, issues, passes the turn), so that one's softmax runs while the
// other's products do, instead of both softmaxes at once. Both run n_tiles + 1 sections (empty
// where a warpgroup has no tile), so the turns stay matched; warpgroup 1 does not pass its last.
template <int HD, int kStages>
__device__ __forceinline__ void consume_overlapped(const Consumer<HD, kStages>& w, float (&o_acc)[HD / 2], float (&m)[2],
                                                   float (&l)[2]) {
  auto& o = reinterpret_cast<float (&)[HD / 8][4]>(o_acc);
  uint32_t pa[kTileN / 16][4];
  float s_acc[kTileN / 2], corr[2];
  auto& s = reinterpret_cast<float (&)[kTileN / 8][4]>(s_acc);
  if (w.c == 1) tma::named_barrier_arrive(kTurn, 2 * kWg);  // warpgroup 0 goes first
  const auto take_turn = [&] { tma::named_barrier_sync(kTurn + w.c, 2 * kWg); };
  const auto pass_turn = [&](int j) {
    if (w.c == 0 || j < w.n_tiles) tma::named_barrier_arrive(kTurn + 1 - w.c, 2 * kWg);
  };
  // (Straight-line waits: a wgmma wait under a condition made ptxas serialise every wgmma.)
  int j = 0;
  if (w.tiles > 0) {
    take_turn();  // section 0: S of tile 0
    w.issue_s(s_acc, 0);
    pass_turn(0);
    wgmma::wait<0>();
    pin(s_acc);
    mask_tile<kTileN>(s, 0, w.p0 + w.r0);
    softmax_scores<kTileN>(s, m, l, corr);  // (O is zero: nothing to rescale)
#pragma unroll
    for (int kc = 0; kc < kTileN / 16; ++kc) p_fragments<kTileN>(s, kc, pa[kc]);
    for (j = 1; j < w.tiles; ++j) {  // section j: S of tile j, P V of tile j - 1
      take_turn();
      w.issue_s(s_acc, j);
      w.issue_pv(o_acc, pa, j - 1);
      pass_turn(j);
      wgmma::wait<1>();  // S of tile j (groups complete in order)
      pin(s_acc);
      mask_tile<kTileN>(s, j * kTileN, w.p0 + w.r0);
      softmax_scores<kTileN>(s, m, l, corr);
      wgmma::wait<0>();  // P V of tile j - 1
      pin(o_acc);
      pin(pa);
      w.release(j - 1);
      rescale_o<HD>(o, corr);
#pragma unroll
      for (int kc = 0; kc < kTileN / 16; ++kc) p_fragments<kTileN>(s, kc, pa[kc]);
    }
    take_turn();  // section `tiles`: P V of the last tile
    w.issue_pv(o_acc, pa, w.tiles - 1);
    pass_turn(w.tiles);
    wgmma::wait<0>();
    pin(o_acc);
    pin(pa);
    w.release(w.tiles - 1);
    if (w.tiles < w.n_tiles) w.wait_out(w.tiles);
    j = w.tiles + 1;
  }
  for (; j <= w.n_tiles; ++j) {  // sections with no tile of this warpgroup
    take_turn();
    pass_turn(j);
    if (j < w.n_tiles) w.wait_out(j);
  }
}

template <int HD, bool kOverlap, int kStages>
__global__ void __launch_bounds__(kThreads, 1)
    flash_prefill_wgmma(const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v,
                        const float* __restrict__ q, int rows, const int32_t* __restrict__ pos, AttentionArgs a,
                        float* __restrict__ out, void* __restrict__ out16, bool bf16,
                        const int32_t* __restrict__ table, int block_tokens) {  // table: null where contiguous
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  using W = Consumer<HD, kStages>;
  W w;
  w.smem = tma::align_1024(smem_raw);
  w.full_k = reinterpret_cast<uint64_t*>(w.smem + kStages * kStageBytes<HD> + kQBytes<HD>);
  w.full_v = w.full_k + kStages;
  w.empty = w.full_v + kStages;
  uint64_t* tail_v = w.empty + kStages;  // the last tile's V, before its tail is zeroed
  constexpr int kConsumerWarps = 8;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s)
      tma::mbar_init(&w.full_k[s], 1), tma::mbar_init(&w.full_v[s], 1), tma::mbar_init(&w.empty[s], kConsumerWarps);
    tma::mbar_init(tail_v, 1);
    tma::mbar_fence_init();
  }
  __syncthreads();

  const int h = blockIdx.x, tile = int(gridDim.y - 1 - blockIdx.y);  // the longest (latest) tiles first
  const int kvh = h / (a.n_head / a.n_head_kv);
  w.p0 = pos[0];
  const int q0 = tile * kTileQ, q_hi = min(rows, q0 + kTileQ) - 1;
  w.n_keys = w.p0 + q_hi + 1, w.n_tiles = (w.n_keys + kTileN - 1) / kTileN;
  const int wg = int(threadIdx.x) / kWg;

  if (wg == 0) {  // producer: warp 0 issues every tile's boxes (a lane per box), tile by tile
    tma::setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x >= 32) return;
    const int lane = int(threadIdx.x);
    const int box_keys = box_keys_of(table, block_tokens), n_sub = kTileN / box_keys;
    for (int i = 0; i < w.n_tiles; ++i) {
      const int st = W::stage(i), valid = w.n_keys - i * kTileN;
      const bool tail = valid < kTileN;  // the block's last tile reaches past n_keys
      uint64_t* landed = tail ? tail_v : &w.full_v[st];
      tma::mbar_wait(&w.empty[st], W::phase(i) ^ 1u);
      if (lane == 0) {
        const uint32_t bytes = uint32_t(W::kBoxes * min(n_sub, (valid + box_keys - 1) / box_keys) * box_keys * 128);
        tma::mbar_arrive_expect_tx(&w.full_k[st], bytes);
        tma::mbar_arrive_expect_tx(landed, bytes);
      }
      __syncwarp();  // (the byte counts are set before any box can land)
      for (int e = lane; e < n_sub * W::kBoxes; e += 32) {  // box b of sub-tile `sub`, of K and of V; a lane each
        const int sub = e / W::kBoxes, b = e % W::kBoxes, key = i * kTileN + sub * box_keys;
        if (key >= w.n_keys) continue;
        const int row = table ? table[key / block_tokens] * block_tokens + key % block_tokens : key;
        tma::load_2d(w.k_box(st, b) + sub * box_keys * 128, &map_k, kvh * HD + b * kBoxD, row, &w.full_k[st]);
        tma::load_2d(w.v_box(st, b) + sub * box_keys * 128, &map_v, kvh * HD + b * kBoxD, row, landed);
      }
      if (tail) {  // zero V's rows past n_keys (P is 0 there, but 0 x NaN is NaN), then release V
        tma::mbar_wait(tail_v, 0);
        for (int e = lane; e < (kTileN - valid) * W::kBoxes * 8; e += 32) {
          const int key = valid + e / (W::kBoxes * 8), b = e / 8 % W::kBoxes, chunk = e % 8;
          *reinterpret_cast<uint4*>(w.v_box(st, b) + key * 128 + chunk * 16) = make_uint4(0, 0, 0, 0);
        }
        tma::fence_proxy_async_smem();
        __syncwarp();
        if (lane == 0) tma::mbar_arrive(&w.full_v[st]);
      }
    }
    return;
  }
  tma::setmaxnreg_inc<kConsumerRegs>();
  w.c = wg - 1, w.lane = int(threadIdx.x) % 32;
  const int64_t qd = int64_t(a.n_head) * HD;
  const int wg_first = q0 + 64 * w.c;  // the warpgroup's first row
  w.r0 = wg_first + 16 * ((int(threadIdx.x) / 32) % 4);  // this warp's
  // Tiles up to the warpgroup's last key (none where its rows are all past `rows`).
  w.tiles = wg_first < rows ? (w.p0 + min(rows, wg_first + 64) - 1) / kTileN + 1 : 0;

  write_q<HD>(q, rows, qd, h, wg_first, a.scale * kLog2e, [&](int b) { return w.q_box(b); });
  tma::fence_proxy_async_smem();          // (the generic writes, before wgmma reads them)
  tma::named_barrier_sync(kQBarrier + w.c, kWg);  // the warpgroup's Q is whole
  float o_acc[HD / 2] = {};
  float m[2] = {-1e30f, -1e30f}, l[2] = {0.f, 0.f};
  if constexpr (kOverlap) {
    consume_overlapped(w, o_acc, m, l);
  } else {
    consume_serial(w, o_acc, m, l);
    for (int i = w.tiles; i < w.n_tiles; ++i) w.wait_out(i);
  }
  if (w.r0 < rows) store_rows<HD>(reinterpret_cast<float (&)[HD / 8][4]>(o_acc), l, rows, qd, h, w.r0, out, out16, bf16);
#elif defined(__CUDA_ARCH__)
  __trap();  // (a build without sm_90a's features: an error, not garbage)
#endif
}

template <int HD, bool kOverlap, int kStages>
Status launch(const float* q, int rows, const int32_t* pos, const __half* kc, const __half* vc, const AttentionArgs& a,
              float* out, void* out16, bool bf16, const int32_t* table, int block_tokens, cudaStream_t s) {
  const uint64_t kvd = uint64_t(a.n_head_kv) * HD;
  const uint32_t box_keys = uint32_t(box_keys_of(table, block_tokens));
  CUtensorMap map_k{}, map_v{};
  if (!tma::encode_2d_sw128(&map_k, false, kc, uint64_t(a.n_ctx), kvd, kvd, box_keys, kBoxD) ||
      !tma::encode_2d_sw128(&map_v, false, vc, uint64_t(a.n_ctx), kvd, kvd, box_keys, kBoxD))
    return Status::error("attention_prefill (wgmma): the driver refused the cache's tensor map");
  const size_t smem = kSmemBytes<HD, kStages>;
  const auto kernel = flash_prefill_wgmma<HD, kOverlap, kStages>;
  // (set on every launch: the attribute belongs to the current device, and ranks of a
  // tensor-parallel group launch on several)
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)
    return Status::error("attention_prefill (wgmma): " + std::to_string(smem) + " bytes of shared memory refused");
  const dim3 grid(unsigned(a.n_head), unsigned((rows + kTileQ - 1) / kTileQ));
  kernel<<<grid, kThreads, smem, s>>>(map_k, map_v, q, rows, pos, a, out, out16, bf16, table, block_tokens);
  return launch_status("attention_prefill (wgmma)");
}

}  // namespace

bool wgmma_supported(const AttentionArgs& a, const float* q, const void* k_cache, const void* v_cache) {
  // TMA: 16-byte aligned bases (the cache's rows are n_head_kv x 128 or 256 bytes); write_q reads
  // q as float4 (v2 needs 8 bytes).
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  // (head_dim 64 and 128, no sliding window: the others run v2; the callers have checked
  // attention_prefill_supported)
  return wgmma_gemm::hopper() && a.head_dim <= 128 && a.window == 0 && aligned(q) && aligned(k_cache) && aligned(v_cache);
}

bool wgmma_paged_blocks(int block_tokens) {
  return block_tokens > 0 && block_tokens % 8 == 0 && (kTileN % block_tokens == 0 || block_tokens % kTileN == 0);
}

Status launch_wgmma(const float* q, int rows, const int32_t* pos, const __half* kc, const __half* vc,
                    const AttentionArgs& a, float* out, void* out16, bool bf16, bool overlap, const int32_t* table,
                    int block_tokens, cudaStream_t s) {
  if (a.head_dim == 64)
    return overlap ? launch<64, true, kStagesV4>(q, rows, pos, kc, vc, a, out, out16, bf16, table, block_tokens, s)
                   : launch<64, false, kStagesV3>(q, rows, pos, kc, vc, a, out, out16, bf16, table, block_tokens, s);
  return overlap ? launch<128, true, kStagesV4>(q, rows, pos, kc, vc, a, out, out16, bf16, table, block_tokens, s)
                 : launch<128, false, kStagesV3>(q, rows, pos, kc, vc, a, out, out16, bf16, table, block_tokens, s);
}

}  // namespace prefill
}  // namespace lamina::kernels

// q6k_dp4a: Q6_K with int8 activations and dp4a, on a repacked layout (GGUF's 210-byte blocks
// are not 16-byte aligned). Planes per matrix, made by gemv_repack, the file's 210 bytes per 256:
//   ql [n][k/2] | qh [n][k/4] | scales int8 [n][k/16] | d f16 [n][k/256]
// in Q4_0's order, as q4_K's planes: block j (elements 32 j .. 32 j + 31 of a row) has
//   ql bytes 16 j + e (e < 16): the low 4 bits of its elements e (low nibble) and e + 16 (high);
//   qh words 2 j + h (h = 0: elements 0..15 of the block, 1: 16..31): byte b holds the high 2 bits
//     of the half's elements b, b + 4, b + 8, b + 12 at bits 0, 2, 4, 6, so that the word's field
//     i, shifted to bits 4-5 of each byte, joins ql's word i's nibbles (elements 4 i .. 4 i + 3);
//   scales 2 j, 2 j + 1: those of its halves (GGUF's scale e / 16); d per super-block.
// q = bits - 32. A lane takes a block: its 16 ql bytes, 8 qh bytes and two scales, one x block:
//   d * dx * (sc_lo * (dp4a(q_lo, xq_lo) - 32 sum(xq_lo)) + sc_hi * (... hi)).
// Against GGUF's order (kept by the planes before: a 16-byte ql chunk held two x blocks' runs and
// each 16-byte qh chunk was loaded by two lanes), a lane loads 8 bytes less and meets one x block;
// q_dp4a (gemv_dp4a.cuh) reads the same planes.
#include "format/quant_decode.h"
#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_k23.cuh"
#include "kernels/gemv/gemv_slots.cuh"
#include "kernels/gemv/gemv_x8.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

struct Q6Planes {  // byte offsets of the planes of an n x k matrix
  size_t qh, sc, d;
  __host__ __device__ Q6Planes(int64_t n, int64_t k)
      : qh(size_t(n) * size_t(k) / 2), sc(qh + size_t(n) * size_t(k) / 4), d(sc + size_t(n) * size_t(k) / 16) {}
};

__device__ __forceinline__ int dot16(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, const int4& x) {
  return __dp4a(int(a3), x.w, __dp4a(int(a2), x.z, __dp4a(int(a1), x.y, __dp4a(int(a0), x.x, 0))));
}

// One step of a warp: blocks j0 + u*32 + lane (u < kUnroll) of kRows rows, with their scales.
template <int kRows_, int kUnroll_>
struct Q6Step {
  static constexpr int kRows = kRows_, kUnroll = kUnroll_;
  static constexpr GgmlType kType = GgmlType::Q6_K;
  static constexpr const char* kSlotsName = "q6k_slots";
  static __device__ __forceinline__ int64_t units(int64_t k) { return k / 32; }  // blocks of 32 (16 ql bytes) of a row
  uint4 ql[kRows][kUnroll];
  uint2 qh[kRows][kUnroll];
  float dd[kRows][kUnroll];
  int sc_lo[kRows][kUnroll], sc_hi[kRows][kUnroll];

  // Rows row0.. of the matrix at wm (planes pl; rows past n clamped to n - 1).
  __device__ __forceinline__ void load(const uint8_t* wm, const Q6Planes& pl, int64_t row0, int64_t n, int64_t k,
                                       int64_t j0) {
    const int lane = threadIdx.x % 32;
    const int64_t chunks = units(k);
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = j0 + u * 32 + lane;
        const int64_t rr = row0 + r < n ? row0 + r : n - 1;
        const bool in = j < chunks;
        ql[r][u] = in ? load_stream(wm + size_t(rr) * size_t(k / 2) + size_t(j) * 16) : make_uint4(0, 0, 0, 0);
        qh[r][u] = in ? __ldg(reinterpret_cast<const uint2*>(wm + pl.qh + size_t(rr) * size_t(k / 4) + size_t(j) * 8))
                      : make_uint2(0, 0);
        const int8_t* sc = reinterpret_cast<const int8_t*>(wm + pl.sc + size_t(rr) * size_t(k / 16) + size_t(j) * 2);
        sc_lo[r][u] = in ? sc[0] : 0;
        sc_hi[r][u] = in ? sc[1] : 0;
        dd[r][u] = in ? __half2float(reinterpret_cast<const __half*>(wm + pl.d)[rr * (k / 256) + j / 8]) : 0.f;
      }
  }

  // The same, the planes found from n and k (gemv_slots.cuh's Step).
  __device__ __forceinline__ void load(const uint8_t* wm, int64_t row0, int64_t n, int64_t k, int64_t j0) {
    load(wm, Q6Planes(n, k), row0, n, k, j0);
  }

  // acc[r][b] += the step's blocks times x (int8 blocks in xs, batch rows b < batch).
  template <int kMaxB>
  __device__ __forceinline__ void dot(const uint8_t* xs, int64_t k, int64_t j0, int batch,
                                      float (&acc)[kRows][kMaxB]) const {
    const int lane = threadIdx.x % 32;
    const int64_t chunks = units(k);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = j0 + u * 32 + lane;
      if (j >= chunks) break;
#pragma unroll
      for (int b = 0; b < kMaxB; ++b) {
        if (b >= batch) break;
        const X8Row xr(xs, b, k);
        const X8Row::Halves x = xr.halves(32 * j, 32 * j + 16);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const uint32_t* q = &ql[r][u].x;
          uint32_t a[4], bq[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            a[i] = q6_bytes(q[i], qh[r][u].x, i);
            bq[i] = q6_bytes(q[i] >> 4, qh[r][u].y, i);
          }
          // with the quants the block's largest element meets, times its Q (q8_blocks.h)
          const int dl = dot16(a[0], a[1], a[2], a[3], x.lo) - 32 * x.sum_lo +
                         int(chunk_byte(a[0], a[1], a[2], a[3], x.m_lo)) * x.big_lo;
          const int dh = dot16(bq[0], bq[1], bq[2], bq[3], x.hi) - 32 * x.sum_hi +
                         int(chunk_byte(bq[0], bq[1], bq[2], bq[3], x.m_hi)) * x.big_hi;
          acc[r][b] += dd[r][u] * x.d_lo * (float(sc_lo[r][u]) * float(dl) + float(sc_hi[r][u]) * float(dh));
        }
      }
    }
  }
};

// kMaxB: the batch rows the loops unroll for (1 for decode's problems: code size, as q_dp4a).
// kArgmax: the instance that also makes GemvProblem::argmax (decode's logits), a separate one so
// that the others carry none of its code (argmax in every instance of q_dp4a and q6k_dp4a, even
// when not asked for, cost the q4_0 decode chain 2 %: docs/benchmarks.md).
// kEarly: the warp's first step is loaded before the PDL wait (weights never depend on an
// earlier kernel), so that it overlaps the kernel before, as in q_dp4a (the logits GEMV follows
// the last W_down in the decode chain).
// Decode's instances (kMaxB = 1) are held to 128 registers, two 8-warp blocks per SM: left free,
// ptxas gives the early-loading ones 160-166 and so one block per SM.
template <int kRows, int kUnroll, bool kGateUp, int kMaxB = kGemvMaxBatch, bool kEarly = false, bool kArgmax = false>
__global__ void __launch_bounds__(256, kMaxB == 1 ? 2 : 0) q6k_dp4a(const uint8_t* __restrict__ w, const uint8_t* __restrict__ w_up,
                                                XSource xin,
                                                float* __restrict__ y, int64_t n, int64_t k,
                                                int batch, Epilogue ep) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int64_t warps_total = int64_t(gridDim.x) * (blockDim.x / 32);
  const int64_t first = (int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * kRows;
  const Q6Planes pl(n, k);
  Q6Step<kRows, kUnroll> st;
  bool loaded = kEarly && first < n;
  if (loaded) st.load(w, pl, first, n, k, 0);
  pdl_wait();  // x comes from the kernel before (see kernels/common/pdl.cuh)
  RmsParts rms;  // x8 = blocks of x * w: the RMS scale from the producer's sums of squares
  if (xin.ss) rms.load(xin.ss, k);
  const uint8_t* xs = x8_source(xin, k, batch, smem);
  const int64_t chunks = st.units(k);
  unsigned long long best = 0;  // kArgmax: this warp's best row (lane 0)
  for (int64_t row0 = first; row0 < n; row0 += warps_total * kRows) {
    if (row0 + warps_total * kRows >= n) pdl_launch_dependents();  // this warp's last rows: the next kernel may launch
    float acc[kGateUp ? 2 : 1][kRows][kMaxB] = {};
#pragma unroll
    for (int mat = 0; mat < (kGateUp ? 2 : 1); ++mat)
      for (int64_t j0 = 0; j0 < chunks; j0 += 32 * kUnroll) {
        if (!loaded) st.load(mat ? w_up : w, pl, row0, n, k, j0);
        loaded = false;
        st.template dot<kMaxB>(xs, k, j0, batch, acc[mat]);
      }
    store_rows(acc, row0, n, batch, ep, y, xin.ss ? rms.scale(k, xin.norm_eps) : 1.f, nullptr, 0, nullptr, 0,
               kArgmax ? &best : nullptr);
  }
  if constexpr (kArgmax) argmax_finish(ep.argmax, best);
}

template <int kRows, int kUnroll>
Status launch_gate(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (p.w_up) return launch_x8_persistent(q6k_dp4a<kRows, kUnroll, true>, "q6k_dp4a", p, c, kRows, s);
  if (p.argmax.id)  // (batch 1: gemv_validate) the logits of decode
    return launch_x8_persistent(q6k_dp4a<kRows, kUnroll, false, 1, true, true>, "q6k_dp4a", p, c, kRows, s);
  if (p.batch == 1)
    return launch_x8_persistent(q6k_dp4a<kRows, kUnroll, false, 1, true>, "q6k_dp4a", p, c, kRows, s);
  return launch_x8_persistent(q6k_dp4a<kRows, kUnroll, false>, "q6k_dp4a", p, c, kRows, s);
}

Status run_q6k(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (p.wtype != GgmlType::Q6_K) return Status::error("q6k_dp4a: q6_K only");
  if (p.k % 256) return Status::error("q6k_dp4a: k must be a multiple of 256");
  if (c.rows == 1 && c.unroll == 2) return launch_gate<1, 2>(p, c, s);
  if (c.rows == 2 && c.unroll == 2) return launch_gate<2, 2>(p, c, s);
  if (c.rows == 1 && c.unroll == 4) return launch_gate<1, 4>(p, c, s);
  return Status::error("q6k_dp4a: no instance for config " + c.str());
}

bool q6k_only(GgmlType t) { return t == GgmlType::Q6_K; }

// One thread per super-block: GGUF's order (format/quant_decode.h's q6k_quant) into the planes'
// (the header comment).
__global__ void repack_q6k_kernel(const uint8_t* __restrict__ src, int64_t n, int64_t k, uint8_t* __restrict__ dst) {
  const Q6Planes pl(n, k);
  const int64_t blocks = n * (k / 256);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < blocks; i += int64_t(gridDim.x) * blockDim.x) {
    const uint8_t* b = src + size_t(i) * sizeof(block_q6_K);  // ql[128] qh[64] scales[16] d[2]
    const auto& blk = *reinterpret_cast<const block_q6_K*>(b);
    for (int j = 0; j < 8; ++j) {
      for (int e = 0; e < 16; ++e)
        dst[size_t(i) * 128 + 16 * j + e] = uint8_t((q6k_quant(blk, 32 * j + e) & 15) | (q6k_quant(blk, 32 * j + e + 16) & 15) << 4);
      for (int h = 0; h < 2; ++h) {
        uint32_t word = 0;
        for (int e = 0; e < 16; ++e) word |= uint32_t(q6k_quant(blk, 32 * j + 16 * h + e) >> 4) << k23_low_shift(e);
        reinterpret_cast<uint32_t*>(dst + pl.qh)[(size_t(i) * 8 + j) * 2 + h] = word;
      }
    }
    for (int j = 0; j < 16; ++j) dst[pl.sc + size_t(i) * 16 + j] = b[192 + j];
    dst[pl.d + size_t(i) * 2] = b[208];
    dst[pl.d + size_t(i) * 2 + 1] = b[209];
  }
}

// Rows row0 .. row0 + rows - 1 of the planes as f16. A thread makes 8 consecutive elements of a
// row (c a multiple of 8: 8 bytes of ql, one qh word, one scale, one 16-byte store); rows run
// over the grid's y, so no index is divided per element (the batching engine dequantises its
// q6_K logits matrix with this every step: docs/benchmarks.md).
__global__ void dequant_q6k_kernel(const uint8_t* __restrict__ w, int64_t n, int64_t k, int64_t row0, int64_t rows,
                                   __half* __restrict__ out) {
  const Q6Planes pl(n, k);
  const int64_t c = 8 * (int64_t(blockIdx.x) * blockDim.x + threadIdx.x);
  if (c >= k) return;
  const int64_t j = c / 32;                       // the block
  const int half = int(c % 32) / 16, e0 = int(c % 16);  // elements e0 .. e0 + 7 of that half (e0 = 0 or 8)
  const auto* scales = reinterpret_cast<const int8_t*>(w + pl.sc);
  const auto* ds = reinterpret_cast<const __half*>(w + pl.d);
  for (int64_t i = blockIdx.y; i < rows; i += gridDim.y) {
    const int64_t r = row0 + i;
    const uint2 ql = *reinterpret_cast<const uint2*>(w + size_t(r) * size_t(k / 2) + j * 16 + e0);
    const uint32_t qh = reinterpret_cast<const uint32_t*>(w + pl.qh)[(size_t(r) * size_t(k / 32) + j) * 2 + half];
    const int sc = scales[size_t(r) * size_t(k / 16) + c / 16];
    const float d = __half2float(ds[r * (k / 256) + c / 256]);
    uint32_t packed[4];
#pragma unroll
    for (int p = 0; p < 8; p += 2) {
      float v[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int b = p + u, e = e0 + b;
        const uint32_t byte = ((b < 4 ? ql.x : ql.y) >> (8 * (b % 4))) & 0xFFu;
        const int q = int((half ? byte >> 4 : byte & 15u) | ((qh >> k23_low_shift(e)) & 3u) << 4) - 32;
        v[u] = d * float(sc * q);
      }
      const __half2 p2 = __floats2half2_rn(v[0], v[1]);
      packed[p / 2] = *reinterpret_cast<const uint32_t*>(&p2);
    }
    *reinterpret_cast<uint4*>(out + i * k + c) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

}  // namespace

Status dequant_q6k_repacked(const void* w, int64_t n, int64_t k, int64_t row0, int64_t rows, void* out, cudaStream_t s) {
  if (!w || !out || k % 256 || row0 < 0 || rows <= 0 || row0 + rows > n) return Status::error("dequant_q6k_repacked: bad arguments");
  if (reinterpret_cast<uintptr_t>(out) % 16 || reinterpret_cast<uintptr_t>(w) % 8)
    return Status::error("dequant_q6k_repacked: w must be 8-byte and out 16-byte aligned");
  const dim3 grid(unsigned((k / 8 + 255) / 256), unsigned(std::min<int64_t>(rows, 65535)));
  dequant_q6k_kernel<<<grid, 256, 0, s>>>(static_cast<const uint8_t*>(w), n, k, row0, rows, static_cast<__half*>(out));
  return launch_status("dequant_q6k_repacked");
}

size_t gemv_q6k_repacked_bytes(int64_t n, int64_t k) { return Q6Planes(n, k).d + size_t(n) * size_t(k / 256) * 2; }

Status gemv_q6k_repack(const void* src, int64_t n, int64_t k, void* out, cudaStream_t s) {
  if (k % 256 || n <= 0) return Status::error("gemv_repack: bad q6_K shape");
  const int64_t blocks = n * (k / 256);
  repack_q6k_kernel<<<unsigned(std::min<int64_t>((blocks + 255) / 256, 4096)), 256, 0, s>>>(
      static_cast<const uint8_t*>(src), n, k, static_cast<uint8_t*>(out));
  return launch_status("gemv_repack q6_K");
}

void register_q6k_variants(std::vector<GemvVariant>& out) {
  out.push_back({"q6k_dp4a", "q6_K repacked into ql/qh/scale/d planes, int8 x in shared memory, dp4a",
                 WeightLayout::Repacked, q6k_only, run_q6k,
                 {GemvConfig{1, 8, 2}, GemvConfig{2, 8, 2}, GemvConfig{1, 8, 4}, GemvConfig{2, 4, 2}},
                 XRounding::Int8Blocks, /*writes_y8=*/true, /*fuses_norm=*/true, /*takes_x8_ss=*/true,
                 /*tuner_picks=*/true, /*writes_argmax=*/true});
  out.push_back({"q6k_slots", "q6k_dp4a for decode (batch 1): two register slots of steps, one always in flight (gemv_slots.cuh)",
                 WeightLayout::Repacked, q6k_only, slots_run<Q6Step>, slots_configs(), XRounding::Int8Blocks,
                 /*writes_y8=*/true, /*fuses_norm=*/true, /*takes_x8_ss=*/true, /*tuner_picks=*/true,
                 /*writes_argmax=*/false, /*max_batch=*/1});
}

}  // namespace lamina::kernels

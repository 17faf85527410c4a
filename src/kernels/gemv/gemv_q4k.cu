// q4k_dp4a / q5k_dp4a: Q4_K and Q5_K in the GGUF layout with int8 activations and dp4a.
// A 144-byte Q4_K super-block is [d f16, dmin f16, scales 12 bytes][qs 128 bytes]; Q5_K's 176
// bytes put qh (32 bytes) between the header and qs. With 16-byte aligned rows every super-block
// is 16-byte aligned. qs chunk j (16 bytes, j = 2c + h) holds elements 64c + 16h + i (low
// nibbles, sub-block 2c) and 64c + 32 + 16h + i (high nibbles, sub-block 2c + 1), i = 0..15; in
// Q5_K the fifth bit of element e is bit e / 32 of qh[e % 32], so the same lane's 16 qh bytes are
// qh[16h .. 16h + 15], bits 2c (low run) and 2c + 1 (high run). A lane takes one chunk per step:
//   d * sc_lo * dx_lo * dp4a(lo, x_lo) - dmin * m_lo * dx_lo * sum(x_lo)   (+ the same for hi)
// where x_lo / x_hi are the 16 int8 activations those nibbles meet (shared-memory x, as q_dp4a),
// with each x block's largest element (its Q) in the integer sums (q8_blocks.h).
// q5k_dp4a against q4k_dp4a (the rung it extends): one more 16-byte load per lane and step (the
// qh half) and the fifth bits merged into both runs before the dp4a, so Q5_K files (Q5_K_M) read
// their 5.5 bits per weight once instead of falling back to q_generic.
// q4k_slots / q5k_slots: the same steps (Q4kStep) in gemv_slots.cuh's loop of two register slots,
// for decode (batch 1).
#include "format/quant_blocks.h"
#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_slots.cuh"
#include "kernels/gemv/gemv_x8.cuh"

#include <cuda_runtime.h>

#include <string>

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

// One step of a warp (gemv_slots.cuh's Step): 16-byte qs chunks j0 + u * 32 + lane (u < kUnroll)
// of kRows rows (and Q5_K's qh half). The 16-byte header of a super-block is shared by the 8
// lanes of its chunks: each holds one of its words (lane % 4) and the others' come by shuffles
// when the step is multiplied, so that a chunk in flight costs 5 registers, not 8 (two steps of
// 2 x 2 chunks a lane then fit in the slots rung's 128 registers).
template <int kRows_, int kUnroll_, bool kQ5>
struct Q4kStep {
  static constexpr int kRows = kRows_, kUnroll = kUnroll_;
  static constexpr GgmlType kType = kQ5 ? GgmlType::Q5_K : GgmlType::Q4_K;
  static constexpr const char* kSlotsName = kQ5 ? "q5k_slots" : "q4k_slots";
  static constexpr size_t kBlock = kQ5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
  static constexpr int kQs = kQ5 ? 48 : 16;  // qs's offset in the super-block
  static __device__ __forceinline__ int64_t units(int64_t k) { return (k / QK_K) * 8; }
  uint4 qs[kRows][kUnroll], qh[kRows][kQ5 ? kUnroll : 1];
  uint32_t hw[kRows][kUnroll];  // word lane % 4 of the super-block header (d | dmin, scales 0-3, 4-7, 8-11)

  __device__ __forceinline__ void load(const uint8_t* wm, int64_t row0, int64_t n, int64_t k, int64_t j0) {
    const int lane = threadIdx.x % 32;
    const size_t row_bytes = size_t(k / QK_K) * kBlock;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = j0 + u * 32 + lane;
        const int64_t rr = row0 + r < n ? row0 + r : n - 1;
        const uint8_t* sb = wm + size_t(rr) * row_bytes + size_t(j / 8) * kBlock;
        const bool in = j < units(k);
        qs[r][u] = in ? load_stream(sb + kQs + (j % 8) * 16) : make_uint4(0, 0, 0, 0);
        hw[r][u] = in ? reinterpret_cast<const uint32_t*>(sb)[lane % 4] : 0u;
        if constexpr (kQ5)  // qh[16h .. 16h + 15], shared by the 4 lanes of the same h
          qh[r][u] = in ? *reinterpret_cast<const uint4*>(sb + 16 + (j % 2) * 16) : make_uint4(0, 0, 0, 0);
      }
  }

  template <int kMaxB>
  __device__ __forceinline__ void dot(const uint8_t* xs, int64_t k, int64_t j0, int batch,
                                      float (&acc)[kRows][kMaxB]) const {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (j0 + u * 32 >= units(k)) break;  // (the whole warp: the shuffles below need every lane)
      uint4 hd[kRows];                     // the lane's super-block header, from its 8 lanes
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int base = lane & ~7;
        hd[r] = make_uint4(__shfl_sync(~0u, hw[r][u], base), __shfl_sync(~0u, hw[r][u], base + 1),
                           __shfl_sync(~0u, hw[r][u], base + 2), __shfl_sync(~0u, hw[r][u], base + 3));
      }
      const int64_t j = j0 + u * 32 + lane;
      if (j >= units(k)) continue;  // (units come in runs of 8: the lanes past them, at the last u)
      const int c = int(j % 8) / 2, h = int(j % 8) % 2;
      const int64_t e_lo = (j / 8) * QK_K + 64 * c + 16 * h;  // first element of each half
      const int64_t e_hi = e_lo + 32;
#pragma unroll
      for (int b = 0; b < kMaxB; ++b) {
        if (b >= batch) break;
        const X8Row xr(xs, b, k);
        const X8Row::Halves x = xr.halves(e_lo, e_hi);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float sc0, m0, sc1, m1;
          scale_min(2 * c, hd[r], sc0, m0);
          scale_min(2 * c + 1, hd[r], sc1, m1);
          const uint4 v = qs[r][u];
          const uint32_t mk = 0x0F0F0F0Fu;
          int dl, dh;
          if constexpr (kQ5) {  // 5-bit quants 0..31 of each run, one per byte
            const uint4 hb = qh[r][u];
            const auto lo5 = [&](uint32_t q, uint32_t h) { return (q & mk) | (((h >> (2 * c)) & 0x01010101u) << 4); };
            const auto hi5 = [&](uint32_t q, uint32_t h) { return ((q >> 4) & mk) | (((h >> (2 * c + 1)) & 0x01010101u) << 4); };
            const uint32_t l0 = lo5(v.x, hb.x), l1 = lo5(v.y, hb.y), l2 = lo5(v.z, hb.z), l3 = lo5(v.w, hb.w);
            const uint32_t h0 = hi5(v.x, hb.x), h1 = hi5(v.y, hb.y), h2 = hi5(v.z, hb.z), h3 = hi5(v.w, hb.w);
            dl = __dp4a(int(l0), x.lo.x, 0);
            dl = __dp4a(int(l1), x.lo.y, dl);
            dl = __dp4a(int(l2), x.lo.z, dl);
            dl = __dp4a(int(l3), x.lo.w, dl);
            dh = __dp4a(int(h0), x.hi.x, 0);
            dh = __dp4a(int(h1), x.hi.y, dh);
            dh = __dp4a(int(h2), x.hi.z, dh);
            dh = __dp4a(int(h3), x.hi.w, dh);
            dl += int(chunk_byte(l0, l1, l2, l3, x.m_lo)) * x.big_lo;  // the blocks' largest elements
            dh += int(chunk_byte(h0, h1, h2, h3, x.m_hi)) * x.big_hi;
          } else {
            dl = __dp4a(int(v.x & mk), x.lo.x, 0);
            dl = __dp4a(int(v.y & mk), x.lo.y, dl);
            dl = __dp4a(int(v.z & mk), x.lo.z, dl);
            dl = __dp4a(int(v.w & mk), x.lo.w, dl);
            const uint32_t hk = 0xF0F0F0F0u;  // high nibbles in place, 16x (dp4a_us)
            dh = dp4a_us(v.x & hk, x.hi.x, 0);
            dh = dp4a_us(v.y & hk, x.hi.y, dh);
            dh = dp4a_us(v.z & hk, x.hi.z, dh);
            dh = dp4a_us(v.w & hk, x.hi.w, dh);
            dh >>= 4;  // exact: a multiple of 16
            // the quants the blocks' largest elements meet (low nibbles: lo run, high: hi run)
            dl += int(chunk_byte(v.x, v.y, v.z, v.w, x.m_lo) & 15u) * x.big_lo;
            dh += int(chunk_byte(v.x, v.y, v.z, v.w, x.m_hi) >> 4) * x.big_hi;
          }
          const uint32_t dd = hd[r].x;  // d (low half), dmin (high half)
          const float d = __half2float(__ushort_as_half(uint16_t(dd))), dmin = __half2float(__ushort_as_half(uint16_t(dd >> 16)));
          acc[r][b] += x.d_lo * (d * sc0 * float(dl) - dmin * m0 * float(x.sum_lo)) +
                       x.d_hi * (d * sc1 * float(dh) - dmin * m1 * float(x.sum_hi));
        }
      }
    }
  }
};
template <int kRows, int kUnroll>
using Q4kOf = Q4kStep<kRows, kUnroll, false>;
template <int kRows, int kUnroll>
using Q5kOf = Q4kStep<kRows, kUnroll, true>;

// Any batch 1..8: a warp loads a step, waits for it, multiplies it.
template <int kRows, int kUnroll, bool kGateUp, bool kQ5>
__global__ void __launch_bounds__(256) q4k_dp4a(const uint8_t* __restrict__ w, const uint8_t* __restrict__ w_up,
                                                XSource xin,
                                                float* __restrict__ y, int64_t n, int64_t k,
                                                int batch, Epilogue ep) {
  extern __shared__ __align__(16) uint8_t smem[];
  pdl_wait();  // x comes from the kernel before (see kernels/common/pdl.cuh)
  const uint8_t* xs = x8_source(xin, k, batch, smem);
  const int64_t warps_total = int64_t(gridDim.x) * (blockDim.x / 32);
  using Step = Q4kStep<kRows, kUnroll, kQ5>;
  for (int64_t row0 = (int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * kRows; row0 < n;
       row0 += warps_total * kRows) {
    if (row0 + warps_total * kRows >= n) pdl_launch_dependents();  // this warp's last rows: the next kernel may launch
    float acc[kGateUp ? 2 : 1][kRows][kGemvMaxBatch] = {};
#pragma unroll
    for (int mat = 0; mat < (kGateUp ? 2 : 1); ++mat)
      for (int64_t j0 = 0; j0 < Step::units(k); j0 += 32 * kUnroll) {
        Step st;
        st.load(mat ? w_up : w, row0, n, k, j0);
        st.template dot<kGemvMaxBatch>(xs, k, j0, batch, acc[mat]);
      }
    store_rows(acc, row0, n, batch, ep, y);
  }
}

template <int kRows, int kUnroll, bool kGateUp, bool kQ5>
Status launch_impl(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  return launch_x8_persistent(q4k_dp4a<kRows, kUnroll, kGateUp, kQ5>, kQ5 ? "q5k_dp4a" : "q4k_dp4a", p, c, kRows, s);
}

template <int kRows, int kUnroll, bool kQ5>
Status launch_gate(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  return p.w_up ? launch_impl<kRows, kUnroll, true, kQ5>(p, c, s) : launch_impl<kRows, kUnroll, false, kQ5>(p, c, s);
}

template <bool kQ5>
Status run_k(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  const GgmlType want = kQ5 ? GgmlType::Q5_K : GgmlType::Q4_K;
  const std::string name = kQ5 ? "q5k_dp4a" : "q4k_dp4a";
  if (p.wtype != want) return Status::error(name + ": " + std::string(type_name(want)) + " only");
  if (p.k % QK_K) return Status::error(name + ": k must be a multiple of 256");
  if (c.rows == 1 && c.unroll == 2) return launch_gate<1, 2, kQ5>(p, c, s);
  if (c.rows == 2 && c.unroll == 2) return launch_gate<2, 2, kQ5>(p, c, s);
  if (c.rows == 1 && c.unroll == 4) return launch_gate<1, 4, kQ5>(p, c, s);
  return Status::error(name + ": no instance for config " + c.str());
}

bool q4k_only(GgmlType t) { return t == GgmlType::Q4_K; }
bool q5k_only(GgmlType t) { return t == GgmlType::Q5_K; }

}  // namespace

void register_q4k_variants(std::vector<GemvVariant>& out) {
  const std::vector<GemvConfig> configs{GemvConfig{1, 8, 2}, GemvConfig{2, 8, 2}, GemvConfig{1, 8, 4}, GemvConfig{2, 4, 2}};
  out.push_back({"q4k_dp4a", "q4_K in place: a 16-byte quant chunk per lane, int8 x in shared memory, dp4a",
                 WeightLayout::Gguf, q4k_only, run_k<false>, configs, XRounding::Int8Blocks, /*writes_y8=*/true,
                 /*fuses_norm=*/true});
  out.push_back({"q5k_dp4a", "q5_K in place: q4k_dp4a with the qh half of each lane's chunk merged in as the fifth bit",
                 WeightLayout::Gguf, q5k_only, run_k<true>, configs, XRounding::Int8Blocks, /*writes_y8=*/true,
                 /*fuses_norm=*/true});
  out.push_back({"q4k_slots", "q4k_dp4a for decode (batch 1): two register slots of steps, one always in flight (gemv_slots.cuh)",
                 WeightLayout::Gguf, q4k_only, slots_run<Q4kOf, true>, slots_configs(true), XRounding::Int8Blocks, /*writes_y8=*/true,
                 /*fuses_norm=*/true, /*takes_x8_ss=*/false, /*tuner_picks=*/true, /*writes_argmax=*/false, /*max_batch=*/1});
  out.push_back({"q5k_slots", "q5k_dp4a for decode (batch 1): two register slots of steps, one always in flight (gemv_slots.cuh)",
                 WeightLayout::Gguf, q5k_only, slots_run<Q5kOf>, slots_configs(), XRounding::Int8Blocks, /*writes_y8=*/true,
                 /*fuses_norm=*/true, /*takes_x8_ss=*/false, /*tuner_picks=*/true, /*writes_argmax=*/false, /*max_batch=*/1});
}

}  // namespace lamina::kernels

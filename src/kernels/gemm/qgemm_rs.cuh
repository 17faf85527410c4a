// q3_wgmma_rs: quantised weights as wgmma's register operand (sm_90a). Against q2_wgmma, the
// roles of the operands swap: the block computes C^T[n][m] = W[n][k] X[m][k]^T, with the 128
// weight rows of its tile as wgmma's M side (2 consumer warpgroups x 64 rows) and up to 256
// activation rows as its N side. The quantised bytes of W arrive by TMA into a ring of raw
// slots (q2_wgmma's slot layouts and those of the types only it reads, 4 k-steps each) and each consumer thread converts the
// bytes of its own A fragment straight into registers: no f16 copy of W is written to shared
// memory, there are no producer warpgroups doing the conversion, and a W tile is converted
// once per 64 x BM x 16 tensor-core product instead of once per 128 x 128 x 16 one.
//
//   block:  1 producer warpgroup (thread 0 issues every TMA), 2 consumer warpgroups; a tile of
//           BM activation rows x 128 weight rows, or x 256 (each consumer then owns two 64-row
//           halves: the X stage feeds twice the rows); one block an SM, or two (kBlocks, the
//           8-split config of 64 x 128 tiles: half the registers each, twice the warps to hide
//           a k-step's latency at 16-64 rows)
//   smem:   X stages [kStages][BM][64] f16, K-major, 128-byte swizzle (wgmma's B operand);
//           W ring [2][slot] of raw bytes (q2_wgmma's DequantB::issue_raw layout);
//           full/empty mbarriers for each X stage and each W slot
//   thread: warp w of consumer c, lane (g = lane / 4, t = lane % 4) owns weight rows
//           r0 = 64 c + 16 w + g and r0 + 8, k offsets 2t, 2t+1, 2t+8, 2t+9 of each k16 step
//   output: accumulator register 4j + r holds C[m0 + 8j + 2t + r % 2][n0 + r0 + 8 (r / 2)],
//           stored straight from registers (eight lanes write 32 consecutive bytes of a row)
//
// Gated (kGlu, a GemmProblem with b_up): the two 64-row halves of a consumer warpgroup are the
// same 64 output features of the gate matrix (half 0) and of the up matrix (half 1), so a thread
// holds gate and up of the same C elements and the epilogue writes act(gate) * up (SiLU, or GELU
// with tanh) in C's type: one kernel in place of two GEMMs, the GLU and the 16-bit conversion
// of its output for the down projection (the batching engine's steps).
//
// Values are the same f16 numbers q2_wgmma stages (one rounding of the dequantised weight; Q4_K:
// and of its scale pair first, q4k_half_scales); Q6_K, Q3_K, Q2_K and IQ4_XS round their sub-block
// scale (d sc, Q2_K's pair, d (ls - 32)) to f16 first too.
// Figures: docs/benchmarks.md (lamina kbench gemm).
#pragma once

#include "kernels/common/activations.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/gemm/qgemm_wgmma.cuh"
#include "kernels/gemv/gemv_iq4.cuh"
#include "kernels/gemv/gemv_k23.cuh"

namespace lamina::kernels::qgemm_rs {

using qgemm_wgmma::QKind;
using qgemm_wgmma::kQ8_0;
using qgemm_wgmma::kQ4_0;
using qgemm_wgmma::kQ4_K;
using qgemm_wgmma::kQ5_K;
using qgemm_wgmma::kQ5_0;
using qgemm_wgmma::kIQ4_NL;
using qgemm_wgmma::kQ5_1;
using qgemm_wgmma::kQ6_K;
using qgemm_wgmma::kIQ4_XS;
using qgemm_wgmma::kQ3_K;
using qgemm_wgmma::kQ2_K;
using qgemm_wgmma::kQ4_1;
using wgmma_gemm::kBk;
using wgmma_gemm::kWgThreads;

inline constexpr int kThreads = 3 * kWgThreads;
template <QKind kKind>
using Raw = qgemm_wgmma::DequantB<kKind, 128>;  // the layout of a 128-row (sub-)slot and its TMA

// Bytes 2t, 2t+1, 2t+8, 2t+9 of a 16-byte chunk (the k offsets of one thread's fragment).
__device__ __forceinline__ uint32_t pick4(const uint8_t* chunk, int t) {
  const auto* w = reinterpret_cast<const uint32_t*>(chunk);
  return __byte_perm(w[t >> 1], w[2 + (t >> 1)], (t & 1) ? 0x7632 : 0x5410);
}

// Two nibbles (of bytes 0, 1 or 2, 3 of x; low or high) as the half2 (q - 8) d: one rounding,
// as -8 d (off) is exact.
__device__ __forceinline__ uint32_t q4_pair(uint32_t x, bool upper_bytes, bool high, __half2 d, __half2 off) {
  return qgemm_wgmma::as_u32(__hfma2(qgemm_wgmma::nibble_pair(x, upper_bytes, high), d, off));
}
using qgemm_wgmma::q8_pair;

// One thread's A fragments of one k-step (4 k16 steps x 4 registers) from a ring slot.
template <QKind kKind>
struct Frags {
  static constexpr int kAuxVecs = Raw<kKind>::kAux / 16;
  // per group, rows r0 and r0 + 8: the eight f16 d (Q8_0, Q4_0, Q5_0, IQ4_NL), the K header,
  // Q5_1's and Q4_1's eight (d, m), or the 16 scale bytes (Q6_K, Q3_K int8; Q2_K scale | min << 4)
  // (IQ4_XS: none)
  uint4 aux[2][kAuxVecs > 0 ? kAuxVecs : 1];

  __device__ void load_aux(const uint8_t* slot, int r0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int r = r0 + 8 * i;
#pragma unroll
      for (int v = 0; v < kAuxVecs; ++v)
        aux[i][v] = *reinterpret_cast<const uint4*>(slot + size_t(128) * 4 * Raw<kKind>::kQBytes + size_t(r) * Raw<kKind>::kAux + 16 * v);
    }
  }

  // The f16 d of block b (0..7) of the group, row i (Q5_1, Q4_1: its m in offset).
  __device__ __half2 d_of(int i, int b, __half2* offset = nullptr) const {
    if constexpr (kKind == kQ5_1 || kKind == kQ4_1) {
      const uint32_t w = qgemm_wgmma::word(aux[i][b / 4], b % 4);
      *offset = __half2half2(__ushort_as_half(uint16_t(w >> 16)));
      return __half2half2(__ushort_as_half(uint16_t(w)));
    }
    const uint32_t w = qgemm_wgmma::word(aux[i][0], b / 2);
    return __half2half2(__ushort_as_half(uint16_t(w >> (16 * (b % 2)))));
  }

  // Row r's word i of its third box: the fifth bits of block i (Q5_K, Q5_0, Q5_1), Q6_K's high 2
  // bits of half i % 2 of block i / 2, or Q3_K's third bits of block i.
  __device__ static uint32_t fifth(const uint8_t* slot, int r, int i) {
    return reinterpret_cast<const uint32_t*>(slot + size_t(128) * (4 * Raw<kKind>::kQBytes + Raw<kKind>::kAux) +
                                             size_t(r) * Raw<kKind>::kHi)[i];
  }

  // The slot's super-block (the group's 256 k) of rows r0 and r0 + 8: Q6_K's and Q3_K's d, IQ4_XS's
  // header (d | scales_h << 16, scales_l) or Q2_K's d | dmin << 16 (xs[i].x).
  float d6[2];
  uint2 xs[2];

  // That record of the slot's super-block (group g) for rows n0 + r0 and n0 + r0 + 8, from global
  // memory (rows past n read as row n - 1; their products are not stored).
  template <class Args>
  __device__ void load_supers(const Args& a, int64_t n0, int g, int r0) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t row = n0 + r0 + 8 * i < a.n ? n0 + r0 + 8 * i : a.n - 1;
      if constexpr (kKind == kQ6_K || kKind == kQ3_K)
        d6[i] = __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(a.d) + row * a.supers + g)));
      else if constexpr (kKind == kQ2_K)
        xs[i].x = __ldg(reinterpret_cast<const uint32_t*>(a.d) + row * a.supers + g);
      else
        xs[i] = __ldg(reinterpret_cast<const uint2*>(a.d) + row * a.supers + g);
    }
  }

  // IQ4_XS: block b's (0..7) scale d (ls - 32) for row r0 + 8 i, ls its 6 bits (scales_l's nibble b
  // below scales_h's bits 2b, 2b + 1; format/quant_decode.h: iq4xs_scale), rounded to f16 once
  // (d (ls - 32) is exact in f32).
  __device__ __half2 xs_scale(int i, int b) const {
    const int ls = int((xs[i].y >> (4 * b)) & 15u) | int(((xs[i].x >> (16 + 2 * b)) & 3u) << 4);
    return __float2half2_rn(__half2float(__ushort_as_half(uint16_t(xs[i].x))) * float(ls - 32));
  }

  // The fragments of one block (half 0 or 1 of the k-step) for row r0 + 8 i: x its bytes 2t, 2t + 1,
  // 2t + 8, 2t + 9 (pick4), their nibbles (the low ones k 0..15 of the block, the high ones 16..31)
  // as q d + off in f16; with a fifth-bit plane (Q5_K, Q5_0, Q5_1), fb the block's word of fifth
  // bits, two for each pair of bytes (elements 2t + 8 upper + 16 hi, + 1). A pair's two fifth bits
  // y (0..3) go under its two nibbles by one multiply: y (2^p + 2^(p + 15)) holds y's bit 0 at p
  // and its bit 1 at p + 16 with no carries between the two copies (p = 4 under the low nibbles,
  // 8 under the high ones); the same bits as nibble_pair5 places one at a time.
  __device__ static void nibble_frags(uint32_t x, uint32_t fb, int t, int half, int i, __half2 d, __half2 off,
                                      uint32_t (&f)[16]) {
    const uint32_t fbt = fb >> (2 * t);  // the thread's pairs' fifth bits at bits 0-1 of each byte
#pragma unroll
    for (int hi = 0; hi < 2; ++hi)
#pragma unroll
      for (int up = 0; up < 2; ++up) {
        uint32_t& out = f[4 * (2 * half + hi) + 2 * up + i];
        if constexpr (Raw<kKind>::kFifth) {
          const uint32_t spread = ((fbt >> (8 * up + 16 * hi)) & 3u) * (hi ? 0x00800100u : 0x00080010u);
          const uint32_t pair = __byte_perm(x, 0, up ? 0x4342 : 0x4140);
          const uint32_t v = qgemm_wgmma::and_or(pair, hi ? 0x00F000F0u : 0x000F000Fu, 0x64006400u) |
                             (spread & (hi ? 0x01000100u : 0x00100010u));
          const __half2 q = hi ? __hfma2(qgemm_wgmma::as_h2(v), qgemm_wgmma::h2_const(0x2C00), qgemm_wgmma::h2_const(0xD400))  // /16 - 64
                               : __hsub2(qgemm_wgmma::as_h2(v), qgemm_wgmma::h2_const(0x6400));                              // - 1024
          out = qgemm_wgmma::as_u32(__hfma2(q, d, off));
        } else {
          out = q4_pair(x, up, hi, d, off);
        }
      }
  }

  // f(half, b, i, r) for the two blocks b = 2 s4 + half of k-step s4 and the thread's two rows
  // r = r0 + 8 i, unrolled: the loop the block-wise conversions below run.
  template <class F>
  __device__ __forceinline__ static void each_block_row(int s4, int r0, F&& f) {
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int i = 0; i < 2; ++i) f(half, 2 * s4 + half, i, r0 + 8 * i);
  }

  // f[4 kk + reg]: k16 step kk of k-step s4 (0..3) of the group.
  __device__ void convert(const uint8_t* slot, int r0, int t, int s4, uint32_t (&f)[16]) const {
    if constexpr (kKind == kQ4_0 || kKind == kQ5_0 || kKind == kQ5_1 || kKind == kQ4_1) {
      // Q5_0, Q5_1: the fifth bits set above the nibbles (nibble_pair5, as Q5_K's below); offset -16 d
      // (Q5_0), -8 d (Q4_0) or m (Q5_1, Q4_1)
      each_block_row(s4, r0, [&](int half, int b, int i, int r) {  // block b = 2 s4 + half covers k16 steps 2 half, 2 half + 1
        const uint32_t x = pick4(slot + size_t(r) * 128 + 16 * (b ^ (r % 8)), t);
        __half2 m;
        const __half2 d = d_of(i, b, &m);
        const __half2 off = kKind == kQ5_1 || kKind == kQ4_1 ? m : __hneg2(__hmul2(qgemm_wgmma::h2_const(kKind == kQ5_0 ? 0x4C00 : 0x4800), d));  // 16 or 8: exact
        nibble_frags(x, Raw<kKind>::kFifth ? fifth(slot, r, b) : 0u, t, half, i, d, off, f);
      });
    } else if constexpr (kKind == kQ6_K) {
      // block b = 2 s4 + half: its ql nibbles as Q4_0's, the high 2 bits of element e of half hi at
      // bits k23_low_shift(e) of its qh word, the half's int8 scale. A fragment pair's elements
      // e, e + 1 (e = 2t + 8 up) keep their high bits at the same offset 2 (t / 2 + 2 up) of
      // bytes 2 (t % 2) and 2 (t % 2) + 1 of that word: shifted down to bit 0, one byte permute
      // puts each element's nibble (the low ones shifted up a nibble first) at bits 4-7 of its
      // f16 and its high bits at bits 8-9, so that under the exponent 0x64 the f16 is 1024 + 16
      // q6 (q6 = nibble | high << 4), /16 - 64 gives q6 exactly, and (q6 - 32) ds with ds =
      // f16(d sc) is the one rounding (as q4k_half_scales).
      const uint32_t hb = uint32_t(t & 1) * 2;  // the pair's first byte of the qh word
      each_block_row(s4, r0, [&](int half, int b, int i, int r) {
        const uint32_t x = pick4(slot + size_t(r) * 128 + 16 * (b ^ (r % 8)), t);
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
          const uint32_t nib = hi ? x : x << 4;  // the half's nibbles at bits 4-7 of their bytes
          const uint32_t h = fifth(slot, r, 2 * b + hi);
          const int sc = int(int8_t(qgemm_wgmma::word(aux[i][0], (2 * b + hi) / 4) >> (8 * ((2 * b + hi) % 4))));
          const __half2 ds = __float2half2_rn(d6[i] * float(sc));
          const __half2 off = __hmul2(ds, qgemm_wgmma::h2_const(0xD000));  // -32 ds: exact
#pragma unroll
          for (int up = 0; up < 2; ++up) {
            const uint32_t hv = h >> (2 * (t / 2) + 4 * up);
            const uint32_t sel = uint32_t(2 * up) | (4 + hb) << 4 | uint32_t(2 * up + 1) << 8 | (5 + hb) << 12;
            const uint32_t v = qgemm_wgmma::and_or(__byte_perm(nib, hv, sel), 0x03F003F0u, 0x64006400u);
            const __half2 q = __hfma2(qgemm_wgmma::as_h2(v), qgemm_wgmma::h2_const(0x2C00), qgemm_wgmma::h2_const(0xD400));  // /16 - 64
            f[4 * (2 * half + hi) + 2 * up + i] = qgemm_wgmma::as_u32(__hfma2(q, ds, off));
          }
        }
      });
    } else if constexpr (kKind == kIQ4_NL || kKind == kIQ4_XS) {
      // block b = 2 s4 + half; its bytes are consecutive pairs of indices (byte j: elements 2j,
      // 2j + 1), so a fragment's k offsets 2t, 2t + 1 and 2t + 8, 2t + 9 of k16 step hi are bytes
      // 8 hi + t and 8 hi + t + 4 of the block's chunk: four table lookups (iq4_lookup4) give
      // their int8 values in fragment order, converted as Q8_0's (q8_pair: one rounding of v d,
      // d the block's f16 d, or IQ4_XS's sub-block scale in f16)
      each_block_row(s4, r0, [&](int half, int b, int i, int r) {
        const uint4 c = *reinterpret_cast<const uint4*>(slot + size_t(r) * 128 + 16 * (b ^ (r % 8)));
        const __half2 d = kKind == kIQ4_XS ? xs_scale(i, b) : d_of(i, b);
        const uint32_t sel = uint32_t(t) | uint32_t(t + 4) << 4;  // byte t of the first word, byte t of the second
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
          const uint32_t v = gemv_detail::iq4_lookup4(__byte_perm(hi ? c.z : c.x, hi ? c.w : c.y, sel));
          f[4 * (2 * half + hi) + i] = q8_pair(v, false, d);
          f[4 * (2 * half + hi) + 2 + i] = q8_pair(v, true, d);
        }
      });
    } else if constexpr (kKind == kQ3_K || kKind == kQ2_K) {
      // block b = 2 s4 + half: half hi's 2-bit fields in the low word 2b + hi of the row's 64 bytes
      // (k23_low_shift), Q3_K's third bits in word b of the third box (k23_high_shift); q = low |
      // third << 2 exact in f16 under the exponent 0x64, then one rounding of q ds + off: Q3_K (q - 4)
      // f16(d sc) (sc int8, already less 32), Q2_K q f16(d sc) - f16(dmin m) (q4k_half_scales).
      // A fragment pair's elements e, e + 1 (e = 2t + 8 up) sit in bytes 2 (t % 2) and 2 (t % 2) +
      // 1 of both words, at the same offset in each byte: the low word shifted down to bit 0 and
      // the third bits to bit 2 make q in those bytes, and one byte permute moves them to the two
      // f16 of the pair.
      const uint32_t pair_sel = (t & 1) ? 0x4342u : 0x4140u;
      each_block_row(s4, r0, [&](int half, int b, int i, int r) {
        const uint32_t* low = reinterpret_cast<const uint32_t*>(slot + size_t(r) * 64);
        const uint32_t third = kKind == kQ3_K ? fifth(slot, r, b) : 0u;
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
          const int g16 = 2 * b + hi;  // the 16-element group: its scale byte
          const uint32_t sb = (qgemm_wgmma::word(aux[i][0], g16 / 4) >> (8 * (g16 % 4))) & 0xFFu;
          __half2 ds, off;
          if constexpr (kKind == kQ3_K) {
            ds = __float2half2_rn(d6[i] * float(int(int8_t(sb))));
            off = __hmul2(ds, qgemm_wgmma::h2_const(0xC400));  // -4 ds: exact
          } else {
            const float d = __half2float(__ushort_as_half(uint16_t(xs[i].x)));
            const float dmin = __half2float(__ushort_as_half(uint16_t(xs[i].x >> 16)));
            qgemm_wgmma::q4k_half_scales(d * float(sb & 15u), dmin * float(sb >> 4), ds, off);
          }
          const uint32_t w = low[g16];
#pragma unroll
          for (int up = 0; up < 2; ++up) {
            uint32_t q = w >> (2 * (t / 2) + 4 * up);  // the pair's fields at bits 0-1 of their bytes
            if constexpr (kKind == kQ3_K)  // its third bits (offset 4 hi + t / 2 + 2 up) at bit 2: the
              // word two places up, with the two bits that leave it, shifted down
              q = (q & 0x03030303u) | (__funnelshift_r(third << 2, third >> 30, 4 * hi + t / 2 + 2 * up) & ~0x03030303u);
            const uint32_t v = qgemm_wgmma::and_or(__byte_perm(q, 0, pair_sel), kKind == kQ3_K ? 0x00070007u : 0x00030003u, 0x64006400u);
            const __half2 qh = __hsub2(qgemm_wgmma::as_h2(v), qgemm_wgmma::h2_const(0x6400));  // - 1024
            f[4 * (2 * half + hi) + 2 * up + i] = qgemm_wgmma::as_u32(__hfma2(qh, ds, off));
          }
        }
      });
    } else if constexpr (kKind == kQ8_0) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const int b = 2 * s4 + kk / 2, chunk = 2 * (b % 4) + kk % 2;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int r = r0 + 8 * i;
          const uint8_t* row = slot + size_t(b / 4) * 128 * 128 + size_t(r) * 128;
          const uint32_t x = pick4(row + 16 * (chunk ^ (r % 8)), t);
          const __half2 d = d_of(i, b);
          f[4 * kk + i] = q8_pair(x, false, d);
          f[4 * kk + 2 + i] = q8_pair(x, true, d);
        }
      }
    } else {
      // Q4_K / Q5_K in Q4_0's order: sub-block b = 2 s4 + half covers k16 steps 2 half, 2 half + 1,
      // its scale and min from the header in aux; Q5_K's fifth bits from the slot's third box.
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = r0 + 8 * i;
        const float d = __half2float(__ushort_as_half(uint16_t(aux[i][0].x)));
        const float dmin = __half2float(__ushort_as_half(uint16_t(aux[i][0].x >> 16)));
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int b = 2 * s4 + half;
          float sc, mn;
          qgemm_wgmma::q4k_scale_min_words(b, aux[i][0], sc, mn);
          __half2 ds, off;
          qgemm_wgmma::q4k_half_scales(d * sc, dmin * mn, ds, off);
          const uint32_t x = pick4(slot + size_t(r) * 128 + 16 * (b ^ (r % 8)), t);
          nibble_frags(x, kKind == kQ5_K ? fifth(slot, r, b) : 0u, t, half, i, ds, off, f);
        }
      }
    }
  }
};

// Shared memory: X stages, the W ring (kBw / 128 sub-slots of q2_wgmma's layout per slot),
// barriers, and slack to align the base to 1024.
template <QKind kKind, int kBm, int kBw, int kStages>
constexpr size_t smem_bytes() {
  return size_t(kStages) * kBm * kBk * 2 + 2 * (kBw / 128) * Raw<kKind>::template kSlotBytes<128> + 1024 + 1024;
}

// f(integral_constant<int, I>) for I = 0 .. N - 1, unrolled.
template <int N, int I = 0, class F>
__device__ __forceinline__ void unroll(F&& f) {
  if constexpr (I < N) {
    f(std::integral_constant<int, I>{});
    unroll<N, I + 1>(f);
  }
}

// The GLU of a gated problem's epilogue (the GEMV epilogue's functions: the same numbers).
__device__ __forceinline__ float glu(float g, float u, bool gelu) { return (gelu ? gelu_tanh(g) : silu(g)) * u; }

// Registers a thread of each role gets (setmaxnreg) with kBlocks blocks resident per SM: one
// block takes the whole register file (168 a thread at launch, 40 / 232 after), two take half
// (80 at launch, 24 / 104 after: 128 x 24 + 256 x 104 <= 384 x 80).
template <int kBlocks>
inline constexpr int kProducerRegs = kBlocks == 1 ? 40 : 24;
template <int kBlocks>
inline constexpr int kConsumerRegs = kBlocks == 1 ? 232 : 104;

template <QKind kKind, int kBm, int kBw, int kStages, bool kGlu, int kBlocks>
__global__ void __launch_bounds__(kThreads, kBlocks)
    qgemm_rs_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ typename Raw<kKind>::Args w,
                    const __grid_constant__ typename Raw<kKind>::Args w_up, bool gelu, tc_gemm::Out out, int splits,
                    int64_t m, int64_t n, int64_t k) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // kBw = 256: each consumer warpgroup owns two 64-row halves (sub-slot h holds weight rows
  // 128 h .. 128 h + 127; gated, sub-slot 1 holds the up matrix's rows of sub-slot 0's gate
  // rows), so every X stage feeds twice the weight rows. kTileN: the block's columns of C.
  constexpr int kHalves = kBw / 128, kTileN = kGlu ? 128 : kBw;
  static_assert(kHalves == 1 || kHalves == 2, "128 or 256 weight rows per block");
  static_assert(!kGlu || kHalves == 2, "a gated block holds gate and up halves");
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = tma::align_1024(smem_raw);
  constexpr size_t kStageBytes = size_t(kBm) * kBk * 2, kSubBytes = Raw<kKind>::template kSlotBytes<128>;
  constexpr size_t kSlotBytes = kHalves * kSubBytes;
  uint8_t* xs = smem;                          // [kStages][kBm][64] f16, swizzled
  uint8_t* ring = xs + kStages * kStageBytes;  // [2][kHalves][kSubBytes]
  auto* full_x = reinterpret_cast<uint64_t*>(ring + 2 * kSlotBytes);
  uint64_t* empty_x = full_x + kStages;
  uint64_t* full_w = empty_x + kStages;  // [2]
  uint64_t* empty_w = full_w + 2;        // [2]
  constexpr int kConsumerWarps = 8;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) tma::mbar_init(&full_x[s], 1), tma::mbar_init(&empty_x[s], kConsumerWarps);
    for (int i = 0; i < 2; ++i) tma::mbar_init(&full_w[i], kHalves), tma::mbar_init(&empty_w[i], kConsumerWarps);
    tma::mbar_fence_init();
  }
  __syncthreads();
  const wgmma_gemm::Schedule sched(m, n, k, kBm, kTileN, splits);
  constexpr int kGroup = Raw<kKind>::kStepsPerSlot;  // k-steps per W slot
  const int wg = int(threadIdx.x) / kWgThreads;
  if (wg == 0) {  // producer: thread 0 issues the copies, in the order the consumers use them
    tma::setmaxnreg_dec<kProducerRegs<kBlocks>>();
    if (threadIdx.x != 0) return;
    int s = 0, ws = 0;
    uint32_t phase = 0, wphase = 0;
    for (int64_t u = blockIdx.x; u < sched.units; u += gridDim.x) {
      int64_t m0, n0;
      int split, kt0, kt1;
      sched.unit(u, kTileN, m0, n0, split, kt0, kt1);
      for (int kt = kt0; kt < kt1; ++kt) {
        if (kt == kt0 || kt % kGroup == 0) {
          tma::mbar_wait(&empty_w[ws], wphase ^ 1);
          for (int h = 0; h < kHalves; ++h)  // one arrival (with its bytes) per sub-slot
            Raw<kKind>::template issue_raw<128>(kGlu && h == 1 ? w_up : w, kGlu ? n0 : n0 + 128 * h, kt / kGroup,
                                                ring + ws * kSlotBytes + h * kSubBytes, &full_w[ws]);
          if (++ws == 2) ws = 0, wphase ^= 1;
        }
        tma::mbar_wait(&empty_x[s], phase ^ 1);
        tma::mbar_arrive_expect_tx(&full_x[s], uint32_t(kStageBytes));
        tma::load_2d(xs + s * kStageBytes, &map_x, kt * kBk, int(m0), &full_x[s]);
        if (++s == kStages) s = 0, phase ^= 1;
      }
    }
    return;
  }
  tma::setmaxnreg_inc<kConsumerRegs<kBlocks>>();
  const int c = wg - 1, warp = (int(threadIdx.x) / 32) % 4, lane = int(threadIdx.x) % 32;
  const int r0 = 64 * c + 16 * warp + lane / 4, t = lane % 4;  // row within a 128-row sub-slot
  int s = 0, ws = 0;
  uint32_t phase = 0, wphase = 0;
  Frags<kKind> fr[kHalves];
  using I0 = std::integral_constant<int, 0>;
  using I1 = std::integral_constant<int, kHalves - 1>;
  for (int64_t u = blockIdx.x; u < sched.units; u += gridDim.x) {
    int64_t m0, n0;
    int split, kt0, kt1;
    sched.unit(u, kTileN, m0, n0, split, kt0, kt1);
    // (Split-K can leave the last units empty: the producer skips them, the k-step loop below
    // runs no step of theirs, and their partials are stored as zeros: splitk_reduce sums every plane.)
    // One accumulator array per half, not a 2-D array: ptxas kept the 2-D one on the stack
    // (and serialised the wgmmas reading it).
    float acc0[kBm / 2], acc1[kHalves == 2 ? kBm / 2 : 1];
#pragma unroll
    for (int i = 0; i < kBm / 2; ++i) acc0[i] = 0.f;
#pragma unroll
    for (int i = 0; i < int(sizeof(acc1) / sizeof(float)); ++i) acc1[i] = 0.f;
    int prev = -1;
    // Half h of k-step kt: convert its fragments into f (which the wgmma group before last has
    // stopped reading), then its four k16 products against the X stage, one commit group. After
    // each group only the newest stays in flight, so at half 0 the previous k-step is done with
    // its X stage.
    // s4c: kt's place in its W slot (kt % kGroup), a constant of the unrolled step.
    auto sub = [&](int kt, auto s4c, auto hc, uint32_t (&f)[16], float (&a)[kBm / 2]) {
      constexpr int h = decltype(hc)::value, s4 = decltype(s4c)::value;
      uint8_t* slot = ring + ws * kSlotBytes;
      if (h == 0 && (s4 == 0 || kt == kt0)) {
        // (the super-blocks' records first: their loads overlap the wait for the slot)
        if constexpr (Raw<kKind>::kSupers)
#pragma unroll
          for (int hh = 0; hh < kHalves; ++hh)
            fr[hh].load_supers(kGlu && hh == 1 ? w_up : w, kGlu ? n0 : n0 + 128 * hh, kt / kGroup, r0);
        tma::mbar_wait(&full_w[ws], wphase);
#pragma unroll
        for (int hh = 0; hh < kHalves; ++hh) fr[hh].load_aux(slot + hh * kSubBytes, r0);
      }
      fr[h].convert(slot + h * kSubBytes, r0, t, s4, f);
      if (h == kHalves - 1 && (s4 == kGroup - 1 || kt + 1 == kt1)) {  // done with this slot
        __syncwarp();
        if (lane == 0) tma::mbar_arrive(&empty_w[ws]);
        if (++ws == 2) ws = 0, wphase ^= 1;
      }
      if (h == 0) tma::mbar_wait(&full_x[s], phase);
      const uint64_t dx = tma::desc_k_major_sw128(xs + s * kStageBytes);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint32_t fk[4] = {f[4 * kk], f[4 * kk + 1], f[4 * kk + 2], f[4 * kk + 3]};
        wgmma::wgmma_m64k16_rs<kBm>(a, fk, dx + 2 * kk, 1);  // +32 bytes of K per k16: +2
      }
      wgmma::commit();
      wgmma::wait<1>();
      if (h == 0) {
        if (prev >= 0 && lane == 0) tma::mbar_arrive(&empty_x[prev]);
        prev = s;
      }
      if (h == kHalves - 1 && ++s == kStages) s = 0, phase ^= 1;
    };
    uint32_t fa[16], fb[16];
    // The k-steps a W slot (kGroup steps) at a time, unrolled, so that a step's place in its slot
    // is a constant: its fragments' offsets and the d words it takes are then fixed (a run-time
    // kt % kGroup made them chains of selects and address arithmetic in every step). A split's
    // range may start or end inside a slot. Fragment buffers alternate with each conversion: fa
    // for half 0 and fb for half 1, or, with one half, by the parity of kt.
    for (int g = kt0 - kt0 % kGroup; g < kt1; g += kGroup) {
      unroll<kGroup>([&](auto s4c) {
        constexpr int s4 = decltype(s4c)::value;
        const int kt = g + s4;
        if (kt < kt0 || kt >= kt1) return;
        if constexpr (kHalves == 2) sub(kt, s4c, I0{}, fa, acc0), sub(kt, s4c, I1{}, fb, acc1);
        else if constexpr (s4 % 2 == 0) sub(kt, s4c, I0{}, fa, acc0);
        else sub(kt, s4c, I0{}, fb, acc0);
      });
    }
    wgmma::wait<0>();
    if (lane == 0 && prev >= 0) tma::mbar_arrive(&empty_x[prev]);
    // After the block's last mainloop: the kernel after this one (splitk_reduce, launched with
    // PDL) may be scheduled while the epilogues store.
    if (u + gridDim.x >= sched.units) pdl_launch_dependents();
    tc_gemm::Out o = out;  // split-K: this split's f32 plane of the workspace
    if (splits > 1) o.c = static_cast<float*>(out.c) + split * m * n;
    auto store = [&](const float (&a)[kBm / 2], int64_t col) {  // a thread's two columns, every row
      const tc_gemm::OutColumn c0 = tc_gemm::out_column(o, col), c8 = tc_gemm::out_column(o, col + 8);
#pragma unroll
      for (int j = 0; j < kBm / 8; ++j) {
        const int64_t row = m0 + 8 * j + 2 * t;
        tc_gemm::out_store(o, c0, row, a[4 * j]);
        tc_gemm::out_store(o, c0, row + 1, a[4 * j + 1]);
        tc_gemm::out_store(o, c8, row, a[4 * j + 2]);
        tc_gemm::out_store(o, c8, row + 1, a[4 * j + 3]);
      }
    };
    if constexpr (kGlu) {
#pragma unroll
      for (int i = 0; i < kBm / 2; ++i) acc0[i] = glu(acc0[i], acc1[i], gelu);
      store(acc0, n0 + r0);
    } else {
      store(acc0, n0 + r0);
      if constexpr (kHalves == 2) store(acc1, n0 + 128 + r0);
    }
  }
#else
  __trap();  // built for another architecture; the variant's supports() keeps launches away
#endif
}

// Launches the persistent grid (wgmma_gemm::launch_persistent: split-K, shared memory, grid).
// A gated problem (p.b_up) takes the kGlu instances, without split-K (the GLU is not linear).
// kBlocks: blocks per SM the instance is compiled for (2: half the registers each, so that small
// tiles in many K splits keep twice the warps in flight; the grid fills what fits).
template <QKind kKind, int kBm, int kBw, int kStages, bool kGlu = false, int kBlocks = 1>
Status launch(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  if (kGlu != (p.b_up != nullptr) || (kGlu && c.splits != 1)) return Status::error("q3_wgmma_rs: gated problem and instance differ");
  typename Raw<kKind>::Args w{}, w_up{};
  GemmProblem up = p;
  up.b = p.b_up;
  if (!qgemm_wgmma::make_args<kKind, 128>(p, w) || (kGlu && !qgemm_wgmma::make_args<kKind, 128>(up, w_up)))
    return Status::error("q3_wgmma_rs: the driver refused the TMA descriptors of W");
  constexpr int kTileN = kGlu ? 128 : kBw;
  const int64_t tiles = ((p.m + kBm - 1) / kBm) * ((p.n + kTileN - 1) / kTileN);
  return wgmma_gemm::launch_persistent(qgemm_rs_kernel<kKind, kBm, kBw, kStages, kGlu, kBlocks>, kThreads,
                                       smem_bytes<kKind, kBm, kBw, kStages>(), kBlocks, kBm, false, tiles, w, p, c, "q3_wgmma_rs", s,
                                       w_up, p.gelu);
}

// The instances: each launch<kind, bm, bw, 4> of run_kind below is compiled in a translation unit
// of its own, which src/CMakeLists.txt writes (qgemm_rs_<type>_<bm>x<bw>.cu in the build tree):
// one took minutes of nvcc, and twelve of them in three files set the length of every build. The
// dispatch (qgemm_rs.cu) declares them extern.
#define LAMINA_QGEMM_RS_EXTERN(kind)                                                                 \
  extern template Status launch<kind, 256, 128, 4>(const GemmProblem&, const GemmConfig&, cudaStream_t); \
  extern template Status launch<kind, 128, 128, 4>(const GemmProblem&, const GemmConfig&, cudaStream_t); \
  extern template Status launch<kind, 64, 128, 4>(const GemmProblem&, const GemmConfig&, cudaStream_t);  \
  extern template Status launch<kind, 64, 128, 4, false, 2>(const GemmProblem&, const GemmConfig&, cudaStream_t); \
  extern template Status launch<kind, 64, 256, 4>(const GemmProblem&, const GemmConfig&, cudaStream_t);   \
  extern template Status launch<kind, 64, 256, 4, true>(const GemmProblem&, const GemmConfig&, cudaStream_t); \
  extern template Status launch<kind, 128, 256, 4, true>(const GemmProblem&, const GemmConfig&, cudaStream_t);

// The dispatch of one weight type to its instances (qgemm_rs.cu).
template <QKind kKind>
Status run_kind(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  // Gated: bn = 128 columns of C, each block 128 gate and 128 up rows (kBw 256); 64 or 128
  // activation rows (256 would need 256 accumulators a thread).
  if (p.b_up) {
    if (c.stages == 4 && c.bn == 128 && c.splits == 1 && c.bm == 64) return launch<kKind, 64, 256, 4, true>(p, c, s);
    if (c.stages == 4 && c.bn == 128 && c.splits == 1 && c.bm == 128) return launch<kKind, 128, 256, 4, true>(p, c, s);
    return Status::error("q3_wgmma_rs: no gated instance for config " + c.str());
  }
  if (c.stages == 4 && c.bn == 128) {
    if (c.bm == 256) return launch<kKind, 256, 128, 4>(p, c, s);
    if (c.bm == 128) return launch<kKind, 128, 128, 4>(p, c, s);
    if (c.bm == 64 && c.splits == 8) return launch<kKind, 64, 128, 4, false, 2>(p, c, s);  // two blocks an SM
    if (c.bm == 64) return launch<kKind, 64, 128, 4>(p, c, s);
  }
  // Two 64-row halves per consumer warpgroup: half the X traffic per weight row (the fastest
  // config at 16-64 activation rows; at 128 and more, 256-row weight tiles never won in kbench).
  if (c.stages == 4 && c.bn == 256 && c.bm == 64) return launch<kKind, 64, 256, 4>(p, c, s);
  return Status::error("q3_wgmma_rs: no instance for config " + c.str());
}

// The dispatch of p.b_type to its kind's instances (qgemm_rs.cu).
Status run(const GemmProblem& p, const GemmConfig& c, cudaStream_t s);

}  // namespace lamina::kernels::qgemm_rs

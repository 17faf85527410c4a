// q3_wgmma_rs's fragment conversions (qgemm_rs.cuh runs them): each consumer thread turns the raw
// bytes of a ring slot (q2_wgmma's DequantB slot layouts, 4 k-steps each) into its own wgmma A
// fragments in registers, for every weight type the kernel takes.
//
//   thread: lane (g = lane / 4, t = lane % 4) of warp w of consumer c owns weight rows
//           r0 = 64 c + 16 w + g and r0 + 8, k offsets 2t, 2t+1, 2t+8, 2t+9 of each k16 step
//   f[4 kk + reg]: k16 step kk of a k-step, wgmma's A register order
//
// Values are the same f16 numbers q2_wgmma stages (one rounding of the dequantised weight; Q4_K:
// and of its scale pair first, q4k_half_scales); Q6_K, Q3_K, Q2_K and IQ4_XS round their sub-block
// scale (d sc, Q2_K's pair, d (ls - 32)) to f16 first too.
#pragma once

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
  // bits, two for each pair of bytes (elements e = 2t + 8 upper + 16 hi, e + 1), element e's at bit
  // 8 (e % 4) + e / 4 (gemv_k23.cuh): after a shift by 16 (t % 2) + t / 2, the pair's two at bits
  // s = 2 upper + 4 hi and s + 8. They go under the two nibbles by one multiply: y (2^p + 2^(p + 8))
  // with y = bits s and s + 8 at 0 and 8 holds y's bit 0 at p and its bit 8 at p + 16 (a carry out
  // of p + 8 stops at p + 9) (p = 4 under the low nibbles, 8 under the high ones); the same bits as
  // nibble_pair5 places one at a time.
  __device__ static void nibble_frags(uint32_t x, uint32_t fb, int t, int half, int i, __half2 d, __half2 off,
                                      uint32_t (&f)[16]) {
    const uint32_t fbt = fb >> (16 * (t % 2) + t / 2);  // the thread's pairs' fifth bits at bits 0, 2, 4, 6 (and 8 above)
#pragma unroll
    for (int hi = 0; hi < 2; ++hi)
#pragma unroll
      for (int up = 0; up < 2; ++up) {
        uint32_t& out = f[4 * (2 * half + hi) + 2 * up + i];
        if constexpr (Raw<kKind>::kFifth) {
          const uint32_t spread = ((fbt >> (2 * up + 4 * hi)) & 0x101u) * (hi ? 0x00010100u : 0x00001010u);
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

}  // namespace lamina::kernels::qgemm_rs

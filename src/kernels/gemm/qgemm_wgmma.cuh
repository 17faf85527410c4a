// q2_wgmma: quantised weights on Hopper tensor cores — the wgmma_gemm.cuh mainloop with a
// producer warpgroups that dequantise. A (f16 activations) arrives by TMA as in h2_wgmma. The
// quantised bytes of W arrive by TMA too, up to 8 k-steps ahead, into a ring of raw slots; each
// of the 256 producer threads then owns half a row of the 128-row stage: it reads its bytes from
// the slot, converts them to f16 with integer tricks (no conversion instructions for Q8_0/Q4_0),
// writes them in the 128-byte-swizzled layout wgmma reads, fences the async proxy and arrives
// on the stage's "full" barrier. No dequantised copy of W exists in memory.
//
// Measured (ncu, M=512 Q8_0): an earlier version fetched the raw bytes with per-thread loads
// (registers, then cp.async); the proxy fence each thread needs before its arrival then also
// waited for those loads, one memory latency per k-step (1.1 us/step, 42 % of cuBLAS f16).
// TMA copies are not the thread's generic-proxy accesses, so the fence only covers the stores.
//
// W as TMA boxes over byte views, 4 k-steps (256 weights per row) per ring slot:
//   Q8_0, Q4_0: the repacked planes of gemv_repack (quants [n][k or k/2], then f16 d [n][k/32])
//   Q4_K:       the repacked planes too: quants [n][k/2] in Q4_0's order, then the 16-byte
//               super-block headers [n][k/256] (d, dmin, 12 scale bytes): a ring slot's 16 bytes
//               of aux per row are its super-block's header where Q4_0 has its eight d
//   Q5_K:       Q4_K's, and the fifth bits [n][k/32] u32 between quants and headers: a third box
//               per slot, its bits set above each nibble in the f16 conversion
//   Q5_0:       Q4_0's with Q5_K's fifth bits between quants and d (gemv_block32_planes.cu; read
//               by q3_wgmma_rs only)
//   Q5_1:       Q5_0's with (d, m) pairs: an aux box of 32 bytes per row (q3_wgmma_rs only)
//   Q4_1:       Q4_0's quants with Q5_1's (d, m) aux box (q3_wgmma_rs only)
//   Q6_K:       gemv_q6k.cu's planes: ql as Q4_0's quants, the int8 scales as Q4_0's d (16 bytes a
//               slot), the qh words in a third box (64 bytes a slot); d per super-block read by the
//               consumers from global memory (its plane's rows, k / 128 bytes, are no TMA stride)
//               (q3_wgmma_rs only)
//   IQ4_NL:     Q4_0's, the quants in consecutive order: indices into the IQ4 table
//               (gemv_block32_planes.cu; q3_wgmma_rs only)
//   IQ4_XS:     IQ4_NL's quants, no aux box: the 8-byte super-block headers (d, the 6-bit scales)
//               read by the consumers from global memory (gemv_iq4xs.cu's planes; their rows,
//               k / 32 bytes, are no TMA stride where k / 256 is odd) (q3_wgmma_rs only)
//   Q3_K, Q2_K: gemv_k23.cuh's planes: the low 2 bits as the quants (64 bytes a row and slot, no
//               swizzle), the 16 scales of the slot as Q6_K's (Q3_K int8, Q2_K scale | min << 4),
//               Q3_K's third bits in a third box (32 bytes), the super-block's d (Q2_K: (d, dmin))
//               from global memory as Q6_K's (q3_wgmma_rs only)
// Slot layouts (issue_raw) keep each thread's 16-byte reads of its own row free of bank conflicts
// (not the 4-byte words of the third boxes and of Q2_K's / Q3_K's 64-byte quant rows: eight rows a
// 64-byte stride apart meet in two banks).
// Values are rounded to f16 once after scaling, as a dequantised f16 copy would be (Q4_K, Q2_K: the
// scale pair is rounded to f16 first, q4k_half_scales; Q6_K, Q3_K, IQ4_XS: the sub-block scale).
// Figures: docs/benchmarks.md (lamina kbench gemm).
#pragma once

#include "kernels/gemm/wgmma_gemm.cuh"

namespace lamina::kernels::qgemm_wgmma {

using wgmma_gemm::kBk;
using wgmma_gemm::kWgThreads;

enum QKind { kQ8_0, kQ4_0, kQ4_K, kQ5_K, kQ5_0, kIQ4_NL, kQ5_1, kQ6_K, kIQ4_XS, kQ3_K, kQ2_K, kQ4_1 };

__device__ __forceinline__ __half2 as_h2(uint32_t u) { return *reinterpret_cast<const __half2*>(&u); }
__device__ __forceinline__ uint32_t as_u32(__half2 h) { return *reinterpret_cast<const uint32_t*>(&h); }
__device__ __forceinline__ __half2 h2_const(uint16_t bits) { return as_h2(uint32_t(bits) * 0x10001u); }

// One pair of a Q8_0 fragment: the signed bytes 0, 1 (or 2, 3 when `upper`) of w, as the half2
// q * d. Each byte, biased to q + 128, becomes the low mantissa byte of f16 0x64xx = 1024 + q +
// 128, so subtracting 1152 leaves q exactly; the product is the one rounding.
__device__ __forceinline__ uint32_t q8_pair(uint32_t w, bool upper, __half2 d) {
  const uint32_t h = __byte_perm(w ^ 0x80808080u, 0x64646464u, upper ? 0x4342 : 0x4140);
  return as_u32(__hmul2(__hsub2(as_h2(h), h2_const(0x6480)), d));  // 0x6480: 1152
}

// Eight signed bytes (w0, w1) -> eight f16 q * d.
__device__ __forceinline__ uint4 q8x8_to_f16(uint32_t w0, uint32_t w1, __half2 d) {
  return {q8_pair(w0, false, d), q8_pair(w0, true, d), q8_pair(w1, false, d), q8_pair(w1, true, d)};
}

// (a & mask) | bits as one LOP3: written in C++, the two constants became two LOP3s, each with
// one of them as its immediate (ptxas keeps one of these in a register, set once).
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t mask, uint32_t bits) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(bits));  // 0xEA: (a & b) | c
  return d;
}

// The low (or, when `high`, the high) nibbles of bytes 0, 1 (or 2, 3 when `upper`) of w as a
// half2 holding the integers 0..15 exactly: the nibble sits under f16 exponent 0x64 (1024 + q,
// or 1024 + 16 q).
__device__ __forceinline__ __half2 nibble_pair(uint32_t w, bool upper, bool high) {
  const uint32_t pair = __byte_perm(w, 0, upper ? 0x4342 : 0x4140);  // the two bytes -> the low byte of each half
  if (high) return __hfma2(as_h2(and_or(pair, 0x00F000F0u, 0x64006400u)), h2_const(0x2C00), h2_const(0xD400));  // /16 - 64
  return __hsub2(as_h2(and_or(pair, 0x000F000Fu, 0x64006400u)), h2_const(0x6400));                             // - 1024
}

// nibble_pair with a fifth bit each (bits 0 and 8 of f2, for bytes 0 and 1 of the pair: the fifth-bit
// plane's order, gemv_k23.cuh): the integers 0..31 exactly, the bit placed above the nibble under
// the same exponent.
__device__ __forceinline__ __half2 nibble_pair5(uint32_t w, bool upper, bool high, uint32_t f2) {
  const uint32_t pair = __byte_perm(w, 0, upper ? 0x4342 : 0x4140);
  const uint32_t fifth = high ? (f2 & 1u) << 8 | (f2 & 0x100u) << 16 : (f2 & 1u) << 4 | (f2 & 0x100u) << 12;
  if (high) return __hfma2(as_h2(and_or(pair, 0x00F000F0u, 0x64006400u) | fifth), h2_const(0x2C00), h2_const(0xD400));
  return __hsub2(as_h2(and_or(pair, 0x000F000Fu, 0x64006400u) | fifth), h2_const(0x6400));
}

// Eight 4-bit values (the low or the high nibbles of the bytes of w0, w1) -> four half2 of 0..15.
__device__ __forceinline__ void nibbles_to_f16(uint32_t w0, uint32_t w1, bool high, __half2 (&q)[4]) {
  q[0] = nibble_pair(w0, false, high), q[1] = nibble_pair(w0, true, high);
  q[2] = nibble_pair(w1, false, high), q[3] = nibble_pair(w1, true, high);
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// Q4_K's sub-block scale pair (ds = d sc, dm = dmin m, exact in f32) as the half2 operands of
// q * ds - dm: each rounded to f16 once, so that the nibbles convert as Q4_0's do (one HFMA2 per
// two weights, q exact in f16) with one more rounding in the product. (Its first form computed
// q * ds - dm in f32 and packed the pair: three times the instructions per weight, which held the
// Q4_K GEMMs to 50-62 % of cuBLAS at M = 512 where Q4_0's reach 74-86 %.)
__device__ __forceinline__ void q4k_half_scales(float ds, float dm, __half2& d2, __half2& off) {
  d2 = __float2half2_rn(ds), off = __float2half2_rn(-dm);
}

// Q4_K's 6-bit scale and min of sub-block j from the header words y, z, w (bytes 4..15).
__device__ __forceinline__ void q4k_scale_min_words(int j, const uint4& h, float& sc, float& mn) {
  auto byte = [&](int i) { return (word(h, 1 + i / 4) >> (8 * (i % 4))) & 0xFFu; };
  if (j < 4) {
    sc = float(byte(j) & 63u), mn = float(byte(j + 4) & 63u);
  } else {
    sc = float((byte(j + 4) & 0xFu) | ((byte(j - 4) >> 6) << 4));
    mn = float((byte(j + 4) >> 4) | ((byte(j) >> 6) << 4));
  }
}

template <QKind kKind, int kBn>
struct DequantB {
  static constexpr bool kK23 = kKind == kQ3_K || kKind == kQ2_K;  // 2-bit planes (gemv_k23.cuh)
  static constexpr int kQBytes = kKind == kQ8_0 ? 64 : kK23 ? 16 : 32;  // quant bytes per row per k-step
  static constexpr int kQBox = kK23 ? 64 : 128;  // a quant box's row: 128 bytes swizzled, or Q2_K/Q3_K's 64 plain
  static constexpr bool kK = kKind == kQ4_K || kKind == kQ5_K;  // a super-block header as aux
  static constexpr bool kFifth = kKind == kQ5_K || kKind == kQ5_0 || kKind == kQ5_1;  // a plane of fifth bits
  static constexpr bool kHigh = kFifth || kKind == kQ6_K || kKind == kQ3_K;  // a third box: fifth bits, Q6_K's high 2 bits, Q3_K's third
  static constexpr int kHi = kKind == kQ6_K ? 64 : 32;     // its bytes per row and slot
  // aux bytes per row and slot: 8 d, a K header, 8 (d, m) (Q5_1, Q4_1), 16 int8 scales (Q6_K), none (IQ4_XS)
  static constexpr int kAux = kKind == kQ5_1 || kKind == kQ4_1 ? 32 : kKind == kIQ4_XS ? 0 : 16;
  // a plane of one record per row and super-block that the consumers read from global memory:
  // Q6_K's and Q3_K's f16 d, Q2_K's (d, dmin), IQ4_XS's 8-byte header
  static constexpr bool kSupers = kKind == kQ6_K || kKind == kIQ4_XS || kK23;
  struct Maps {
    CUtensorMap q;    // quant bytes, box [kBn][kQBox]
    CUtensorMap aux;  // box [kBn][kAux]: the d of 4 k-steps (Q8_0, Q4_0, Q5_0, IQ4_NL), their super-block header (Q4_K, Q5_K),
                      // Q5_1's and Q4_1's (d, m), the 16 scales (Q6_K, Q3_K, Q2_K); unused for IQ4_XS
  };
  struct Maps5 : Maps {
    CUtensorMap hi;  // Q5_K, Q5_0, Q5_1: the fifth bits, box [kBn][32] (a word per block of 32); Q6_K: qh, [kBn][64]; Q3_K: [kBn][32]
  };
  template <class Maps0>
  struct WithSupers : Maps0 {
    const uint8_t* d;  // Q6_K, Q3_K: the d plane [n][k/256] f16; Q2_K: (d, dmin); IQ4_XS: the headers [n][k/256][8]
    int64_t n, supers;
  };
  using Base = std::conditional_t<kHigh, Maps5, Maps>;
  using Args = std::conditional_t<kSupers, WithSupers<Base>, Base>;
  static constexpr uint32_t kTmaBytes = 0;
  // Two producer warpgroups; thread pt converts half of row pt % kBn (chunks 0-3 or 4-7 of the
  // k-step's eight 8-weight chunks). Only BN = 128 is built: a 4-step ring slot of BN = 256 rows
  // leaves no shared memory for the f16 stages.
  static_assert(kBn == 128, "q2_wgmma's producers cover 128 rows (2 warpgroups x 128 threads / 2 halves)");
  static constexpr int kProducerWgs = 2, kProducerThreads = kProducerWgs * kWgThreads;
  static constexpr int kArrivals = kProducerThreads, kProducerRegs = 0;
  static constexpr bool kAllThreads = true;
  static constexpr int kChunks = 4;  // chunks per thread
  // A ring slot holds 4 k-steps (256 weights per row: one K super-block), so that each TMA box row
  // of quants moves 128 bytes (then 16 of scales or header, and Q5_K's 32 of fifth bits, in boxes of
  // their own): with 32- or 64-byte box rows (one k-step) the copies were
  // limited by the rate of row requests, not by bytes (Q8_0 and Q4_0 ran equally slowly). (Q2_K's
  // and Q3_K's 2-bit quants are 64 bytes a row for the slot's 4 k-steps.)
  static constexpr int kSlots = 2, kStepsPerSlot = 4;
  static constexpr int kSlotRow = 4 * kQBytes + kAux + (kHigh ? kHi : 0);  // bytes per weight row per slot
  template <int kB>
  static constexpr size_t kSlotBytes = size_t(kB) * kSlotRow;

  struct Row {
    uint4 q[kQBytes / 16];
    std::conditional_t<kK, uint4, uint32_t> aux;  // the K header, or the two f16 d
    uint2 hb;  // Q5_K, Q5_0, Q5_1: the fifth bits of the step's two blocks
  };

  // Thread 0: group g (k-steps 4g .. 4g+3) into a ring slot (rows beyond N arrive as zero bytes;
  // their products are never stored).
  //   Q8_0  [2][kBn][128] quants (128-byte swizzle), then [kBn][16] d
  //   Q4_0  [kBn][128] quants (128-byte swizzle), then [kBn][16] d
  //   Q4_K  as Q4_0, the [kBn][16] being the rows' super-block headers
  //   Q5_K  as Q4_K, then [kBn][32] fifth bits (the slot's eight blocks' words)
  //   Q5_0, IQ4_NL as Q4_0 (Q5_0 with Q5_K's fifth bits); Q5_1 as Q5_0 with [kBn][32] (d, m); Q4_1
  //         as Q4_0 with Q5_1's (d, m);
  //   Q6_K  as Q4_0 with the scales for the d, then [kBn][64] qh words
  //   IQ4_XS the quants alone
  //   Q3_K  [kBn][64] low bits (no swizzle), [kBn][16] int8 scales, [kBn][32] third bits; Q2_K
  //         without the third bits, its scales as in the file
  template <int>
  __device__ static void issue_raw(const Args& b, int64_t n0, int g, uint8_t* slot, uint64_t* bar) {
    tma::mbar_arrive_expect_tx(bar, uint32_t(kSlotBytes<kBn>));
    constexpr int kQ = 4 * kQBytes;  // quant bytes per row per slot
    for (int h = 0; h < kQ / kQBox; ++h) tma::load_2d(slot + h * kBn * kQBox, &b.q, g * kQ + h * kQBox, int(n0), bar);
    if constexpr (kAux > 0) tma::load_2d(slot + kBn * kQ, &b.aux, g * kAux, int(n0), bar);
    if constexpr (kHigh) tma::load_2d(slot + kBn * (kQ + kAux), &b.hi, g * kHi, int(n0), bar);
  }

  // Row tr's bytes for k-step kt from its slot.
  __device__ static Row read(const uint8_t* slot, int tr, int kt) {
    Row x;
    const int s4 = kt % 4;
    // 16-byte chunk j of the step sits at logical chunk (s4 * kQBytes/16 + j) of a 128-byte
    // swizzled row (physical chunk: logical ^ (tr % 8)); Q8_0 steps 2, 3 in the second half.
    constexpr int kPer = kQBytes / 16;
    const uint8_t* half = slot + (kKind == kQ8_0 ? (s4 / 2) * kBn * 128 : 0) + size_t(tr) * 128;
    const int c0 = (kKind == kQ8_0 ? s4 % 2 : s4) * kPer;
#pragma unroll
    for (int j = 0; j < kPer; ++j) x.q[j] = *reinterpret_cast<const uint4*>(half + 16 * ((c0 + j) ^ (tr % 8)));
    const uint4 a = *reinterpret_cast<const uint4*>(slot + size_t(kBn) * 4 * kQBytes + size_t(tr) * kAux);
    if constexpr (kK) x.aux = a;
    else x.aux = word(a, s4);
    if constexpr (kFifth) x.hb = *reinterpret_cast<const uint2*>(slot + size_t(kBn) * (4 * kQBytes + kAux) + size_t(tr) * 32 + 8 * s4);
    return x;
  }

  // Chunk c (k = 8c .. 8c+7) of one row as eight f16.
  __device__ static uint4 chunk(const Row& x, int c, const float (&ds)[2], const float (&dm)[2]) {
    if constexpr (kKind == kQ8_0) {
      const __half2 d = __half2half2(__ushort_as_half(uint16_t(x.aux >> (c < 4 ? 0 : 16))));
      return q8x8_to_f16(word(x.q[c / 2], 2 * (c % 2)), word(x.q[c / 2], 2 * (c % 2) + 1), d);
    } else if constexpr (kKind == kQ4_0) {
      // block c/4; chunks 0, 1 of a block are the low nibbles of bytes 0..15, chunks 2, 3 the high
      const int blk = c / 4, w0 = 2 * (c % 2);
      __half2 v[4];
      nibbles_to_f16(word(x.q[blk], w0), word(x.q[blk], w0 + 1), (c % 4) >= 2, v);
      const __half2 d = __half2half2(__ushort_as_half(uint16_t(x.aux >> (16 * blk))));
      const __half2 off = __hneg2(__hmul2(h2_const(0x4800), d));  // -8 d is exact: one rounding of (q - 8) d
      uint32_t r[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) r[i] = as_u32(__hfma2(v[i], d, off));
      return {r[0], r[1], r[2], r[3]};
    } else {
      // as Q4_0: block c/4 (the step's sub-block 2 (kt % 4) + c/4), low nibbles then high
      const int blk = c / 4, w0 = 2 * (c % 2);
      __half2 v[4], d, off;
      if constexpr (kKind == kQ5_K) {  // the fifth bits of the chunk's eight values e0 + 0..7
        // (e0 = 8 (c % 2) + 16 high): element e's at bit 8 (e % 4) + e / 4 (gemv_k23.cuh), so those
        // of pair i (e0 + 2i, + 1) at bits 16 (i % 2) + i / 2 and 8 above it, after a shift by e0 / 4
        const bool high = (c % 4) >= 2;
        const uint32_t fb = (blk ? x.hb.y : x.hb.x) >> (4 * high + 2 * (c % 2));
        const uint32_t w[2] = {word(x.q[blk], w0), word(x.q[blk], w0 + 1)};
#pragma unroll
        for (int i = 0; i < 4; ++i) v[i] = nibble_pair5(w[i / 2], i % 2, high, fb >> (16 * (i % 2) + i / 2));
      } else {
        nibbles_to_f16(word(x.q[blk], w0), word(x.q[blk], w0 + 1), (c % 4) >= 2, v);
      }
      q4k_half_scales(ds[blk], dm[blk], d, off);
      uint32_t r[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) r[i] = as_u32(__hfma2(v[i], d, off));
      return {r[0], r[1], r[2], r[3]};
    }
  }

  // Chunks [kPart * kChunks, (kPart + 1) * kChunks) of row tr, converted and stored swizzled.
  template <int kPart>
  __device__ static void store_part(const uint8_t* slot, int tr, int kt, __half* stage) {
    const Row x = read(slot, tr, kt);
    float ds[2] = {}, dm[2] = {};
    if constexpr (kK) {
      const float d = __half2float(__ushort_as_half(uint16_t(x.aux.x)));
      const float dmin = __half2float(__ushort_as_half(uint16_t(x.aux.x >> 16)));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float sc, mn;
        q4k_scale_min_words(2 * (kt % 4) + h, x.aux, sc, mn);
        ds[h] = d * sc, dm[h] = dmin * mn;
      }
    }
    uint4* dst = reinterpret_cast<uint4*>(stage + size_t(tr) * kBk);  // a 128-byte row: 8 chunks
#pragma unroll
    for (int cc = 0; cc < kChunks; ++cc) {
      const int c = kPart * kChunks + cc;
      dst[c ^ (tr % 8)] = chunk(x, c, ds, dm);
    }
  }

  template <int>
  __device__ static void store(const Args&, int pt, int64_t, int kt, const uint8_t* slot, __half* stage, uint64_t* full) {
    // pt < kBn: first half of row pt; otherwise second half of row pt - kBn (uniform per warp)
    if (pt < kBn) store_part<0>(slot, pt, kt, stage);
    else store_part<1>(slot, pt - kBn, kt, stage);
    tma::fence_proxy_async_smem();  // the stores, before wgmma (async proxy) reads them
    tma::mbar_arrive(full);
  }
};

// Host: the tensor maps over W's bytes (false when the driver refuses them).
template <QKind kKind, int kBn>
bool make_args(const GemmProblem& p, typename DequantB<kKind, kBn>::Args& a) {
  const auto* w = static_cast<const uint8_t*>(p.b);
  const uint64_t n = uint64_t(p.n), k = uint64_t(p.k);
  // the scale planes (Q4_0's and Q5_0's d, the K headers) are k / 16 bytes a row (Q5_1's and Q4_1's
  // (d, m): k / 8); the fifth bits of Q5_K, Q5_0 and Q5_1 (k / 8 a row) lie between the quants and the scales
  // Q6_K: ql [n][k/2] | qh [n][k/4] | scales [n][k/16] | d [n][k/256] (gemv_q6k.cu)
  // IQ4_XS: quants [n][k/2] | headers [n][k/256][8] (gemv_iq4xs.cu)
  // Q3_K: low [n][k/4] | third bits [n][k/8] | scales [n][k/16] | d [n][k/256]; Q2_K: low | scales |
  // (d, dmin) (gemv_k23.cuh)
  using B = DequantB<kKind, kBn>;
  const uint64_t row = k / 256 * 4 * B::kQBytes, hi = B::kHigh ? k / 256 * B::kHi : 0, aux = k / 256 * B::kAux;
  bool ok = tma::encode_2d_bytes(&a.q, w, n, row, row, kBn, B::kQBox,
                                 B::kQBox == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE);
  if constexpr (B::kAux > 0)
    ok = ok && tma::encode_2d_bytes(&a.aux, w + n * (row + hi), n, aux, aux, kBn, B::kAux, CU_TENSOR_MAP_SWIZZLE_NONE);
  if constexpr (B::kHigh) ok = ok && tma::encode_2d_bytes(&a.hi, w + n * row, n, hi, hi, kBn, B::kHi, CU_TENSOR_MAP_SWIZZLE_NONE);
  if constexpr (B::kSupers) a.d = w + n * (row + hi + aux), a.n = int64_t(n), a.supers = int64_t(k / 256);
  return ok;
}

template <QKind kKind, int kBn, int kStages>
Status launch(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  typename DequantB<kKind, kBn>::Args b{};
  if (!make_args<kKind, kBn>(p, b)) return Status::error("q2_wgmma: the driver refused the TMA descriptors of W");
  return wgmma_gemm::launch<__half, kBn, kStages, DequantB<kKind, kBn>>(p, c, b, "q2_wgmma", s);
}

// The instances of one weight type (one translation unit each: qgemm_wgmma_<type>.cu).
template <QKind kKind>
Status run_kind(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  if (c.bn == 128 && c.stages == 4) return launch<kKind, 128, 4>(p, c, s);
  return Status::error("q2_wgmma: no instance for config " + c.str());
}

Status run_q8_0(const GemmProblem& p, const GemmConfig& c, cudaStream_t s);
Status run_q4_0(const GemmProblem& p, const GemmConfig& c, cudaStream_t s);
Status run_q4_k(const GemmProblem& p, const GemmConfig& c, cudaStream_t s);
Status run_q5_k(const GemmProblem& p, const GemmConfig& c, cudaStream_t s);

}  // namespace lamina::kernels::qgemm_wgmma

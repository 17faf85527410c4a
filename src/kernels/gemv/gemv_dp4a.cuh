// The weight step shared by the dp4a GEMVs on the repacked Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q4_K /
// Q5_K / Q6_K / IQ4_NL / IQ4_XS / Q2_K / Q3_K layouts (q_dp4a, q_dp4a_slots): loads of a block's quants (16 bytes; 8 for the
// 2- and 3-bit types) with their block scales, and their dp4a products with int8 x blocks
// (kernels/common/q8_blocks.h).
#pragma once

#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_iq4_split.cuh"
#include "kernels/gemv/gemv_k23.cuh"
#include "kernels/gemv/gemv_x8.cuh"

#include <cuda_fp16.h>
#include <cstdint>
#include <string>
#include <type_traits>

namespace lamina::kernels::gemv_detail {

// Where a chunk's block finds its scales in the repacked layouts (gemv.h), Dp4aStep's kScales:
//   kScaleD   f16 d per block of 32 (Q4_0, Q5_0, Q8_0):               w = d q (Q4_0: d (q - 8), Q5_0: d (q - 16))
//   kScaleDM  f16 (d, m) per block (Q4_1, Q5_1):                      w = d q + m
//   kScaleK   Q4_K's 16-byte super-block header per 8 blocks (d, dmin, the 12 bytes of 6-bit scales
//             and mins):                                              w = (d sc) q - (dmin m)
//   kScaleQ6  Q6_K's (and Q3_K's) int8 scale per 16 elements and f16 d per 256, planes of their own:
//                                                                     w = (d sc) (q - 32)  (Q3_K: q - 4)
//   kScaleXS  IQ4_XS's 8-byte super-block header per 8 blocks (d, the 6-bit scales ls), the quants
//             indices into the IQ4 table, in consecutive order (gemv_iq4xs.cu):
//                                                                     w = d (ls - 32) iq4[q]
//   kScaleQ2  Q2_K's byte per 16 elements (scale | min << 4) and f16 (d, dmin) per 256, planes of
//             their own (gemv_k23.cuh):                               w = d sc q - dmin m
//   kScaleNL  IQ4_NL's f16 d per block of 32, the quants indices into the IQ4 table in IQ4_XS's
//             consecutive order (gemv_block32_planes.cu):             w = d iq4[q]
enum Dp4aScales : int { kScaleD = 0, kScaleDM = 1, kScaleK = 2, kScaleQ6 = 3, kScaleXS = 4, kScaleQ2 = 5, kScaleNL = 6 };
// kBits: 8 (Q8_0: a byte per quant), 4 (nibbles in Q4_0's order: byte e of a block holds its
// elements e and e + 16), 5 (those nibbles, and after the quant plane a plane of one 32-bit word
// per block whose bit e is element e's fifth bit: Q5_0, Q5_1, Q5_K), 6 (those nibbles, and a
// plane of two 32-bit words per block with the high 2 bits of each half's elements: Q6_K,
// gemv_q6k.cu), 2 (Q2_K: two words of 2-bit quants per block, one per half, gemv_k23.cuh's low
// plane), 3 (Q3_K: those, and a plane of one word of third bits per block).


// One step of q_dp4a: each lane loads weight chunks l0 + u*32 + lane of kRows rows (16 bytes of
// quants; 8 for the 2- and 3-bit types) with their block scales (load), then multiplies them with
// int8 x blocks by dp4a (dot).
template <int kBits, int kScales, int kRows, int kUnroll>
struct Dp4aStep {
  static constexpr bool kMin = kScales == kScaleDM || kScales == kScaleK;  // a min term: + m_w sum(x)
  static constexpr bool kQ6 = kScales == kScaleQ6;  // two scales a block, one per half of 16 (Q6_K, Q3_K)
  static constexpr bool kQ2 = kScales == kScaleQ2;  // two scales and two mins a block (Q2_K)
  static constexpr bool kXs = kScales == kScaleXS;    // IQ4_XS's super-block headers
  static constexpr bool kLut = kXs || kScales == kScaleNL;  // the nibbles index the IQ4 table
  static constexpr bool kLow = kBits < 4;            // 2- and 3-bit: 8 bytes of quants a block
  static constexpr int kOffset = kBits == 6 ? 32 : 4;  // kQ6: q's offset (Q6_K 32, Q3_K 4)
  static constexpr int kPer = kBits == 8 ? 16 : 32;           // weights per chunk
  static_assert(kScales != kScaleK || kBits == 4 || kBits == 5, "the K-quant header goes with 4- or 5-bit quants");
  static_assert(kQ6 == (kBits == 6 || kBits == 3), "6- and 3-bit quants are Q6_K's and Q3_K's");
  static_assert(kQ2 == (kBits == 2), "2-bit quants are Q2_K's");
  static_assert(!kLut || kBits == 4, "IQ4_NL's and IQ4_XS's indices are 4-bit");
  static_assert(kBits != 5 || kScales == kScaleK || kScales == kScaleD || kScales == kScaleDM, "5-bit: Q5_0, Q5_1, Q5_K");
  static __device__ __forceinline__ int64_t loads(int64_t k) { return k / kPer; }
  // Bytes of one row's quant plane and of its high-bit plane (5-bit: fifth bits; 6-bit: high 2 bits).
  static __host__ __device__ constexpr size_t quant_row(int64_t k) { return size_t(k) * (kBits == 8 ? 8 : kLow ? 2 : 4) / 8; }
  static __host__ __device__ constexpr size_t high_row(int64_t k) {
    return kBits == 5 || kBits == 3 ? size_t(k) / 8 : kBits == 6 ? size_t(k) / 4 : 0;
  }
  // Bytes of one row's scale plane (Q6_K, Q3_K: the int8 scales' rows; the d plane follows them,
  // k / 128 bytes a row; Q2_K: the scale bytes' rows, then (d, dmin), k / 64 bytes a row).
  static __host__ __device__ constexpr size_t scale_row(int64_t k) {
    return size_t(k) / (kScales == kScaleDM ? 8 : kXs ? 32 : 16);
  }

  // A chunk's scales as loaded: (d, m) as floats, or Q4_K's header (decoded in dot, once the
  // load has landed).
  // Q6_K, Q3_K: its two int8 scales (x) and d's f16 bits (y).
  // Q2_K: its two scale bytes (x) and (d, dmin) (y).
  // IQ4_XS: its header (d | scales_h << 16, scales_l).
  using Aux = std::conditional_t<kScales == kScaleK, uint4, std::conditional_t<kQ6 || kXs || kQ2, uint2, float2>>;
  using Raw = std::conditional_t<kLow, uint2, uint4>;
  using High = std::conditional_t<kBits == 6, uint2, uint32_t>;
  struct Regs {
    Raw raw[kRows][kUnroll];
    Aux aux[kRows][kUnroll];
    High qh[kRows][kUnroll];  // (5-bit: the chunk's fifth bits; 6-bit: its high 2 bits, a word per half; 3-bit: its third bits)
  };

  // The repacked planes (gemv.h) hold a matrix's chunks row after row, so chunk c = row * loads(k) + l
  // sits at a fixed stride in each plane: its quants at q + c kQBytes, its high bits (5-, 3-bit: a
  // word; 6-bit: two) at h + c kHBytes, its scales at s + scale_off(c), the super-block d of the 6-,
  // 3- and 2-bit types at d + (c / 8) kDBytes. A load is then one multiply-add an address from the
  // row's chunk index, which each pass computes once for its rows (Rows), where the row-and-column
  // arithmetic in 64 bits per load had cost as many instructions as the products (docs/benchmarks.md,
  // sixty-seventh session).
  static constexpr uint32_t kQBytes = kLow ? 8 : 16;
  static constexpr uint32_t kHBytes = kBits == 6 ? 8 : (kBits == 5 || kBits == 3) ? 4 : 0;
  static constexpr uint32_t kDBytes = kQ2 ? 4 : 2;
  struct Planes {
    const uint8_t *q, *h, *s, *d;
  };
  static __device__ __forceinline__ Planes planes(const uint8_t* w, uint32_t n, uint32_t k) {
    Planes p;  // (32-bit factors: each product one wide multiply-add)
    p.q = w;
    p.h = w + size_t(n) * uint32_t(quant_row(k));
    p.s = p.h + size_t(n) * uint32_t(high_row(k));
    p.d = p.s + size_t(n) * uint32_t(scale_row(k));
    return p;
  }
  // The byte offset in the scale plane of the record chunk c reads (a row's chunk count is a
  // multiple of 8, so each row's records start at a whole record and c alone finds them).
  static __device__ __forceinline__ size_t scale_off(uint32_t c) {
    if constexpr (kXs) return size_t(c & ~7u);                // an 8-byte header per 8 chunks
    else if constexpr (kScales == kScaleK) return size_t(c & ~7u) * 2;  // 16 bytes per 8 chunks
    else if constexpr (kScales == kScaleDM) return size_t(c) * 4;      // (d, m) a chunk
    else if constexpr (kBits == 8) return size_t(c & ~1u);           // Q8_0: one f16 d per two 16-weight chunks
    else return size_t(c) * 2;                                 // an f16 d, or two int8 / byte scales, a chunk
  }
  // The chunk index of the lane's chunk 0 in each of rows row0.. (rows past n read row n - 1, so
  // that loads stay in bounds; their sums are not stored). 32 bits: the launch refuses a matrix
  // of 2^32 chunks or more (dp4a_chunks_fit).
  struct Rows {
    uint32_t c[kRows];
  };
  static __device__ __forceinline__ Rows rows(uint32_t row0, uint32_t n, uint32_t k) {
    Rows at;
#pragma unroll
    for (int r = 0; r < kRows; ++r) at.c[r] = min(row0 + r, n - 1) * uint32_t(k / kPer) + threadIdx.x % 32;
    return at;
  }

  // Chunks l0 + u*32 + lane of the rows at `at` (chunks past the row's `nl` read as zeros; unless
  // !kChecked: the caller knows the step lies inside the row, and the loads go without predicates).
  template <bool kChecked = true>
  static __device__ __forceinline__ void load(const Planes& p, const Rows& at, uint32_t l0, uint32_t nl, Regs& g) {
    const uint32_t lane = threadIdx.x % 32;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const uint32_t c = at.c[r] + l0;  // chunk u of the step: c + 32 u (pointers below step by immediates)
      const uint8_t* q = p.q + size_t(c) * kQBytes;
      const uint8_t* h = p.h + size_t(c) * kHBytes;
      const uint8_t* sp = p.s + scale_off(c);
      const uint8_t* dp = p.d + size_t(c >> 3) * kDBytes;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const bool in = !kChecked || l0 + u * 32 + lane < nl;
        const uint8_t* qu = q + u * 32 * kQBytes;
        if constexpr (kLow) g.raw[r][u] = in ? load_stream8(qu) : make_uint2(0, 0);
        else g.raw[r][u] = in ? load_stream(qu) : make_uint4(0, 0, 0, 0);
        const uint8_t* hu = h + u * 32 * kHBytes;
        if constexpr (kBits == 5 || kBits == 3) g.qh[r][u] = in ? __ldg(reinterpret_cast<const uint32_t*>(hu)) : 0u;
        if constexpr (kBits == 2) g.qh[r][u] = 0u;  // (none: Q2_K's quants are the low bits alone)
        if constexpr (kBits == 6) g.qh[r][u] = in ? __ldg(reinterpret_cast<const uint2*>(hu)) : make_uint2(0, 0);
        // chunk c + 32 u's records: scale_off(c) + scale_off(32 u), as 32 u is whole records
        const uint8_t* su = sp + scale_off(32u * u);
        const uint8_t* du = dp + 4 * u * kDBytes;
        if constexpr (kQ6) {
          g.aux[r][u] = in ? make_uint2(__ldg(reinterpret_cast<const unsigned short*>(su)), __ldg(reinterpret_cast<const unsigned short*>(du)))
                           : make_uint2(0, 0);
        } else if constexpr (kQ2) {
          g.aux[r][u] = in ? make_uint2(__ldg(reinterpret_cast<const unsigned short*>(su)), __ldg(reinterpret_cast<const uint32_t*>(du)))
                           : make_uint2(0, 0);
        } else if constexpr (kXs) {
          g.aux[r][u] = in ? __ldg(reinterpret_cast<const uint2*>(su)) : make_uint2(0, 0);
        } else if constexpr (kScales == kScaleK) g.aux[r][u] = in ? __ldg(reinterpret_cast<const uint4*>(su)) : make_uint4(0, 0, 0, 0);
        else if constexpr (kScales == kScaleDM) g.aux[r][u] = in ? __half22float2(*reinterpret_cast<const __half2*>(su)) : make_float2(0.f, 0.f);
        else g.aux[r][u] = make_float2(in ? __half2float(*reinterpret_cast<const __half*>(su)) : 0.f, 0.f);
      }
    }
  }
  // Rows row0..row0+kRows-1 of w [n][k] in the repacked layout, chunks l0 + u*32 + lane (the
  // experts' kernels, which load a step of a matrix chosen at run time).
  static __device__ __forceinline__ void load(const uint8_t* w, int64_t row0, int64_t n, int64_t l0, int64_t k, Regs& g) {
    load(planes(w, uint32_t(n), uint32_t(k)), rows(uint32_t(row0), uint32_t(n), uint32_t(k)), uint32_t(l0), uint32_t(loads(k)), g);
  }

  // (d_w, m_w) of chunk l from its loaded scales; Q6_K: (d sc) of the block's two halves. (The 2-
  // and 3-bit types' scales are applied in low_dot.)
  static __device__ __forceinline__ float2 scales(const Aux& a, int64_t l) {
    if constexpr (kXs) {
      const int j = int(l % 8);
      const int ls = int((a.y >> (4 * j)) & 15u) | int(((a.x >> (16 + 2 * j)) & 3u) << 4);
      return make_float2(__half2float(__ushort_as_half((unsigned short)(a.x & 0xFFFFu))) * float(ls - 32), 0.f);
    } else if constexpr (kQ6) {
      const float d = __half2float(__ushort_as_half((unsigned short)a.y));
      return make_float2(d * float(int8_t(a.x & 0xFFu)), d * float(int8_t(a.x >> 8)));
    } else if constexpr (kScales == kScaleK) {
      float sc, m;
      scale_min(int(l % 8), a, sc, m);  // (chunk l is block l)
      const float2 dd = __half22float2(*reinterpret_cast<const __half2*>(&a.x));
      return make_float2(dd.x * sc, -dd.y * m);
    } else {
      return a;
    }
  }

  // The x side of chunk l: the x block it meets (int8 blocks of x8_bytes(k), q8_blocks.h), and
  // where the chunk's quant that meets the block's largest element sits: byte `sel & 7` of the
  // word pair (v.x, v.y), or of (v.z, v.w) when `upper`, picked by one prmt each (prmt_pick).
  struct XChunk {
    float d;
    int4 lo, hi;    // the 16 (Q8_0) or 32 (Q4) int8 values the chunk's weights multiply
    int sum;        // the block's sum in steps of d, times -8 for Q4_0 (its offset term; Q5_0: -16); Q6_K: -32 times the sum of elements 0..15
                    // (Q3_K: -4 times; Q2_K: the sum, for its min); IQ4_NL, IQ4_XS: 0 (the table's values are signed)
    int sum_hi;     // Q6_K: -32 times the sum of elements 16..31 (Q3_K: -4 times; Q2_K: the sum)
    uint32_t sel;   // the prmt selector: the byte to the low end (Q8_0: sign-extended)
    bool upper;     // the byte is in v.z / v.w
    uint32_t mask;  // Q4: the nibble of that byte (0x0F, or 0xF0 for elements 16..31)
    int big;        // the largest element in steps of d, times 16 for a low nibble (Q4: its product
                    // joins the high nibbles' sum, kept 16x; 2-, 3-, 5-, 6-bit and IQ4: not); 0 for the
                    // Q8_0 half without it
    int m;          // 2-, 3-, 5-, 6-bit and IQ4: the largest element's index in the block
    // 2-, 3-bit: Q split by half (big: elements 0..15, big_hi: 16..31; the other 0), and where the
    // largest element's quant sits in its half's low word and in the high word: shifts made once
    // per x block for all the rows and matrices that meet it.
    int big_hi, lsh, hsh;
  };
  static __device__ __forceinline__ XChunk x_chunk(const uint8_t* xb, int64_t k, int64_t l) {
    const X8Facts f = x8_facts(xb, k, l * kPer / 32);
    XChunk x;
    x.d = f.d;
    x.lo = *reinterpret_cast<const int4*>(xb + l * kPer);
    x.hi = make_int4(0, 0, 0, 0);
    x.sum = kMin ? f.sum : (kBits == 5 ? -16 : -8) * f.sum;
    x.sum_hi = 0;
    if constexpr (kLut) x.sum = 0;  // (no offset: the table's values are signed)
    x.m = f.m;
    x.upper = f.m & 8;
    const uint32_t b = f.m & 7;
    if constexpr (kBits != 8) {
      // element e < 16 is byte e's low nibble, e >= 16 byte e - 16's high nibble
      x.hi = *reinterpret_cast<const int4*>(xb + l * kPer + 16);
      x.sel = b;
      x.mask = f.m & 16 ? 0xF0u : 0x0Fu;
      x.big = kBits != 4 || kLut || f.m & 16 ? f.big : 16 * f.big;
      if constexpr (kLow) {
        x.big = f.m & 16 ? 0 : f.big;
        x.big_hi = f.m & 16 ? f.big : 0;
        x.lsh = k23_low_shift(f.m & 15);
      }
      if constexpr (kLow || kBits == 5) x.hsh = k23_high_shift(f.m);
      if constexpr (kQ6 || kQ2) {  // the offset - 32 q (- 4 q) per half, or Q2_K's min: the halves' sums
        const int lo = sum16(x.lo) + (f.m & 16 ? 0 : f.big);  // (Q joins the one it lies in)
        x.sum = (kQ2 ? 1 : -kOffset) * lo;
        x.sum_hi = (kQ2 ? 1 : -kOffset) * (f.sum - lo);
      }
    } else {
      x.sel = b | (b | 8) << 4 | (b | 8) << 8 | (b | 8) << 12;  // selector nibbles >= 8: the byte's sign
      x.mask = 0;
      x.big = (f.m >> 4) == int(l & 1) ? f.big : 0;  // chunk l is half l % 2 of its block
    }
    return x;
  }

  // One chunk's product with x: d_x * (d_w * sumi [+ m_w * sum(x) for Q4_1, Q4_K]), where sumi is the
  // integer dot product of the quants with x's q and the largest element's Q (Q4_0's - 8 sum(x)
  // folded in). The high nibbles stay in place (16x, dp4a_us, shifted back exactly).
  // 5-bit: each word's nibbles with their fifth bits as two words of bytes 0..31, eight dp4a.
  static __device__ __forceinline__ float chunk_dot(const uint4 v, High qh, const XChunk& x, float dw, float mw) {
    const uint32_t pick = x.upper ? prmt(v.z, v.w, x.sel) : prmt(v.x, v.y, x.sel);
    int sumi = 0;  // (every branch sets it; the table and 6-bit ones return first)
    if constexpr (kLut) {  // word i's nibbles are elements 8 i .. 8 i + 7: two lookups of four
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
      const int xs[8] = {x.lo.x, x.lo.y, x.lo.z, x.lo.w, x.hi.x, x.hi.y, x.hi.z, x.hi.w};
      const uint32_t wm = x.m & 16 ? (x.m & 8 ? v.w : v.z) : (x.m & 8 ? v.y : v.x);
      sumi = iq4_split1(wm >> (4 * (x.m & 7))) * x.big;  // the largest element's value times Q
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // each value as two bytes that add up to it (iq4_split8)
        const Iq4Split t = iq4_split8(w[i]);
        sumi = __dp4a(int(t.hi[0]), xs[2 * i], __dp4a(int(t.lo[0]), xs[2 * i], sumi));
        sumi = __dp4a(int(t.hi[1]), xs[2 * i + 1], __dp4a(int(t.lo[1]), xs[2 * i + 1], sumi));
      }
      return x.d * (dw * float(sumi));
    } else if constexpr (kBits == 6) {  // two sums, one per half and scale: x.d (dw sl + mw sh)
      const bool hi_half = x.mask == 0xF0u;
      const uint32_t nib = pick & x.mask;
      const int qm = int((hi_half ? nib >> 4 : nib) | (((hi_half ? qh.y : qh.x) >> k23_low_shift(x.m & 15)) & 3u) << 4);
      int sl = x.sum + (hi_half ? 0 : qm * x.big), sh = x.sum_hi + (hi_half ? qm * x.big : 0);
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
      const int xl[4] = {x.lo.x, x.lo.y, x.lo.z, x.lo.w}, xh[4] = {x.hi.x, x.hi.y, x.hi.z, x.hi.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        sl = __dp4a(int(q6_bytes(w[i], qh.x, i)), xl[i], sl);
        sh = __dp4a(int(q6_bytes(w[i] >> 4, qh.y, i)), xh[i], sh);
      }
      return x.d * (dw * float(sl) + mw * float(sh));
    } else if constexpr (kBits == 5) {
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
      const int xl[4] = {x.lo.x, x.lo.y, x.lo.z, x.lo.w}, xh[4] = {x.hi.x, x.hi.y, x.hi.z, x.hi.w};
      const uint32_t nib = pick & x.mask;  // the largest element's quant: its nibble, then its fifth bit
      sumi = (int(x.mask == 0xF0u ? nib >> 4 : nib) | int((qh >> x.hsh) & 1u) << 4) * x.big + (kMin ? 0 : x.sum);
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // the fifth bits of x words i and 4 + i lie at bits i and 4 + i of each byte
        sumi = __dp4a(int((w[i] & 0x0F0F0F0Fu) | plane_fifth_bits(qh, i)), xl[i], sumi);
        sumi = __dp4a(int(((w[i] >> 4) & 0x0F0F0F0Fu) | plane_fifth_bits(qh, 4 + i)), xh[i], sumi);
      }
    } else if constexpr (kBits == 4) {
      const uint32_t lo = 0x0F0F0F0Fu, hi = 0xF0F0F0F0u;
      int sl = __dp4a(int(v.x & lo), x.lo.x, kMin ? 0 : x.sum);
      sl = __dp4a(int(v.y & lo), x.lo.y, sl);
      sl = __dp4a(int(v.z & lo), x.lo.z, sl);
      sl = __dp4a(int(v.w & lo), x.lo.w, sl);
      int sh = dp4a_us(v.x & hi, x.hi.x, int(pick & x.mask) * x.big);  // the largest element's product, 16x
      sh = dp4a_us(v.y & hi, x.hi.y, sh);
      sh = dp4a_us(v.z & hi, x.hi.z, sh);
      sh = dp4a_us(v.w & hi, x.hi.w, sh);
      sumi = sl + (sh >> 4);  // sh is 16x a sum: the shift is exact
    } else {
      sumi = __dp4a(int(v.x), x.lo.x, int(pick) * x.big);
      sumi = __dp4a(int(v.y), x.lo.y, sumi);
      sumi = __dp4a(int(v.z), x.lo.z, sumi);
      sumi = __dp4a(int(v.w), x.lo.w, sumi);
    }
    if constexpr (kMin) return x.d * (dw * float(sumi) + mw * float(x.sum));
    else return x.d * (dw * float(sumi));  // (no "+ 0.f": the compiler keeps an FFMA for it)
  }

  // A 2- or 3-bit chunk's product with x (gemv_k23.cuh's planes): v holds the block's two half
  // words of low bits, qh (Q3_K) its third bits, sc2 its two scale bytes (half 0 in byte 0), dbits
  // its super-block's f16 d (Q2_K: d | dmin << 16); two integer sums, one per half of 16, as
  // Q6_K's, scaled in integers:
  //   Q3_K: d_x d (sc_lo s_lo + sc_hi s_hi), s = dp4a(q + 4, xq) - 4 sum(xq) per half;
  //   Q2_K: d_x (d (sc_lo s_lo + sc_hi s_hi) - dmin (m_lo sum_lo + m_hi sum_hi)), s = dp4a(q, xq).
  // (The integer sums stay within int32: Q < 127 * 2^14 in q_dp4a's x blocks, and lies in one half.)
  static __device__ __forceinline__ float low_dot(const uint2 v, uint32_t qh, uint32_t sc2, uint32_t dbits, const XChunk& x) {
    int qm = int(((x.m & 16 ? v.y : v.x) >> x.lsh) & 3u);  // the largest element's q (+ 4)
    if constexpr (kBits == 3) qm += int((qh >> x.hsh) & 1u) * 4;
    int sl = (kQ2 ? 0 : x.sum) + qm * x.big, sh = (kQ2 ? 0 : x.sum_hi) + qm * x.big_hi;
    const int xl[4] = {x.lo.x, x.lo.y, x.lo.z, x.lo.w}, xh[4] = {x.hi.x, x.hi.y, x.hi.z, x.hi.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (kQ2) {
        sl = __dp4a(int(q2_bytes(v.x, i)), xl[i], sl);
        sh = __dp4a(int(q2_bytes(v.y, i)), xh[i], sh);
      } else {
        sl = __dp4a(int(q3_bytes(v.x, qh, 0, i)), xl[i], sl);
        sh = __dp4a(int(q3_bytes(v.y, qh, 1, i)), xh[i], sh);
      }
    }
    if constexpr (kQ2) {
      const int s0 = int(sc2 & 0xFFu), s1 = int((sc2 >> 8) & 0xFFu);
      const int isc = (s0 & 15) * sl + (s1 & 15) * sh, imn = (s0 >> 4) * x.sum + (s1 >> 4) * x.sum_hi;
      const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&dbits));
      return x.d * (dm.x * float(isc) - dm.y * float(imn));
    } else {
      const int isc = int(int8_t(sc2 & 0xFFu)) * sl + int(int8_t((sc2 >> 8) & 0xFFu)) * sh;
      return x.d * (__half2float(__ushort_as_half((unsigned short)(dbits & 0xFFFFu))) * float(isc));
    }
  }

  // acc[mat][r][b] += the chunks in g[mat] times x (int8 blocks, x8_bytes(k) per batch row), for
  // kMats matrices that multiply the same x (the gate/up pair): each chunk's x side is read and
  // decoded once for all of them (its loads and integer work are a tenth of a chunk's product).
  // kB: the batch rows the instance unrolls for (kGemvMaxBatch, or 1 for decode's instances).
  // !kChecked: the step lies inside the row (no test a chunk).
  template <int kB, int kMats, bool kChecked = true>
  static __device__ __forceinline__ void dot_mats(const Regs (&g)[kMats], const uint8_t* xs, int64_t k, int64_t l0,
                                                  int batch, float (&acc)[kMats][kRows][kB]) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t l = uint32_t(l0) + u * 32 + lane;  // (32 bits: as the loads' chunk indices)
      if (kChecked && l >= uint32_t(loads(k))) break;
#pragma unroll
      for (int b = 0; b < kB; ++b) {
        if (b >= batch) break;
        const XChunk x = x_chunk(xs + size_t(b) * x8_bytes(k), k, l);
#pragma unroll
        for (int mat = 0; mat < kMats; ++mat)
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            if constexpr (kLow) {
              acc[mat][r][b] += low_dot(g[mat].raw[r][u], g[mat].qh[r][u], g[mat].aux[r][u].x, g[mat].aux[r][u].y, x);
            } else {
              // (chunk l's block in its super-block, l % 8, is lane % 8: l0 and 32 u are multiples of 8,
              // so that the shifts that pick its scale are made once, outside the loop)
              const float2 dm = scales(g[mat].aux[r][u], lane);
              acc[mat][r][b] += chunk_dot(g[mat].raw[r][u], g[mat].qh[r][u], x, dm.x, dm.y);
            }
          }
      }
    }
  }
  // One matrix: acc[r][b] += the chunks in g times x.
  template <int kB, bool kChecked = true>
  static __device__ __forceinline__ void dot(const Regs& g, const uint8_t* xs, int64_t k, int64_t l0, int batch,
                                             float (&acc)[kRows][kB]) {
    dot_mats<kB, 1, kChecked>(reinterpret_cast<const Regs(&)[1]>(g), xs, k, l0, batch, reinterpret_cast<float(&)[1][kRows][kB]>(acc));
  }
};

// The pass loop of q_dp4a_slots (gemv_dp4a_slots.cu): one matrix, batch 1, 32 / kRows warps x kRows
// rows (one 32-row block of y a pass), and two register slots of one step each: slot a holds the
// steps l0 = 0, 2, 4, ... of the warp's rows, slot b the steps 1, 3, 5, ...; a multiplied slot is
// refilled with its next step (the next pass's first two steps at the end of a pass), so a step
// is always in flight. (kRows, kUnroll): (2, 2), 16 warps a block; or (4, 1), 8 warps a block and
// two blocks an SM: the same weight registers, each lane's x side shared by 4 rows instead of 2;
// or, for the 2- and 3-bit types (8 bytes of quants a chunk: half the 4-bit types' registers),
// (4, 2), 8 warps a block and two blocks an SM: a chunk's x side shared by 4 rows, and a pass
// (its set-up and epilogue) over 4 rows, at (2, 2)'s steps.
// kWhole: a row is whole steps (loads(k) a multiple of kStep), so that a step lies inside the row
// or past it, tested once a step where the general form tests each chunk of each load and product
// (its predicates, zeroed registers and branches were 8-22 % of the pass loop's instructions,
// docs/benchmarks.md, sixty-eighth session).
template <int kBits, int kScales, int kRowsT, int kUnrollT, bool kWhole = false>
struct Dp4aSlots {
  static constexpr int kRows = kRowsT, kUnroll = kUnrollT, kWarps = 32 / kRows;
  static constexpr int kBlocksPerSm = kRows / 2;  // blocks an SM per kDp4aBlocksPerSm: 16 warps either shape
  static_assert((kRows == 2 && kUnroll == 2) || (kRows == 4 && kUnroll == 1) || (kRows == 4 && kUnroll == 2 && kBits < 4),
                "the slot shapes: 2 rows x 2 steps, 4 rows x 1, and for the 2- and 3-bit types 4 rows x 2");
  using Step = Dp4aStep<kBits, kScales, kRows, kUnroll>;
  static constexpr uint32_t kStep = 32 * kUnroll;  // chunks a step: kUnroll per lane, times 32 lanes

  // Both slots with the first rows' first two steps (before the PDL wait: weights only).
  static __device__ __forceinline__ void fill(const uint8_t* w, int64_t row0, int64_t n, int64_t k,
                                              typename Step::Regs& a, typename Step::Regs& b) {
    const typename Step::Planes p = Step::planes(w, uint32_t(n), uint32_t(k));
    const typename Step::Rows at = Step::rows(uint32_t(row0), uint32_t(n), uint32_t(k));
    const uint32_t nl = uint32_t(k) / Step::kPer;
    Step::template load<!kWhole>(p, at, 0, nl, a);
    if (!kWhole || kStep < nl) Step::template load<!kWhole>(p, at, kStep, nl, b);
  }
  // acc += rows row0.. of w times xs (int8 blocks of k); the slots are left holding the first
  // steps of rows row0 + stride when those exist.
  static __device__ __forceinline__ void pass(const uint8_t* w, int64_t row0, int64_t stride, int64_t n, int64_t k,
                                              const uint8_t* xs, typename Step::Regs& a, typename Step::Regs& b,
                                              float (&acc)[kRows][1]) {
    const typename Step::Planes p = Step::planes(w, uint32_t(n), uint32_t(k));
    const typename Step::Rows here = Step::rows(uint32_t(row0), uint32_t(n), uint32_t(k)),
                              next = Step::rows(uint32_t(row0 + stride), uint32_t(n), uint32_t(k));
    const bool more = row0 + stride < n;
    const uint32_t nl = uint32_t(k) / Step::kPer;
    for (uint32_t l0 = 0; l0 < nl; l0 += 2 * kStep) {
      const bool last = l0 + 2 * kStep >= nl;
      const typename Step::Rows at = last ? next : here;  // the slots' next steps: these rows' after the pair,
      const uint32_t at_l0 = last ? 0 : l0 + 2 * kStep;     // or the next rows' first two
      Step::template dot<1, !kWhole>(a, xs, k, l0, 1, acc);
      if (!last || more) Step::template load<!kWhole>(p, at, at_l0, nl, a);
      // (slot b's step past the row: kWhole skips it, the general form loads zeros and multiplies none)
      if (!kWhole || l0 + kStep < nl) Step::template dot<1, !kWhole>(b, xs, k, l0 + kStep, 1, acc);
      if ((!last || more) && (!kWhole || at_l0 + kStep < nl)) Step::template load<!kWhole>(p, at, at_l0 + kStep, nl, b);
    }
  }
};

// Persistent grids of the dp4a GEMVs: one block per SM, faster in the decode chain than as many
// blocks as fit (docs/benchmarks.md, sixth session). The
// tuner then takes the 16-warp, 32-row configs (one block fills an SM's registers), which in the
// chain beat the two 8-warp blocks per SM it picks otherwise by a hair in isolation.
inline constexpr int kDp4aBlocksPerSm = 1;

inline bool dp4a_types(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q5_0 || t == GgmlType::Q5_1 || t == GgmlType::Q8_0 ||
         t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K || t == GgmlType::IQ4_NL || t == GgmlType::IQ4_XS ||
         t == GgmlType::Q2_K || t == GgmlType::Q3_K;
}

// A dp4a variant's launch for a problem and config: by weight type (gemv_dp4a.cu), then by
// (rows, unroll) among the instances the variant lists, then gate/up pair or one matrix:
// Launch<kBits, kScales, kRows, kUnroll, kGateUp>::run(p, c, s).
template <int kRows, int kUnroll>
struct Dp4aShape {
  static constexpr int rows = kRows, unroll = kUnroll;
};

// Dp4aStep's chunk indices are 32 bits: a matrix of 2^32 chunks or more (64 Gi weights of Q8_0) is
// refused rather than read at wrapped addresses.
inline bool dp4a_chunks_fit(int64_t n, int64_t k) { return n > 0 && k > 0 && uint64_t(n) * uint64_t(k / 16) < (uint64_t(1) << 32); }

template <template <int, int, int, int, bool> class Launch, int kBits, int kScales, class... Shapes>
Status dp4a_by_config(const char* name, const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (!dp4a_chunks_fit(p.n, p.k)) return Status::error(std::string(name) + ": a matrix of 2^32 chunks or more");
  Status st = Status::error(std::string(name) + ": no instance for config " + c.str());
  bool found = false;
  auto try_one = [&](auto shape) {
    using S = decltype(shape);
    if (found || c.rows != S::rows || c.unroll != S::unroll) return;
    found = true;
    st = p.w_up ? Launch<kBits, kScales, S::rows, S::unroll, true>::run(p, c, s)
                : Launch<kBits, kScales, S::rows, S::unroll, false>::run(p, c, s);
  };
  (try_one(Shapes{}), ...);
  return st;
}

}  // namespace lamina::kernels::gemv_detail

// iq4xs_dp4a: IQ4_XS in the GGUF layout with int8 activations and dp4a (the units loop of
// gemv_units.cuh). A 136-byte IQ4_XS super-block is [d f16, scales_h u16, scales_l 4 bytes]
// [qs 128 bytes]; sub-block ib (32 elements) has the 6-bit scale
// (scales_l nibble ib | scales_h bits 2ib..2ib+1 << 4) - 32 and its quants in qs[16 ib .. +15]:
// low nibble of byte i is element i, high nibble element 16 + i, each an index into the 16 IQ4
// values (format/quant_decode.h: iq4_value). One unit is one sub-block: a lane loads its 16 quant
// bytes (8-byte aligned: two 8-byte loads) and the 8-byte header, looks the 32 nibbles up in the
// table with byte permutes (prmt: four lookups per 16 bits of nibbles, the table held as four
// words of constants), and multiplies the two runs of 16 by the x block they meet:
//   d * (ls - 32) * dx * (dp4a(values_lo, x_lo) + dp4a(values_hi, x_hi))
// against q_generic (per-element decode, f32 x), the rung it replaces for this type: the file's
// 4.25 bits per weight read once, 16 bytes per lane, and the dot products on int8.
#include "format/quant_decode.h"
#include "kernels/gemv/gemv_units.cuh"

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

// Bytes 4i .. 4i + 3 of the IQ4 table as one little-endian word.
constexpr uint32_t iq4_word(int i) {
  uint32_t w = 0;
  for (int b = 3; b >= 0; --b) w = w << 8 | uint32_t(uint8_t(int8_t(iq4_value(4 * i + b))));
  return w;
}

// The IQ4 values of the four 4-bit indices in the low 16 bits of s (index i in bits 4i..4i+3),
// as four int8 in one word (byte i for index i). prmt picks from 8 bytes with 3 bits of each
// selector nibble (the fourth asks for a sign fill), so each half of the table is looked up with
// the low 3 bits and a third prmt takes byte i from the upper half where index i is 8 or more.
__device__ __forceinline__ uint32_t iq4_lookup4(uint32_t s) {
  constexpr uint32_t t0 = iq4_word(0), t1 = iq4_word(1), t2 = iq4_word(2), t3 = iq4_word(3);
  const uint32_t s3 = s & 0x7777u;
  const uint32_t lo = prmt(t0, t1, s3), hi = prmt(t2, t3, s3);
  return prmt(lo, hi, 0x3210u | ((s >> 1) & 0x4444u));
}

struct Iq4xsUnits {
  static constexpr const char* kName = "iq4xs_dp4a";
  static constexpr const char* kSlotsName = "iq4xs_slots";
  static constexpr GgmlType kType = GgmlType::IQ4_XS;
  static __device__ __forceinline__ int64_t units(int64_t k) { return k / 32; }
  struct Unit {
    uint4 q;      // qs[16 ib .. 16 ib + 15]
    float scale;  // d * (ls - 32)
  };
  static __device__ __forceinline__ Unit load(const uint8_t* w, int64_t, int64_t k, int64_t row, int64_t j) {
    const uint8_t* sb = w + (size_t(row) * size_t(k / 256) + size_t(j / 8)) * sizeof(block_iq4_xs);
    const int ib = int(j % 8);
    const uint2 hdr = __ldg(reinterpret_cast<const uint2*>(sb));  // d | scales_h << 16, scales_l[4]
    const uint2* qp = reinterpret_cast<const uint2*>(sb + 8 + 16 * ib);
    const uint2 a = __ldg(qp), b = __ldg(qp + 1);
    const int ls = int((hdr.y >> (4 * ib)) & 15u) | int(((hdr.x >> (16 + 2 * ib)) & 3u) << 4);
    return Unit{make_uint4(a.x, a.y, b.x, b.y), __half2float(__ushort_as_half(uint16_t(hdr.x & 0xFFFFu))) * float(ls - 32)};
  }
  using XPart = X8Row::Halves;
  // unit j covers elements 32 j .. 32 j + 31: one x block, its first and second 16
  static __device__ __forceinline__ XPart x_part(const X8Row& xr, int64_t j) { return xr.halves(32 * j, 32 * j + 16); }
  static __device__ __forceinline__ float dot(const Unit& u, const XPart& x) {
    const uint32_t* v = &u.q.x;
    uint32_t lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // byte j of v[i] = element 4i + j (low nibble), 16 + 4i + j (high)
      const uint32_t r0 = iq4_lookup4(v[i]), r1 = iq4_lookup4(v[i] >> 16);  // (lo, hi) of bytes 0, 1 / 2, 3
      lo[i] = prmt(r0, r1, 0x6420u);
      hi[i] = prmt(r0, r1, 0x7531u);
    }
    const auto dot16 = [](const uint32_t* a, const int4& b) {
      return __dp4a(int(a[3]), b.w, __dp4a(int(a[2]), b.z, __dp4a(int(a[1]), b.y, __dp4a(int(a[0]), b.x, 0))));
    };
    // with the value the block's largest element meets, times its Q (q8_blocks.h)
    const int dl = dot16(lo, x.lo) + int(int8_t(chunk_byte(lo[0], lo[1], lo[2], lo[3], x.m_lo))) * x.big_lo;
    const int dh = dot16(hi, x.hi) + int(int8_t(chunk_byte(hi[0], hi[1], hi[2], hi[3], x.m_hi))) * x.big_hi;
    return u.scale * (x.d_lo * float(dl) + x.d_hi * float(dh));
  }
};

}  // namespace

void register_iq4xs_variants(std::vector<GemvVariant>& out) {
  register_units_rungs<Iq4xsUnits>(out, WeightLayout::Gguf,
                                "iq4_xs in place: a sub-block's 16 quant bytes per lane, table lookups by prmt, dp4a",
                                "iq4xs_dp4a for decode (batch 1): two register slots of steps, one always in flight (gemv_slots.cuh)");
}

}  // namespace lamina::kernels

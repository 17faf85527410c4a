// q51_dp4a: Q5_1 in the GGUF layout with int8 activations and dp4a (the units loop of
// gemv_units.cuh). A 24-byte Q5_1 block is [d f16, m f16][qh 4 bytes][qs 16 bytes]: element
// e < 16 is the low nibble of qs[e] with bit e of qh as its fifth bit, element 16 + e the high
// nibble of qs[e] with bit 16 + e; w = d * q + m (q 0..31). One unit is one block: a lane loads
// its 24 bytes (8-byte aligned: three 8-byte loads), spreads each 4 bits of qh over the bytes of
// a word (a multiply puts bit i at bit 8i, the products' bits never meet), and multiplies the two
// runs of 16 by the x block they meet:
//   dx * (d * dp4a(q, x) + m * sum(x))
// Against q_generic (per-element decode, f32 x), the rung it replaces for this type: the file's 6
// bits per weight read once and the dot products on int8.
#include "format/quant_blocks.h"
#include "kernels/gemv/gemv_units.cuh"

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

struct Q51Units {
  static constexpr const char* kName = "q51_dp4a";
  static constexpr const char* kSlotsName = "q51_slots";
  static constexpr GgmlType kType = GgmlType::Q5_1;
  static constexpr int64_t kKMultiple = 32;  // (a row is whole blocks of 32)
  static __device__ __forceinline__ int64_t units(int64_t k) { return k / 32; }
  struct Unit {
    uint4 q;      // qs[0 .. 15]
    uint32_t qh;  // the fifth bits
    float d, m;
  };
  static __device__ __forceinline__ Unit load(const uint8_t* w, int64_t, int64_t k, int64_t row, int64_t j) {
    const uint2* b = reinterpret_cast<const uint2*>(w + (size_t(row) * size_t(k / 32) + size_t(j)) * sizeof(block_q5_1));
    const uint2 h = __ldg(b), q0 = __ldg(b + 1), q1 = __ldg(b + 2);  // (d | m << 16, qh), qs
    return Unit{make_uint4(q0.x, q0.y, q1.x, q1.y), h.y, __half2float(__ushort_as_half(uint16_t(h.x & 0xFFFFu))),
                __half2float(__ushort_as_half(uint16_t(h.x >> 16)))};
  }
  using XPart = X8Row::Halves;
  // unit j covers elements 32 j .. 32 j + 31: one x block, its first and second 16
  static __device__ __forceinline__ XPart x_part(const X8Row& xr, int64_t j) { return xr.halves(32 * j, 32 * j + 16); }
  static __device__ __forceinline__ float dot(const Unit& u, const XPart& x) {
    const uint32_t* v = &u.q.x;
    uint32_t lo[4], hi[4];  // byte b of word i: element 4i + b (lo), 16 + 4i + b (hi), 0..31
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      lo[i] = (v[i] & 0x0F0F0F0Fu) | fifth_bits(u.qh >> (4 * i));
      hi[i] = ((v[i] >> 4) & 0x0F0F0F0Fu) | fifth_bits(u.qh >> (16 + 4 * i));
    }
    const auto dot16 = [](const uint32_t* a, const int4& b) {
      return __dp4a(int(a[3]), b.w, __dp4a(int(a[2]), b.z, __dp4a(int(a[1]), b.y, __dp4a(int(a[0]), b.x, 0))));
    };
    // with the quant the block's largest element meets, times its Q (q8_blocks.h)
    const int dl = dot16(lo, x.lo) + int(chunk_byte(lo[0], lo[1], lo[2], lo[3], x.m_lo)) * x.big_lo;
    const int dh = dot16(hi, x.hi) + int(chunk_byte(hi[0], hi[1], hi[2], hi[3], x.m_hi)) * x.big_hi;
    return u.d * (x.d_lo * float(dl) + x.d_hi * float(dh)) + u.m * (x.d_lo * float(x.sum_lo) + x.d_hi * float(x.sum_hi));
  }
};

}  // namespace

void register_q51_variants(std::vector<GemvVariant>& out) {
  register_units_rungs<Q51Units>(out, WeightLayout::Gguf,
                                "q5_1 in place: a block (16 quant bytes, the fifth bits, d and m) per lane, dp4a",
                                "q51_dp4a for decode (batch 1): two register slots of steps, one always in flight (gemv_slots.cuh)");
}

}  // namespace lamina::kernels

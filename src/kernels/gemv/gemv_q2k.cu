// q2k_dp4a: Q2_K in the GGUF layout with int8 activations and dp4a (the units loop of
// gemv_units.cuh). An 84-byte Q2_K super-block is [scales 16 bytes][qs 64 bytes][d f16, dmin f16]:
// element e = 128 n + 32 t + l (n 0..1, t 0..3, l 0..31) is bits 2t..2t+1 of qs[32 n + l], with
// the scale (low nibble) and min (high nibble) of byte scales[e / 16]:
//   d * sc * q - dmin * m.
// One unit is a 16-byte run of qs, qs[32 n + 16 h .. + 15] (h 0..1): 64 elements, four runs of
// 16 (t = 0..3: elements 128 n + 32 t + 16 h + i), each with its own scale byte
// scales[8 n + 2 t + h]. Blocks are only 4-byte aligned, so a lane loads its run as four words;
// the two words of scales for its n are shared by the four lanes of a super-block's half.
// Per run:  dx * (d * sc * dp4a(q, x) - dmin * m * sum(x)).
// Against q_generic (per-element decode, f32 x), the rung it replaces for this type: 2.625 bits
// per weight read once and the dot products on int8.
#include "format/quant_blocks.h"
#include "kernels/gemv/gemv_units.cuh"

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

struct Q2kUnits {
  static constexpr const char* kName = "q2k_dp4a";
  static constexpr const char* kSlotsName = "q2k_slots";
  static constexpr GgmlType kType = GgmlType::Q2_K;
  static __device__ __forceinline__ int64_t units(int64_t k) { return k / 64; }
  struct Unit {
    uint4 q;      // qs[32 n + 16 h .. + 15]
    uint32_t s4;  // byte t: scales[8 n + 2 t + h] (scale | min << 4)
    float d, dmin;
  };
  static __device__ __forceinline__ Unit load(const uint8_t* w, int64_t, int64_t k, int64_t row, int64_t j) {
    const uint8_t* sb = w + (size_t(row) * size_t(k / 256) + size_t(j / 4)) * sizeof(block_q2_K);
    const int n = int(j % 4) / 2, h = int(j % 2);
    const uint32_t* sc = reinterpret_cast<const uint32_t*>(sb + 8 * n);
    const uint32_t dm = __ldg(reinterpret_cast<const uint32_t*>(sb + 80));
    return Unit{load4_words(sb + 16 + 32 * n + 16 * h), prmt(__ldg(sc), __ldg(sc + 1), h ? 0x7531u : 0x6420u),
                __half2float(__ushort_as_half(uint16_t(dm & 0xFFFFu))), __half2float(__ushort_as_half(uint16_t(dm >> 16)))};
  }
  using XPart = FourRuns;
  static __device__ __forceinline__ XPart x_part(const X8Row& xr, int64_t j) { return four_runs(xr, j); }
  // One run t of 16: (integer dot with the largest element's share, the run's sum of x).
  template <int kT>
  static __device__ __forceinline__ int run_dot(const uint4& q, const int4& x, int m, int big) {
    const uint32_t mk = 0x03030303u;
    const uint32_t a0 = (q.x >> (2 * kT)) & mk, a1 = (q.y >> (2 * kT)) & mk, a2 = (q.z >> (2 * kT)) & mk,
                   a3 = (q.w >> (2 * kT)) & mk;
    return __dp4a(int(a3), x.w, __dp4a(int(a2), x.z, __dp4a(int(a1), x.y, __dp4a(int(a0), x.x, 0)))) +
           int(chunk_byte(a0, a1, a2, a3, m)) * big;
  }
  static __device__ __forceinline__ float dot(const Unit& u, const XPart& x) {
    const int p0 = run_dot<0>(u.q, x.a.lo, x.a.m_lo, x.a.big_lo), p1 = run_dot<1>(u.q, x.a.hi, x.a.m_hi, x.a.big_hi);
    const int p2 = run_dot<2>(u.q, x.b.lo, x.b.m_lo, x.b.big_lo), p3 = run_dot<3>(u.q, x.b.hi, x.b.m_hi, x.b.big_hi);
    const auto sc = [&](int t) { return float((u.s4 >> (8 * t)) & 15u); };
    const auto mn = [&](int t) { return float((u.s4 >> (8 * t + 4)) & 15u); };
    const float qd = x.a.d_lo * sc(0) * float(p0) + x.a.d_hi * sc(1) * float(p1) + x.b.d_lo * sc(2) * float(p2) +
                     x.b.d_hi * sc(3) * float(p3);
    const float ms = x.a.d_lo * mn(0) * float(x.a.sum_lo) + x.a.d_hi * mn(1) * float(x.a.sum_hi) +
                     x.b.d_lo * mn(2) * float(x.b.sum_lo) + x.b.d_hi * mn(3) * float(x.b.sum_hi);
    return u.d * qd - u.dmin * ms;
  }
};

}  // namespace

void register_q2k_variants(std::vector<GemvVariant>& out) {
  register_units_rungs<Q2kUnits>(out, WeightLayout::Gguf,
                                "q2_K in place: a 16-byte quant run (four runs of 16 with their scales) per lane, dp4a",
                                "q2k_dp4a for decode (batch 1): two register slots of steps, one always in flight (gemv_slots.cuh)");
}

}  // namespace lamina::kernels

// q3k_dp4a: Q3_K with int8 activations and dp4a on the repacked planes of gemv_k23.cuh (the units
// loop of gemv_units.cuh). GGUF's 110-byte super-blocks are only 2-byte aligned; the planes hold
// the low 2 bits and the third bits in Q4_0's block order, the 6-bit scales decoded once to int8.
// One unit is two blocks, elements 64 j .. 64 j + 63 of a row: 16 bytes of low words, 8 of high
// words, their four int8 scales; four runs of 16 (t = 0..3: block 2 j + t / 2, half t % 2), each
// meeting one half of an x block. Per run:  d * sc * dx * (dp4a(q + 4, x) - 4 sum(x)).
// Against q_generic (per-element decode, f32 x), the rung it replaces for this type: 3.56 bits
// per weight read once, 16-byte loads, the dot products on int8. The next rung is q_dp4a's
// 3-bit step (gemv_dp4a.cuh): a lane's chunk is one block, in q_dp4a's persistent frame.
#include "kernels/gemv/gemv_k23.cuh"
#include "kernels/gemv/gemv_units.cuh"

#include <cuda_fp16.h>

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

struct Q3kUnits {
  static constexpr const char* kName = "q3k_dp4a";
  static constexpr const char* kSlotsName = "q3k_slots";
  static constexpr GgmlType kType = GgmlType::Q3_K;
  static __device__ __forceinline__ int64_t units(int64_t k) { return k / 64; }
  struct Unit {
    uint4 low;    // the low words of blocks 2 j (x: half 0, y: half 1) and 2 j + 1 (z, w)
    uint2 high;   // the high words of blocks 2 j and 2 j + 1
    uint32_t s4;  // byte t: the int8 scale of run t
    float d;
  };
  static __device__ __forceinline__ Unit load(const uint8_t* w, int64_t rows, int64_t k, int64_t row, int64_t j) {
    const K23Planes pl(true, rows, k);
    const uint4 low = load_stream(w + size_t(row) * size_t(k / 4) + size_t(j) * 16);
    const uint2 high = __ldg(reinterpret_cast<const uint2*>(w + pl.high + size_t(row) * size_t(k / 8) + size_t(j) * 8));
    const uint32_t s4 = __ldg(reinterpret_cast<const uint32_t*>(w + pl.sc + size_t(row) * size_t(k / 16) + size_t(j) * 4));
    const float d = __half2float(reinterpret_cast<const __half*>(w + pl.d)[size_t(row) * size_t(k / 256) + size_t(j / 4)]);
    return Unit{low, high, s4, d};
  }
  using XPart = FourRuns;
  static __device__ __forceinline__ XPart x_part(const X8Row& xr, int64_t j) {
    return FourRuns{xr.halves(64 * j, 64 * j + 16), xr.halves(64 * j + 32, 64 * j + 48)};
  }
  // Run t of 16: dp4a of (q + 4) 0..7 with x, with the largest element's share, less 4 sum(x).
  template <int kT>
  static __device__ __forceinline__ int run_dot(const Unit& u, const int4& x, int m, int big, int sum) {
    const uint32_t low = kT == 0 ? u.low.x : kT == 1 ? u.low.y : kT == 2 ? u.low.z : u.low.w;
    const uint32_t high = kT < 2 ? u.high.x : u.high.y;
    const uint32_t a0 = q3_bytes(low, high, kT % 2, 0), a1 = q3_bytes(low, high, kT % 2, 1),
                   a2 = q3_bytes(low, high, kT % 2, 2), a3 = q3_bytes(low, high, kT % 2, 3);
    return __dp4a(int(a3), x.w, __dp4a(int(a2), x.z, __dp4a(int(a1), x.y, __dp4a(int(a0), x.x, 0)))) +
           int(chunk_byte(a0, a1, a2, a3, m)) * big - 4 * sum;
  }
  static __device__ __forceinline__ float dot(const Unit& u, const XPart& x) {
    const int p0 = run_dot<0>(u, x.a.lo, x.a.m_lo, x.a.big_lo, x.a.sum_lo);
    const int p1 = run_dot<1>(u, x.a.hi, x.a.m_hi, x.a.big_hi, x.a.sum_hi);
    const int p2 = run_dot<2>(u, x.b.lo, x.b.m_lo, x.b.big_lo, x.b.sum_lo);
    const int p3 = run_dot<3>(u, x.b.hi, x.b.m_hi, x.b.big_hi, x.b.sum_hi);
    const auto sc = [&](int t) { return float(int8_t(uint8_t(u.s4 >> (8 * t)))); };
    return u.d * (x.a.d_lo * sc(0) * float(p0) + x.a.d_hi * sc(1) * float(p1) + x.b.d_lo * sc(2) * float(p2) +
                  x.b.d_hi * sc(3) * float(p3));
  }
};

}  // namespace

void register_q3k_variants(std::vector<GemvVariant>& out) {
  register_units_rungs<Q3kUnits>(out, WeightLayout::Repacked,
                                "q3_K repacked into low/high/scale/d planes (gemv_k23.cuh): two blocks per lane, dp4a",
                                "q3k_dp4a for decode (batch 1): two register slots of steps, one always in flight (gemv_slots.cuh)");
}

}  // namespace lamina::kernels

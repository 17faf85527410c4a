// q3k_dp4a: Q3_K with int8 activations and dp4a on a repacked layout (the units loop of
// gemv_units.cuh). GGUF's 110-byte super-blocks [hmask 32][qs 64][scales 12][d f16] are only
// 2-byte aligned; gemv_repack splits them into planes, the 6-bit scales decoded once to int8:
//   qs [n][k/4] | hmask [n][k/8] | scales int8 [n][k/16] (already less 32) | d f16 [n][k/256]
// (114 bytes per 256 weights instead of 110). Element e = 128 n + 32 t + l of a super-block
// (n 0..1, t 0..3, l 0..31): q = bits 2t..2t+1 of qs[32 n + l], plus 4 when bit 4n + t of
// hmask[l] is set, less 4; value d * scale[e / 16] * q.
// One unit is a 16-byte run of qs, qs[32 n + 16 h .. + 15] (h 0..1), with hmask[16 h .. + 15]:
// 64 elements, four runs of 16 (t = 0..3: elements 128 n + 32 t + 16 h + i) with the scales
// scale[8 n + 2 t + h]. Per run:  d * sc * dx * (dp4a(q + 4, x) - 4 sum(x)).
// Against q_generic (per-element decode, f32 x), the rung it replaces for this type: 3.56 bits
// per weight read once, 16-byte loads, the dot products on int8.
#include "kernels/gemv/gemv_units.cuh"

#include "format/quant_blocks.h"

#include <cuda_fp16.h>

#include <algorithm>

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

struct Q3Planes {  // byte offsets of the planes of an n x k matrix
  size_t hm, sc, d;
  __host__ __device__ Q3Planes(int64_t n, int64_t k)
      : hm(size_t(n) * size_t(k) / 4), sc(hm + size_t(n) * size_t(k) / 8), d(sc + size_t(n) * size_t(k) / 16) {}
};

struct Q3kUnits {
  static constexpr const char* kName = "q3k_dp4a";
  static constexpr const char* kSlotsName = "q3k_slots";
  static constexpr GgmlType kType = GgmlType::Q3_K;
  static __device__ __forceinline__ int64_t units(int64_t k) { return k / 64; }
  struct Unit {
    uint4 q;      // qs[32 n + 16 h .. + 15]
    uint4 hm;     // hmask[16 h .. + 15] >> 4 n: bit t of each byte is run t's
    uint32_t s4;  // byte t: the int8 scale of run t
    float d;
  };
  static __device__ __forceinline__ Unit load(const uint8_t* w, int64_t rows, int64_t k, int64_t row, int64_t j) {
    const Q3Planes pl(rows, k);
    const int64_t sb = j / 4;
    const int n = int(j % 4) / 2, h = int(j % 2);
    const uint4 q = load_stream(w + size_t(row) * size_t(k / 4) + size_t(sb) * 64 + 32 * n + 16 * h);
    uint4 hm = load_stream(w + pl.hm + size_t(row) * size_t(k / 8) + size_t(sb) * 32 + 16 * h);
    hm = make_uint4(hm.x >> (4 * n), hm.y >> (4 * n), hm.z >> (4 * n), hm.w >> (4 * n));
    const uint2 sc = __ldg(reinterpret_cast<const uint2*>(w + pl.sc + size_t(row) * size_t(k / 16) + size_t(sb) * 16 + 8 * n));
    const float d = __half2float(reinterpret_cast<const __half*>(w + pl.d)[size_t(row) * size_t(k / 256) + size_t(sb)]);
    return Unit{q, hm, prmt(sc.x, sc.y, h ? 0x7531u : 0x6420u), d};
  }
  using XPart = FourRuns;
  static __device__ __forceinline__ XPart x_part(const X8Row& xr, int64_t j) { return four_runs(xr, j); }
  // Run t of 16: dp4a of (q + 4) 0..7 with x, with the largest element's share, less 4 sum(x).
  template <int kT>
  static __device__ __forceinline__ int run_dot(const Unit& u, const int4& x, int m, int big, int sum) {
    const uint32_t m2 = 0x03030303u, m1 = 0x01010101u;
    const auto q3 = [&](uint32_t q, uint32_t hm) { return ((q >> (2 * kT)) & m2) | (((hm >> kT) & m1) << 2); };
    const uint32_t a0 = q3(u.q.x, u.hm.x), a1 = q3(u.q.y, u.hm.y), a2 = q3(u.q.z, u.hm.z), a3 = q3(u.q.w, u.hm.w);
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

__global__ void repack_q3k_kernel(const uint8_t* __restrict__ src, int64_t n, int64_t k, uint8_t* __restrict__ dst) {
  const Q3Planes pl(n, k);
  const int64_t blocks = n * (k / 256);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < blocks; i += int64_t(gridDim.x) * blockDim.x) {
    const block_q3_K& b = reinterpret_cast<const block_q3_K*>(src)[i];
    for (int j = 0; j < 64; ++j) dst[size_t(i) * 64 + j] = b.qs[j];
    for (int j = 0; j < 32; ++j) dst[pl.hm + size_t(i) * 32 + j] = b.hmask[j];
    for (int t = 0; t < 16; ++t) dst[pl.sc + size_t(i) * 16 + t] = uint8_t(int8_t(q3k_scale(b.scales, t)));
    dst[pl.d + size_t(i) * 2] = uint8_t(b.d & 0xFF);
    dst[pl.d + size_t(i) * 2 + 1] = uint8_t(b.d >> 8);
  }
}

// Rows row0 .. row0 + rows - 1 of the planes as f16, one thread per element.
__global__ void dequant_q3k_kernel(const uint8_t* __restrict__ w, int64_t n, int64_t k, int64_t row0, int64_t rows,
                                   __half* __restrict__ out) {
  const Q3Planes pl(n, k);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * k; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = row0 + i / k, c = i % k, sb = c / 256;
    const int e = int(c % 256), l = e % 32;
    const uint8_t qs = w[size_t(r) * size_t(k / 4) + sb * 64 + 32 * (e / 128) + l];
    const uint8_t hm = w[pl.hm + size_t(r) * size_t(k / 8) + sb * 32 + l];
    const int q = ((qs >> (2 * ((e % 128) / 32))) & 3) + 4 * ((hm >> (e / 32)) & 1) - 4;
    const int sc = reinterpret_cast<const int8_t*>(w + pl.sc)[size_t(r) * size_t(k / 16) + sb * 16 + e / 16];
    const float d = __half2float(reinterpret_cast<const __half*>(w + pl.d)[r * (k / 256) + sb]);
    out[i] = __float2half_rn(d * float(sc * q));
  }
}

}  // namespace

size_t gemv_q3k_repacked_bytes(int64_t n, int64_t k) { return Q3Planes(n, k).d + size_t(n) * size_t(k / 256) * 2; }

Status gemv_q3k_repack(const void* src, int64_t n, int64_t k, void* out, cudaStream_t s) {
  if (k % 256 || n <= 0) return Status::error("gemv_repack: bad q3_K shape");
  const int64_t blocks = n * (k / 256);
  repack_q3k_kernel<<<unsigned(std::min<int64_t>((blocks + 255) / 256, 4096)), 256, 0, s>>>(
      static_cast<const uint8_t*>(src), n, k, static_cast<uint8_t*>(out));
  return launch_status("gemv_repack q3_K");
}

Status dequant_q3k_repacked(const void* w, int64_t n, int64_t k, int64_t row0, int64_t rows, void* out, cudaStream_t s) {
  if (!w || !out || k % 256 || row0 < 0 || rows <= 0 || row0 + rows > n) return Status::error("dequant_q3k_repacked: bad arguments");
  const int64_t items = rows * k;
  dequant_q3k_kernel<<<unsigned(std::min<int64_t>((items + 255) / 256, 8192)), 256, 0, s>>>(
      static_cast<const uint8_t*>(w), n, k, row0, rows, static_cast<__half*>(out));
  return launch_status("dequant_q3k_repacked");
}

void register_q3k_variants(std::vector<GemvVariant>& out) {
  register_units_rungs<Q3kUnits>(out, WeightLayout::Repacked,
                                "q3_K repacked into qs/hmask/scale/d planes: a 16-byte quant run per lane, dp4a",
                                "q3k_dp4a for decode (batch 1): two register slots of steps, one always in flight (gemv_slots.cuh)");
}

}  // namespace lamina::kernels

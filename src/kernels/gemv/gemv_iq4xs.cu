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
#include "kernels/common/launch_status.h"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_iq4.cuh"
#include "kernels/gemv/gemv_units.cuh"

#include <cuda_fp16.h>

#include <algorithm>

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

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

// ---- the repacked layout (gemv.h), read by q_dp4a ---------------------------------------------
// quants [n][k/2]: block j of a row in bytes 16 j .. 16 j + 15, byte b holding its elements 2 b
// (low nibble) and 2 b + 1 (high): a word's eight nibbles are eight consecutive elements, so that
// each 16 bits look up four values in x's byte order (iq4_lookup4) with no permute after;
// headers [n][k/256][8]: d, scales_h, scales_l as in the file. The file's 136 bytes per 256.
struct Iq4xsPlanes {
  size_t head;
  __host__ __device__ Iq4xsPlanes(int64_t n, int64_t k) : head(size_t(n) * size_t(k) / 2) {}
};

// One thread per super-block. GGUF: qs byte 16 j + i holds elements i (low nibble) and 16 + i
// (high) of sub-block j.
__global__ void repack_iq4xs_kernel(const uint8_t* __restrict__ src, int64_t n, int64_t k, uint8_t* __restrict__ dst) {
  const Iq4xsPlanes pl(n, k);
  const int64_t supers = n * (k / 256);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < supers; i += int64_t(gridDim.x) * blockDim.x) {
    const uint8_t* b = src + size_t(i) * sizeof(block_iq4_xs);
    for (int j = 0; j < 8; ++j) dst[pl.head + size_t(i) * 8 + j] = b[j];
    const uint8_t* qs = b + 8;
    const auto nib = [&](int e) { return q_nib(qs + 16 * (e / 32), e % 32); };  // element e's index
    for (int e = 0; e < 256; e += 2) dst[size_t(i) * 128 + e / 2] = uint8_t(nib(e) | nib(e + 1) << 4);
  }
}

// out[r][c] (f16) = element c of row row0 + r, one thread per element: the CPU's formula
// (format/quant_decode.h), d (ls - 32) in f32 times the value, rounded once.
__global__ void dequant_iq4xs_kernel(const uint8_t* __restrict__ w, int64_t n, int64_t k, int64_t row0, int64_t rows,
                                     __half* __restrict__ out) {
  const Iq4xsPlanes pl(n, k);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * k; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = row0 + i / k, e = i % k;
    const uint8_t byte = w[size_t(row) * size_t(k / 2) + size_t(e / 2)];
    const int q = e % 2 ? byte >> 4 : byte & 15;
    const uint8_t* h = w + pl.head + (size_t(row) * size_t(k / 256) + size_t(e / 256)) * 8;
    const int scale = iq4xs_scale(uint16_t(h[2] | h[3] << 8), h + 4, int(e % 256) / 32);  // ls - 32
    const float d = __half2float(*reinterpret_cast<const __half*>(h));
    out[i] = __float2half_rn(__fmul_rn(__fmul_rn(d, float(scale)), float(iq4_value(q))));
  }
}

}  // namespace

size_t gemv_iq4xs_repacked_bytes(int64_t n, int64_t k) { return size_t(n) * size_t(k / 256) * sizeof(block_iq4_xs); }

Status gemv_iq4xs_repack(const void* src, int64_t n, int64_t k, void* out, cudaStream_t s) {
  if (k % 256 || n <= 0) return Status::error("gemv_repack: bad iq4_xs shape");
  const unsigned grid = unsigned(std::min<int64_t>((n * (k / 256) + 255) / 256, 4096));
  repack_iq4xs_kernel<<<grid, 256, 0, s>>>(static_cast<const uint8_t*>(src), n, k, static_cast<uint8_t*>(out));
  return launch_status("gemv_repack iq4_xs");
}

Status dequant_iq4xs_repacked(const void* w, int64_t n, int64_t k, int64_t row0, int64_t rows, void* out, cudaStream_t s) {
  if (!w || !out || k % 256 || row0 < 0 || rows <= 0 || row0 + rows > n || reinterpret_cast<uintptr_t>(out) % 2 ||
      reinterpret_cast<uintptr_t>(w) % 2)  // (d is read as an f16 from the header plane)
    return Status::error("dequant_repacked: bad arguments");
  const unsigned grid = unsigned(std::min<int64_t>((rows * k + 255) / 256, 8192));
  dequant_iq4xs_kernel<<<grid, 256, 0, s>>>(static_cast<const uint8_t*>(w), n, k, row0, rows, static_cast<__half*>(out));
  return launch_status("dequant_repacked");
}

void register_iq4xs_variants(std::vector<GemvVariant>& out) {
  register_units_rungs<Iq4xsUnits>(out, WeightLayout::Gguf,
                                "iq4_xs in place: a sub-block's 16 quant bytes per lane, table lookups by prmt, dp4a",
                                "iq4xs_dp4a for decode (batch 1): two register slots of steps, one always in flight (gemv_slots.cuh)");
}

}  // namespace lamina::kernels

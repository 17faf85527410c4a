// The repacked layout of Q4_K and Q5_K (gemv.h): GGUF's super-blocks split into planes that q_dp4a
// and the quantised GEMMs read as they read Q4_0's (and Q5_0's fifth bits):
//   quants [n][k/2]   block j of a super-block in Q4_0's order: byte e holds elements e (low
//                     nibble) and e + 16 (high) of sub-block j
//   Q5_K: fifth bits [n][k/32] u32: element e's fifth bit at bit 8 (e % 4) + e / 4 of block j's
//         word (gemv_k23.cuh: fifth_plane_word)
//   headers [n][k/256][16]: d, dmin and the 12 bytes of 6-bit scales and mins, as in the file
// The file's bytes, rearranged: 144 (Q4_K) and 176 (Q5_K) per 256 weights.
#include "format/quant_blocks.h"
#include "kernels/common/launch_status.h"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_k23.cuh"

#include <cuda_fp16.h>

#include <algorithm>

namespace lamina::kernels {
namespace {

template <bool kQ5>
struct Planes {  // byte offsets of the planes of an n x k matrix
  static constexpr int kBlockBytes = kQ5 ? 176 : 144;
  size_t high, head;
  __host__ __device__ Planes(int64_t n, int64_t k)
      : high(size_t(n) * size_t(k) / 2), head(high + (kQ5 ? size_t(n) * size_t(k) / 8 : 0)) {}
};

// One thread per super-block. GGUF: qs byte 32 c + e holds element e of sub-blocks 2c (low nibble)
// and 2c + 1 (high); Q5_K's qh byte e holds the fifth bit of element e of sub-block j in bit j.
template <bool kQ5>
__global__ void repack_kernel(const uint8_t* __restrict__ src, int64_t n, int64_t k, uint8_t* __restrict__ dst) {
  const Planes<kQ5> pl(n, k);
  const int64_t supers = n * (k / 256);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < supers; i += int64_t(gridDim.x) * blockDim.x) {
    const uint8_t* b = src + size_t(i) * Planes<kQ5>::kBlockBytes;
    for (int j = 0; j < 16; ++j) dst[pl.head + size_t(i) * 16 + j] = b[j];  // d, dmin, scales: the first 16 bytes of both
    const uint8_t* qh = b + 16;                                               // (Q5_K)
    const uint8_t* qs = b + (kQ5 ? 48 : 16);
    for (int j = 0; j < 8; ++j) {
      const int sh = 4 * (j & 1);
      uint8_t* q = dst + size_t(i) * 128 + 16 * j;
      for (int e = 0; e < 16; ++e)
        q[e] = uint8_t(((qs[32 * (j / 2) + e] >> sh) & 15u) | ((qs[32 * (j / 2) + e + 16] >> sh) & 15u) << 4);
      if constexpr (kQ5) {
        uint32_t bits = 0;
        for (int e = 0; e < 32; ++e) bits |= uint32_t((qh[e] >> j) & 1u) << e;
        reinterpret_cast<uint32_t*>(dst + pl.high)[size_t(i) * 8 + j] = gemv_detail::fifth_plane_word(bits);
      }
    }
  }
}

// out[r][c] (f16) = element c of row row0 + r, one thread per element: the CPU's formula
// (format/quant_decode.h), d sc q - dmin m in f32 without contraction, then rounded once.
template <bool kQ5>
__global__ void dequant_kernel(const uint8_t* __restrict__ w, int64_t n, int64_t k, int64_t row0, int64_t rows,
                               __half* __restrict__ out) {
  const Planes<kQ5> pl(n, k);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * k; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = row0 + i / k, e = i % k, blk = e / 32;
    const int idx = int(e % 32);
    const uint8_t byte = w[size_t(row) * size_t(k / 2) + size_t(blk) * 16 + idx % 16];
    int q = idx < 16 ? byte & 15 : byte >> 4;
    if constexpr (kQ5) q |= gemv_detail::fifth_plane_bit(reinterpret_cast<const uint32_t*>(w + pl.high)[size_t(row) * size_t(k / 32) + size_t(blk)], idx) << 4;
    const uint8_t* h = w + pl.head + (size_t(row) * size_t(k / 256) + size_t(e / 256)) * 16;
    uint8_t sc, m;
    q4k_scale_min(int(blk % 8), h + 4, &sc, &m);
    const float d = __half2float(*reinterpret_cast<const __half*>(h)), dmin = __half2float(*reinterpret_cast<const __half*>(h + 2));
    out[i] = __float2half_rn(__fsub_rn(__fmul_rn(__fmul_rn(d, float(sc)), float(q)), __fmul_rn(dmin, float(m))));
  }
}

}  // namespace

size_t gemv_kquant_planes_bytes(GgmlType t, int64_t n, int64_t k) {
  return size_t(n) * size_t(k / 256) * (t == GgmlType::Q5_K ? 176 : 144);
}

Status gemv_kquant_planes_repack(GgmlType t, const void* src, int64_t n, int64_t k, void* out, cudaStream_t s) {
  if (t != GgmlType::Q4_K && t != GgmlType::Q5_K) return Status::error("gemv_repack: q4_K and q5_K planes only");
  if (k % 256 || n <= 0) return Status::error("gemv_repack: bad shape");
  const unsigned grid = unsigned(std::min<int64_t>((n * (k / 256) + 255) / 256, 4096));
  const auto* in = static_cast<const uint8_t*>(src);
  auto* o = static_cast<uint8_t*>(out);
  if (t == GgmlType::Q5_K) repack_kernel<true><<<grid, 256, 0, s>>>(in, n, k, o);
  else repack_kernel<false><<<grid, 256, 0, s>>>(in, n, k, o);
  return launch_status("gemv_repack");
}

Status dequant_kquant_planes(GgmlType t, const void* w, int64_t n, int64_t k, int64_t row0, int64_t rows, void* out,
                             cudaStream_t s) {
  if (!w || !out || k % 256 || row0 < 0 || rows <= 0 || row0 + rows > n || reinterpret_cast<uintptr_t>(out) % 2)
    return Status::error("dequant_repacked: bad arguments");
  const unsigned grid = unsigned(std::min<int64_t>((rows * k + 255) / 256, 8192));
  const auto* in = static_cast<const uint8_t*>(w);
  auto* o = static_cast<__half*>(out);
  if (t == GgmlType::Q5_K) dequant_kernel<true><<<grid, 256, 0, s>>>(in, n, k, row0, rows, o);
  else dequant_kernel<false><<<grid, 256, 0, s>>>(in, n, k, row0, rows, o);
  return launch_status("dequant_repacked");
}

}  // namespace lamina::kernels

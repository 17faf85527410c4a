// The repacked layouts of Q2_K and Q3_K (gemv_k23.cuh): GGUF's super-blocks into planes, and rows
// of the planes back to f16 (the B operand of an f16 GEMM for a prompt's matmul).
#include "format/quant_blocks.h"
#include "kernels/common/launch_status.h"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_k23.cuh"

#include <cuda_fp16.h>

#include <algorithm>

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

// One thread per super-block: the file's qs (and hmask) into the low (and high) words of its 8
// blocks, the scales and d as the layout keeps them.
template <bool kQ3>
__global__ void repack_kernel(const uint8_t* __restrict__ src, int64_t n, int64_t k, uint8_t* __restrict__ dst) {
  const K23Planes pl(kQ3, n, k);
  const int64_t supers = n * (k / 256);
  auto* low = reinterpret_cast<uint32_t*>(dst);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < supers; i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (kQ3) {
      const block_q3_K& b = reinterpret_cast<const block_q3_K*>(src)[i];
      for (int j = 0; j < 8; ++j) {
        for (int h = 0; h < 2; ++h) low[(size_t(i) * 8 + j) * 2 + h] = k23_low_word(b.qs, j, h);
        reinterpret_cast<uint32_t*>(dst + pl.high)[size_t(i) * 8 + j] = q3k_high_word(b.hmask, j);
      }
      for (int t = 0; t < 16; ++t) dst[pl.sc + size_t(i) * 16 + t] = uint8_t(int8_t(q3k_scale(b.scales, t)));
      reinterpret_cast<uint16_t*>(dst + pl.d)[i] = b.d;
    } else {
      const block_q2_K& b = reinterpret_cast<const block_q2_K*>(src)[i];
      for (int j = 0; j < 8; ++j)
        for (int h = 0; h < 2; ++h) low[(size_t(i) * 8 + j) * 2 + h] = k23_low_word(b.qs, j, h);
      for (int t = 0; t < 16; ++t) dst[pl.sc + size_t(i) * 16 + t] = b.scales[t];
      reinterpret_cast<uint16_t*>(dst + pl.d)[2 * i] = b.d;
      reinterpret_cast<uint16_t*>(dst + pl.d)[2 * i + 1] = b.dmin;
    }
  }
}

// out[r][c] (f16) = element c of row row0 + r, one thread per element: the CPU's formula
// (format/quant_decode.h) in f32 without contraction, then rounded once.
template <bool kQ3>
__global__ void dequant_kernel(const uint8_t* __restrict__ w, int64_t n, int64_t k, int64_t row0, int64_t rows,
                               __half* __restrict__ out) {
  const K23Planes pl(kQ3, n, k);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * k; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = row0 + i / k, c = i % k, blk = size_t(row) * size_t(k / 32) + c / 32, sb = row * (k / 256) + c / 256;
    const uint2 low = reinterpret_cast<const uint2*>(w)[blk];
    const uint32_t high = kQ3 ? reinterpret_cast<const uint32_t*>(w + pl.high)[blk] : 0u;
    const int q = k23_quant(low.x, low.y, high, int(c % 32), kQ3);
    const uint8_t s = w[pl.sc + size_t(row) * size_t(k / 16) + c / 16];
    const __half* d = reinterpret_cast<const __half*>(w + pl.d);
    float v;
    if constexpr (kQ3) v = __fmul_rn(__fmul_rn(__half2float(d[sb]), float(int8_t(s))), float(q - 4));
    else v = __fsub_rn(__fmul_rn(__fmul_rn(__half2float(d[2 * sb]), float(s & 15)), float(q)),
                       __fmul_rn(__half2float(d[2 * sb + 1]), float(s >> 4)));
    out[i] = __float2half_rn(v);
  }
}

}  // namespace

size_t gemv_k23_planes_bytes(GgmlType t, int64_t n, int64_t k) { return K23Planes(t == GgmlType::Q3_K, n, k).end; }

Status gemv_k23_planes_repack(GgmlType t, const void* src, int64_t n, int64_t k, void* out, cudaStream_t s) {
  if (t != GgmlType::Q2_K && t != GgmlType::Q3_K) return Status::error("gemv_repack: q2_K and q3_K planes only");
  if (k % 256 || n <= 0) return Status::error("gemv_repack: bad shape");
  const unsigned grid = unsigned(std::min<int64_t>((n * (k / 256) + 255) / 256, 4096));
  const auto* in = static_cast<const uint8_t*>(src);
  auto* o = static_cast<uint8_t*>(out);
  if (t == GgmlType::Q3_K) repack_kernel<true><<<grid, 256, 0, s>>>(in, n, k, o);
  else repack_kernel<false><<<grid, 256, 0, s>>>(in, n, k, o);
  return launch_status("gemv_repack");
}

Status dequant_k23_planes(GgmlType t, const void* w, int64_t n, int64_t k, int64_t row0, int64_t rows, void* out,
                          cudaStream_t s) {
  if (t != GgmlType::Q2_K && t != GgmlType::Q3_K) return Status::error("dequant_repacked: q2_K and q3_K planes only");
  if (!w || !out || k % 256 || row0 < 0 || rows <= 0 || row0 + rows > n || reinterpret_cast<uintptr_t>(out) % 2 ||
      reinterpret_cast<uintptr_t>(w) % 8)
    return Status::error("dequant_repacked: bad arguments");
  const unsigned grid = unsigned(std::min<int64_t>((rows * k + 255) / 256, 8192));
  const auto* in = static_cast<const uint8_t*>(w);
  auto* o = static_cast<__half*>(out);
  if (t == GgmlType::Q3_K) dequant_kernel<true><<<grid, 256, 0, s>>>(in, n, k, row0, rows, o);
  else dequant_kernel<false><<<grid, 256, 0, s>>>(in, n, k, row0, rows, o);
  return launch_status("dequant_repacked");
}

}  // namespace lamina::kernels

// The repacked layouts of Q5_0, Q5_1 and IQ4_NL (gemv.h), the types with one scale (and min) per
// block of 32: GGUF's blocks split into planes that q_dp4a reads as it reads Q4_0's and Q5_K's,
// 16-byte aligned quants for every lane:
//   quants [n][k/2]       Q5_0, Q5_1: as in the file (Q4_0's order: byte e of a block holds its
//                         elements e and e + 16); IQ4_NL: in consecutive order (byte b holds
//                         elements 2b and 2b + 1), as the IQ4_XS planes (gemv_iq4xs.cu), so that
//                         each 16 bits of a word look up four table values in x's byte order
//   fifth bits [n][k/32]  Q5_0, Q5_1: a u32 per block, element e's at bit 8 (e % 4) + e / 4
//                         (gemv_k23.cuh: fifth_plane_word of the file's qh)
//   scales [n][k/32]      f16 d (Q5_0, IQ4_NL), or the f16 pair (d, m) (Q5_1)
// The file's bytes, rearranged: 22, 24 and 18 per 32 weights. (Before these layouts the backends
// held Q5_0 and IQ4_NL matrices as Q8_0: 34 bytes.)
#include "format/quant_blocks.h"
#include "format/quant_decode.h"
#include "kernels/common/launch_status.h"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_k23.cuh"

#include <cuda_fp16.h>

#include <algorithm>

namespace lamina::kernels {
namespace {

// Bytes of one block of each plane, and the planes' offsets in an n x k matrix.
struct Block32Planes {
  int fifth = 0, scale = 2;  // per block: fifth bits (Q5_0, Q5_1: 4) and scales (Q5_1: 4)
  size_t high = 0, scales = 0;
  __host__ __device__ Block32Planes(GgmlType t, int64_t n, int64_t k) {
    const bool q5 = t == GgmlType::Q5_0 || t == GgmlType::Q5_1;
    fifth = q5 ? 4 : 0, scale = t == GgmlType::Q5_1 ? 4 : 2;
    const size_t blocks = size_t(n) * size_t(k / 32);
    high = blocks * 16, scales = high + blocks * size_t(fifth);
  }
};

// One thread per block. GGUF: [d (, m)][qh (Q5_0, Q5_1)][qs 16 bytes].
template <GgmlType kT>
__global__ void repack_block32_kernel(const uint8_t* __restrict__ src, int64_t n, int64_t k, uint8_t* __restrict__ dst) {
  const Block32Planes pl(kT, n, k);
  constexpr int kHeader = kT == GgmlType::Q5_1 ? 4 : 2;
  constexpr int kBytes = kT == GgmlType::Q5_0 ? sizeof(block_q5_0) : kT == GgmlType::Q5_1 ? sizeof(block_q5_1) : sizeof(block_iq4_nl);
  const int64_t blocks = n * (k / 32);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < blocks; i += int64_t(gridDim.x) * blockDim.x) {
    const uint8_t* b = src + size_t(i) * kBytes;
    for (int j = 0; j < kHeader; ++j) dst[pl.scales + size_t(i) * kHeader + j] = b[j];
    uint8_t* q = dst + size_t(i) * 16;
    if constexpr (kT == GgmlType::IQ4_NL) {
      for (int e = 0; e < 32; e += 2) q[e / 2] = uint8_t(q_nib(b + 2, e) | q_nib(b + 2, e + 1) << 4);
    } else {
      uint32_t qh = 0;
      for (int j = 0; j < 4; ++j) qh |= uint32_t(b[kHeader + j]) << (8 * j);
      const uint32_t word = gemv_detail::fifth_plane_word(qh);
      for (int j = 0; j < 4; ++j) dst[pl.high + size_t(i) * 4 + j] = uint8_t(word >> (8 * j));
      for (int j = 0; j < 16; ++j) q[j] = b[kHeader + 4 + j];
    }
  }
}

// out[r][c] (f16) = element c of row row0 + r, one thread per element reading its quant byte (and
// fifth-bit word, and scales): the CPU's formula (format/quant_decode.h: decode_q5_0, decode_q5_1,
// decode_iq4_nl), rounded once.
template <GgmlType kT>
__global__ void dequant_block32_kernel(const uint8_t* __restrict__ w, int64_t n, int64_t k, int64_t row0, int64_t rows,
                                       __half* __restrict__ out) {
  const Block32Planes pl(kT, n, k);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * k; i += int64_t(gridDim.x) * blockDim.x) {
    const size_t blk = size_t(row0 + i / k) * size_t(k / 32) + size_t(i % k) / 32;
    const int e = int(i % 32);
    const float d = f16_to_f32(*reinterpret_cast<const uint16_t*>(w + pl.scales + blk * pl.scale));
    float v;
    if constexpr (kT == GgmlType::IQ4_NL) {
      const uint8_t byte = w[blk * 16 + e / 2];
      v = d * float(iq4_value(e % 2 ? byte >> 4 : byte & 15));
    } else {
      const uint8_t byte = w[blk * 16 + e % 16];
      const uint32_t qh = *reinterpret_cast<const uint32_t*>(w + pl.high + blk * 4);
      const int q = (e < 16 ? byte & 15 : byte >> 4) | gemv_detail::fifth_plane_bit(qh, e) << 4;
      if constexpr (kT == GgmlType::Q5_0) v = d * float(q - 16);
      else v = d * float(q) + f16_to_f32(*reinterpret_cast<const uint16_t*>(w + pl.scales + blk * 4 + 2));
    }
    out[i] = __float2half_rn(v);
  }
}

template <GgmlType kT>
void launch_repack(const void* src, int64_t n, int64_t k, void* out, cudaStream_t s) {
  const unsigned grid = unsigned(std::min<int64_t>((n * (k / 32) + 255) / 256, 4096));
  repack_block32_kernel<kT><<<grid, 256, 0, s>>>(static_cast<const uint8_t*>(src), n, k, static_cast<uint8_t*>(out));
}

template <GgmlType kT>
void launch_dequant(const void* w, int64_t n, int64_t k, int64_t row0, int64_t rows, void* out, cudaStream_t s) {
  const unsigned grid = unsigned(std::min<int64_t>((rows * k + 255) / 256, 8192));
  dequant_block32_kernel<kT><<<grid, 256, 0, s>>>(static_cast<const uint8_t*>(w), n, k, row0, rows, static_cast<__half*>(out));
}

bool block32_type(GgmlType t) { return t == GgmlType::Q5_0 || t == GgmlType::Q5_1 || t == GgmlType::IQ4_NL; }

}  // namespace

size_t gemv_block32_planes_bytes(GgmlType t, int64_t n, int64_t k) {
  const Block32Planes pl(t, n, k);
  return pl.scales + size_t(n) * size_t(k / 32) * size_t(pl.scale);
}

Status gemv_block32_planes_repack(GgmlType t, const void* src, int64_t n, int64_t k, void* out, cudaStream_t s) {
  if (!block32_type(t)) return Status::error("gemv_repack: q5_0, q5_1 and iq4_nl planes only");
  if (k % 32 || n <= 0) return Status::error("gemv_repack: bad shape");
  if (t == GgmlType::Q5_0) launch_repack<GgmlType::Q5_0>(src, n, k, out, s);
  else if (t == GgmlType::Q5_1) launch_repack<GgmlType::Q5_1>(src, n, k, out, s);
  else launch_repack<GgmlType::IQ4_NL>(src, n, k, out, s);
  return launch_status("gemv_repack");
}

Status dequant_block32_planes(GgmlType t, const void* w, int64_t n, int64_t k, int64_t row0, int64_t rows, void* out,
                              cudaStream_t s) {
  if (!block32_type(t) || !w || !out || k % 32 || row0 < 0 || rows <= 0 || row0 + rows > n ||
      reinterpret_cast<uintptr_t>(out) % 2 || reinterpret_cast<uintptr_t>(w) % 4)
    return Status::error("dequant_repacked: bad arguments");
  if (t == GgmlType::Q5_0) launch_dequant<GgmlType::Q5_0>(w, n, k, row0, rows, out, s);
  else if (t == GgmlType::Q5_1) launch_dequant<GgmlType::Q5_1>(w, n, k, row0, rows, out, s);
  else launch_dequant<GgmlType::IQ4_NL>(w, n, k, row0, rows, out, s);
  return launch_status("dequant_repacked");
}

}  // namespace lamina::kernels

// One step of q_dp4a (repacked Q4_0 / Q4_1 / Q8_0), kept apart from the kernel's loop: each
// lane loads 16-byte weight chunks l0 + u*32 + lane of kRows rows with their block scales, then
// multiplies them with int8 x blocks by dp4a:
//   sum_i (q_i - 8) * x_i = d_w * d_x * (dp4a(q, xq) - 8 * sum(xq))           (Q4_0)
//   sum_i (d_w q_i + m_w) * x_i = d_x * (d_w * dp4a(q, xq) + m_w * sum(xq))   (Q4_1)
//   sum_i q_i * x_i = d_w * d_x * dp4a(q, xq)                                  (Q8_0)
#pragma once

#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_x8.cuh"

#include <cuda_fp16.h>

#include <cstdint>

namespace lamina::kernels::gemv_detail {

template <int kBits, bool kMin, int kRows, int kUnroll>
struct Dp4aStep {
  static constexpr int kPer = kBits == 4 ? 32 : 16;           // weights per 16-byte chunk
  static constexpr int kScaleBytes = kMin ? 4 : 2;            // f16 d, or (d, m) per block of 32
  static __device__ __forceinline__ int64_t loads(int64_t k) { return k / kPer; }
  static __host__ __device__ __forceinline__ size_t quant_row(int64_t k) { return size_t(k) * kBits / 8; }
  static __host__ __device__ __forceinline__ size_t scale_row(int64_t k) { return size_t(k / 32) * kScaleBytes; }

  // Rows of a matrix in the repacked layout: quant rows, then scale rows.
  struct Rows {
    const uint8_t* q;
    const uint8_t* sc;
  };
  static __device__ __forceinline__ Rows global(const uint8_t* w, int64_t n, int64_t k) {
    return {w, w + size_t(n) * quant_row(k)};
  }

  struct Regs {
    uint4 raw[kRows][kUnroll];
    float dw[kRows][kUnroll], mw[kRows][kUnroll];
  };

  // Rows i0..i0+kRows-1 of `rows` (clamped to limit-1: loads stay in bounds), chunks l0 + u*32 + lane.
  static __device__ __forceinline__ void load(Rows rows, int64_t i0, int64_t limit, int64_t l0, int64_t k, Regs& g) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t l = l0 + u * 32 + lane;
        const int64_t i = i0 + r < limit ? i0 + r : limit - 1;
        const bool in = l < loads(k);
        const uint8_t* qp = rows.q + size_t(i) * quant_row(k) + size_t(l) * 16;
        const uint8_t* sp = rows.sc + size_t(i) * scale_row(k) + size_t(l * kPer / 32) * kScaleBytes;
        g.raw[r][u] = in ? load_stream(qp) : make_uint4(0, 0, 0, 0);
        if constexpr (kMin) {
          const __half2 dm = in ? *reinterpret_cast<const __half2*>(sp) : __floats2half2_rn(0.f, 0.f);
          g.dw[r][u] = __low2float(dm);
          g.mw[r][u] = __high2float(dm);
        } else {
          g.dw[r][u] = in ? __half2float(*reinterpret_cast<const __half*>(sp)) : 0.f;
          g.mw[r][u] = 0.f;
        }
      }
  }

  // acc[r][b] += the chunks in g times x (int8 blocks, x8_bytes(k) per batch row).
  static __device__ __forceinline__ void dot(const Regs& g, const uint8_t* xs, int64_t k, int64_t l0, int batch,
                                             float (&acc)[kRows][kGemvMaxBatch]) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t l = l0 + u * 32 + lane;
      if (l >= loads(k)) break;
      const int64_t xblk = l * kPer / 32;  // the x block these weights meet
#pragma unroll
      for (int b = 0; b < kGemvMaxBatch; ++b) {
        if (b >= batch) break;
        const uint8_t* xb = xs + size_t(b) * x8_bytes(k);
        const float dx = reinterpret_cast<const float*>(xb + k)[xblk];
        const int4 xlo = *reinterpret_cast<const int4*>(xb + l * kPer);  // 16 int8
        int4 xhi = make_int4(0, 0, 0, 0);
        int xsum = 0;
        if constexpr (kBits == 4) {
          xhi = *reinterpret_cast<const int4*>(xb + l * kPer + 16);
          xsum = reinterpret_cast<const int*>(xb + k + (k / 32) * 4)[xblk];
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const uint4 v = g.raw[r][u];
          int sumi;
          if constexpr (kBits == 4) {
            const uint32_t m = 0x0F0F0F0Fu;
            sumi = __dp4a(int(v.x & m), xlo.x, 0);
            sumi = __dp4a(int(v.y & m), xlo.y, sumi);
            sumi = __dp4a(int(v.z & m), xlo.z, sumi);
            sumi = __dp4a(int(v.w & m), xlo.w, sumi);
            sumi = __dp4a(int((v.x >> 4) & m), xhi.x, sumi);
            sumi = __dp4a(int((v.y >> 4) & m), xhi.y, sumi);
            sumi = __dp4a(int((v.z >> 4) & m), xhi.z, sumi);
            sumi = __dp4a(int((v.w >> 4) & m), xhi.w, sumi);
            if constexpr (!kMin) sumi -= 8 * xsum;
          } else {
            sumi = __dp4a(int(v.x), xlo.x, 0);
            sumi = __dp4a(int(v.y), xlo.y, sumi);
            sumi = __dp4a(int(v.z), xlo.z, sumi);
            sumi = __dp4a(int(v.w), xlo.w, sumi);
          }
          acc[r][b] += dx * (g.dw[r][u] * float(sumi) + (kMin ? g.mw[r][u] * float(xsum) : 0.f));
        }
      }
    }
  }
};

}  // namespace lamina::kernels::gemv_detail

// The weight step shared by the dp4a GEMVs on the repacked Q4_0 / Q4_1 / Q8_0 layout (q_dp4a,
// q_dp4a_pipe): loads of 16-byte chunks with their block scales, and their dp4a products with
// int8 x blocks (kernels/common/q8_blocks.h).
#pragma once

#include "kernels/gemv/gemv_common.cuh"

#include <cuda_fp16.h>
#include <cstdint>
#include <string>

namespace lamina::kernels::gemv_detail {

// One step of q_dp4a: each lane loads 16-byte weight chunks l0 + u*32 + lane of kRows rows with
// their block scales (load), then multiplies them with int8 x blocks by dp4a (dot).
template <int kBits, bool kMin, int kRows, int kUnroll>
struct Dp4aStep {
  static constexpr int kPer = kBits == 4 ? 32 : 16;           // weights per 16-byte chunk
  static constexpr int kScaleBytes = kMin ? 4 : 2;            // f16 d, or (d, m) per block of 32
  static __device__ __forceinline__ int64_t loads(int64_t k) { return k / kPer; }

  struct Regs {
    uint4 raw[kRows][kUnroll];
    float dw[kRows][kUnroll], mw[kRows][kUnroll];
  };

  // Rows row0..row0+kRows-1 of w [n][k] in the repacked layout (quant rows, then scale rows;
  // rows past n clamped to n-1 so that loads stay in bounds), chunks l0 + u*32 + lane.
  static __device__ __forceinline__ void load(const uint8_t* w, int64_t row0, int64_t n, int64_t l0, int64_t k, Regs& g) {
    const int lane = threadIdx.x % 32;
    const size_t qrow = size_t(k) * kBits / 8, srow = size_t(k / 32) * kScaleBytes;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t l = l0 + u * 32 + lane;
        const int64_t i = row0 + r < n ? row0 + r : n - 1;
        const bool in = l < loads(k);
        const uint8_t* qp = w + size_t(i) * qrow + size_t(l) * 16;
        const uint8_t* sp = w + size_t(n) * qrow + size_t(i) * srow + size_t(l * kPer / 32) * kScaleBytes;
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

// Persistent grids of the dp4a GEMVs: one block per SM. Measured in the decode chain (tg128,
// llama2-7b presets, H100, 2026-11-23; each tuned so, LAMINA_GEMV_BLOCKS_PER_SM=1 on every
// persistent GEMV): q4_0 456.6 -> 463.8 t/s, q8_0 296.7 -> 312.1, over as many blocks as fit. The
// tuner then takes the 16-warp, 32-row configs (one block fills an SM's registers), which in the
// chain beat the two 8-warp blocks per SM it picks otherwise by a hair in isolation.
inline constexpr int kDp4aBlocksPerSm = 1;

inline bool dp4a_types(GgmlType t) { return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q8_0; }

// A dp4a variant's launch by weight type (one launcher per type, each dispatching on the config).
using GemvLaunch = Status (*)(const GemvProblem&, const GemvConfig&, cudaStream_t);
template <GemvLaunch kQ4_0, GemvLaunch kQ4_1, GemvLaunch kQ8_0>
Status dp4a_by_type(const char* name, const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (p.k % 32) return Status::error(std::string(name) + ": k must be a multiple of 32");
  if (p.wtype == GgmlType::Q4_0) return kQ4_0(p, c, s);
  if (p.wtype == GgmlType::Q4_1) return kQ4_1(p, c, s);
  if (p.wtype == GgmlType::Q8_0) return kQ8_0(p, c, s);
  return Status::error(std::string(name) + ": only q4_0, q4_1 and q8_0");
}

}  // namespace lamina::kernels::gemv_detail

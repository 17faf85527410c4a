// q1_mma: quantised weights on tensor cores. The tc_gemm.cuh mainloop with a B policy that copies
// each k-step's raw weight bytes (cp.async, STAGES deep) into a staging buffer, then dequantises
// them into one swizzled f16/bf16 [BN][32] tile before the ldmatrix/mma steps. One k-step of 32
// is exactly one Q8_0/Q4_0 block or one Q4_K sub-block, so each row needs one scale per step.
//   Q8_0, Q4_0: the repacked planes of gemv_repack (quants [n][k or k/2], then f16 d [n][k/32]),
//               the same bytes the decode GEMV reads
//   Q4_K:       its repacked planes (quants [n][k/2] in Q4_0's order, then the 16-byte super-block
//               headers [n][k/256]): per step the block's 16 quant bytes and its header
// A is f16/bf16 [m][k]; the weights are rounded to A's type after scaling (as a dequantised
// copy would be). Figures: docs/benchmarks.md (lamina kbench gemm).
#include "core/half.h"
#include "format/quant_blocks.h"
#include "kernels/gemm/tc_gemm.cuh"

namespace lamina::kernels {
namespace {

using namespace tc_gemm;

enum QKind { kQ8_0, kQ4_0, kQ4_K };

template <class T, QKind kKind>
struct QuantB {
  static constexpr int kRowBytes = kKind == kQ8_0 ? 32 : 16;   // staged quant bytes per row per step
  static constexpr int kScaleBytes = kKind == kQ4_K ? 16 : 4;  // the header, or f16 d fetched as its aligned word
  struct Args {
    const uint8_t* w;
  };
  template <int kBn, int kStages>
  static constexpr size_t stage_bytes() { return size_t(kBn) * (kRowBytes + kScaleBytes); }
  template <int kBn, int kStages>
  static constexpr size_t smem_bytes() { return kStages * stage_bytes<kBn, kStages>() + size_t(kBn) * kBk * sizeof(T); }

  __device__ static size_t row_bytes(int64_t k) {
    return kKind == kQ8_0 ? size_t(k) : size_t(k) / 2;
  }

  template <int kBn, int kStages>
  __device__ static void issue(const Args& b, int64_t n, int64_t k, int64_t n0, int64_t kt, int stage, uint8_t* smem) {
    uint8_t* st = smem + size_t(stage) * stage_bytes<kBn, kStages>();
    constexpr int kChunks = kBn * kRowBytes / 16;
    for (int f = int(threadIdx.x); f < kChunks; f += kThreads) {
      const int row = f / (kRowBytes / 16), c = f % (kRowBytes / 16);
      const bool in = n0 + row < n;
      const uint8_t* src = b.w + size_t(in ? n0 + row : 0) * row_bytes(k);
      src += kKind == kQ8_0 ? kt * 32 + c * 16 : kt * 16;
      mma::cp_async16(st + row * kRowBytes + c * 16, src, in ? 16 : 0);
    }
    const uint8_t* plane = b.w + size_t(n) * row_bytes(k);
    for (int row = int(threadIdx.x); row < kBn; row += kThreads) {
      const bool in = n0 + row < n;
      uint8_t* dst = st + size_t(kBn) * kRowBytes + row * kScaleBytes;
      if constexpr (kKind == kQ4_K) {
        const size_t idx = in ? size_t(n0 + row) * size_t(k / 256) + size_t(kt / 8) : 0;
        mma::cp_async16(dst, plane + idx * 16, in ? 16 : 0);
      } else {
        const size_t idx = in ? size_t(n0 + row) * size_t(k / 32) + size_t(kt) : 0;
        mma::cp_async4(dst, plane + (idx & ~size_t(1)) * 2, in ? 4 : 0);
      }
    }
  }

  // Dequantises the staged step into the [kBn][32] tile: each thread one half row (16 values).
  template <int kBn, int kStages>
  __device__ static const T* prepare(const Args&, int64_t, int64_t k, int64_t n0, int64_t kt, int stage, uint8_t* smem) {
    const uint8_t* st = smem + size_t(stage) * stage_bytes<kBn, kStages>();
    T* tile = reinterpret_cast<T*>(smem + kStages * stage_bytes<kBn, kStages>());
    for (int f = int(threadIdx.x); f < kBn * 2; f += kThreads) {
      const int row = f / 2, h = f % 2;
      const uint8_t* q = st + row * kRowBytes;
      float v[16];
      if constexpr (kKind == kQ4_K) {
        const uint8_t* hd = st + size_t(kBn) * kRowBytes + row * kScaleBytes;
        const float d = f16_to_f32(*reinterpret_cast<const uint16_t*>(hd));
        const float dmin = f16_to_f32(*reinterpret_cast<const uint16_t*>(hd + 2));
        uint8_t sc, mn;
        q4k_scale_min(int(kt % 8), hd + 4, &sc, &mn);
        const float ds = d * float(sc), dm = dmin * float(mn);
        const uint4 raw = *reinterpret_cast<const uint4*>(q);
        const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int i = 0; i < 16; ++i) {  // low nibbles: 0..15, high: 16..31
          const uint32_t byte = (words[i / 4] >> (8 * (i % 4))) & 0xFFu;
          v[i] = ds * float(h ? byte >> 4 : byte & 15u) - dm;
        }
      } else {
        const uint32_t word = *reinterpret_cast<const uint32_t*>(st + size_t(kBn) * kRowBytes + row * 4);
        const size_t idx = size_t(n0 + row) * size_t(k / 32) + size_t(kt);
        const float d = f16_to_f32(uint16_t(word >> (16 * (idx & 1))));
        const uint4 raw = *reinterpret_cast<const uint4*>(kKind == kQ8_0 ? q + h * 16 : q);
        const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          const uint32_t byte = (words[i / 4] >> (8 * (i % 4))) & 0xFFu;
          if constexpr (kKind == kQ8_0) v[i] = d * float(int8_t(byte));
          else v[i] = d * (float(h ? byte >> 4 : byte & 15u) - 8.f);  // low nibbles: 0..15, high: 16..31
        }
      }
      uint4 packed[2];
      uint32_t* pw = reinterpret_cast<uint32_t*>(packed);
#pragma unroll
      for (int i = 0; i < 8; ++i) pw[i] = mma::pack2<T>(v[2 * i], v[2 * i + 1]);
      *reinterpret_cast<uint4*>(tile + tile_off(row, h * 16)) = packed[0];
      *reinterpret_cast<uint4*>(tile + tile_off(row, h * 16 + 8)) = packed[1];
    }
    __syncthreads();
    return tile;
  }
};

template <class T, QKind kKind>
Status run_kind(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  const typename QuantB<T, kKind>::Args b{static_cast<const uint8_t*>(p.b)};
  if (c.bm == 128 && c.bn == 128) return launch<T, 128, 128, 4, QuantB<T, kKind>>(p, b, "q1_mma", s);
  if (c.bm == 64 && c.bn == 128) return launch<T, 64, 128, 4, QuantB<T, kKind>>(p, b, "q1_mma", s);
  return Status::error("q1_mma: no instance for config " + c.str());
}

template <class T>
Status run_type(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  if (p.b_type == GgmlType::Q8_0) return run_kind<T, kQ8_0>(p, c, s);
  if (p.b_type == GgmlType::Q4_0) return run_kind<T, kQ4_0>(p, c, s);
  return run_kind<T, kQ4_K>(p, c, s);
}

Status run_q1(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  return p.a_type == GgmlType::F16 ? run_type<__half>(p, c, s) : run_type<__nv_bfloat16>(p, c, s);
}

bool q1_supports(const GemmProblem& p) {
  const bool half = p.a_type == GgmlType::F16 || p.a_type == GgmlType::BF16;
  const bool type = p.b_type == GgmlType::Q8_0 || p.b_type == GgmlType::Q4_0 || p.b_type == GgmlType::Q4_K;
  return half && type && p.b_layout == WeightLayout::Repacked && (p.b_type != GgmlType::Q4_K || p.k % 256 == 0) &&
         !p.a_col_major && p.b_col_major;
}

}  // namespace

void register_qgemm_variants(std::vector<GemmVariant>& out) {
  out.push_back({"q1_mma", "quantised W dequantised in the load stage into the h1_mma tensor-core mainloop",
                 q1_supports, run_q1, {GemmConfig{128, 128, 32, 4}, GemmConfig{64, 128, 32, 4}}, false});
  out.back().column_parts = true;
}

}  // namespace lamina::kernels

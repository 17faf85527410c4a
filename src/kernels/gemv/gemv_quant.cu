// GEMV with quantised weights.
//   q_generic   any block type in the GGUF layout: a warp per row, each lane decodes whole
//               32-element chunks with the shared per-element decoders (format/quant_decode.h).
//               The correctness baseline for every quantised type.
//   q_repacked  Q4_0 / Q8_0 in the repacked layout (gemv_repack): quant plane and f16 scale
//               plane, so each lane streams 16 aligned bytes per block; `rows` rows per warp
//               share the x loads; `unroll` blocks in flight per lane; fused batch/epilogues.
#include "format/quant_decode.h"
#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_internal.h"

#include <cuda_runtime.h>

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

// ---- generic: decode 32 elements at a time from GGUF blocks ---------------------------------
template <class Block, int kBlockElems, float (*Decode)(const Block&, int)>
__global__ void q_generic(const uint8_t* __restrict__ w, const uint8_t* __restrict__ w_up, const float* __restrict__ x,
                          float* __restrict__ y, int64_t n, int64_t k, int batch, Epilogue ep) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= n) return;
  const size_t row_bytes = size_t(k / kBlockElems) * sizeof(Block);
  float acc[2][kGemvMaxBatch] = {};
  for (int mat = 0; mat < (w_up ? 2 : 1); ++mat) {
    const Block* blocks = reinterpret_cast<const Block*>((mat ? w_up : w) + size_t(row) * row_bytes);
    for (int64_t c = lane; c < k / 32; c += 32) {  // 32-element chunks
      const Block& blk = blocks[c * 32 / kBlockElems];
      const int e0 = int((c * 32) % kBlockElems);
      float wv[32];
#pragma unroll
      for (int j = 0; j < 32; ++j) wv[j] = Decode(blk, e0 + j);
      for (int b = 0; b < batch; ++b) {
        const float* xb = x + b * k + c * 32;
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < 32; ++j) s += wv[j] * xb[j];
        acc[mat][b] += s;
      }
    }
  }
  for (int b = 0; b < batch; ++b) {
    const float g = warp_sum(acc[0][b]), u = w_up ? warp_sum(acc[1][b]) : 0.f;
    if (lane == 0) y[b * n + row] = ep.apply(g, u, row, b, n);
  }
}

template <class Block, int kBlockElems, float (*Decode)(const Block&, int)>
Status launch_generic(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  const Epilogue ep = epilogue_of(p);
  q_generic<Block, kBlockElems, Decode><<<unsigned((p.n + c.warps - 1) / c.warps), unsigned(c.warps * 32), 0, s>>>(
      static_cast<const uint8_t*>(p.w), static_cast<const uint8_t*>(p.w_up), p.x, p.y, p.n, p.k, p.batch, ep);
  return launch_status("q_generic");
}

Status run_generic(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (p.k % 32) return Status::error("q_generic: k must be a multiple of 32");
  switch (p.wtype) {
    case GgmlType::Q4_0: return launch_generic<block_q4_0, QK, decode_q4_0>(p, c, s);
    case GgmlType::Q4_1: return launch_generic<block_q4_1, QK, decode_q4_1>(p, c, s);
    case GgmlType::Q5_0: return launch_generic<block_q5_0, QK, decode_q5_0>(p, c, s);
    case GgmlType::Q5_1: return launch_generic<block_q5_1, QK, decode_q5_1>(p, c, s);
    case GgmlType::Q8_0: return launch_generic<block_q8_0, QK, decode_q8_0>(p, c, s);
    case GgmlType::Q2_K: return launch_generic<block_q2_K, QK_K, decode_q2_K>(p, c, s);
    case GgmlType::Q3_K: return launch_generic<block_q3_K, QK_K, decode_q3_K>(p, c, s);
    case GgmlType::Q4_K: return launch_generic<block_q4_K, QK_K, decode_q4_K>(p, c, s);
    case GgmlType::Q5_K: return launch_generic<block_q5_K, QK_K, decode_q5_K>(p, c, s);
    case GgmlType::Q6_K: return launch_generic<block_q6_K, QK_K, decode_q6_K>(p, c, s);
    case GgmlType::IQ4_NL: return launch_generic<block_iq4_nl, QK, decode_iq4_nl>(p, c, s);
    case GgmlType::IQ4_XS: return launch_generic<block_iq4_xs, QK_K, decode_iq4_xs>(p, c, s);
    default: return Status::error("q_generic: unsupported type");
  }
}

bool quant_types(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
    case GgmlType::IQ4_NL: case GgmlType::IQ4_XS:
      return true;
    default: return false;
  }
}

// ---- repacked Q4_0 / Q8_0 -------------------------------------------------------------------
// Layout (per matrix): quants [n][k * kBits / 8] bytes, then scales [n][k / 32] f16.
// One 16-byte load holds 32 Q4_0 weights (one block: low nibbles = elements 0..15, high =
// 16..31) or 16 Q8_0 weights (half a block).
template <int kBits>
struct Repacked {
  static constexpr int kPerLoad = kBits == 4 ? 32 : 16;  // weights per 16-byte load
  __device__ static void decode(const uint4& raw, float (&v)[kPerLoad]) {
    const uint32_t* u = &raw.x;
    if constexpr (kBits == 4) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t byte = (u[i] >> (8 * j)) & 0xFFu;
          v[4 * i + j] = float(int(byte & 15u) - 8);
          v[16 + 4 * i + j] = float(int(byte >> 4) - 8);
        }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) v[4 * i + j] = float(int8_t((u[i] >> (8 * j)) & 0xFFu));
    }
  }
};

template <int kBits, int kRows, int kUnroll>
__global__ void __launch_bounds__(256) q_repacked(const uint8_t* __restrict__ w, const uint8_t* __restrict__ w_up,
                                                  const float* __restrict__ x, float* __restrict__ y, int64_t n,
                                                  int64_t k, int batch, Epilogue ep) {
  using R = Repacked<kBits>;
  constexpr int kPer = R::kPerLoad;
  const int lane = threadIdx.x % 32;
  const int64_t row0 = (int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * kRows;
  const size_t qrow = size_t(k) * kBits / 8;  // quant bytes per row
  pdl_wait();  // x comes from the kernel before (see kernels/common/pdl.cuh)
  if (row0 >= n) return;
  const int64_t loads = k / kPer;             // 16-byte loads per row
  float acc[2][kRows][kGemvMaxBatch] = {};
  for (int mat = 0; mat < (w_up ? 2 : 1); ++mat) {
    const uint8_t* q = mat ? w_up : w;
    const __half* sc = reinterpret_cast<const __half*>(q + size_t(n) * qrow);
    for (int64_t l0 = 0; l0 < loads; l0 += 32 * kUnroll) {
      uint4 raw[kRows][kUnroll];
      float d[kRows][kUnroll];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t l = l0 + u * 32 + lane;
          const int64_t rr = row0 + r < n ? row0 + r : n - 1;
          const bool in = l < loads;
          raw[r][u] = in ? load_stream(q + size_t(rr) * qrow + size_t(l) * 16) : make_uint4(0, 0, 0, 0);
          d[r][u] = in ? __half2float(sc[rr * (k / 32) + l * kPer / 32]) : 0.f;
        }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t l = l0 + u * 32 + lane;
        if (l >= loads) break;
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          float v[kPer];
          R::decode(raw[r][u], v);
#pragma unroll
          for (int b = 0; b < kGemvMaxBatch; ++b) {
            if (b >= batch) break;
            const float4* xb = reinterpret_cast<const float4*>(x + b * k + l * kPer);
            float s = 0.f;
#pragma unroll
            for (int j = 0; j < kPer / 4; ++j) {
              const float4 f = xb[j];
              s += v[4 * j] * f.x + v[4 * j + 1] * f.y + v[4 * j + 2] * f.z + v[4 * j + 3] * f.w;
            }
            if (mat) acc[1][r][b] += d[r][u] * s;
            else acc[0][r][b] += d[r][u] * s;
          }
        }
      }
    }
  }
  pdl_launch_dependents();  // all weights are in: the next kernel may launch
  store_rows(acc, row0, n, batch, ep, y);
}

template <int kBits, int kRows, int kUnroll>
Status launch_repacked_impl(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  const int64_t rows_per_block = int64_t(c.warps) * kRows;
  const Epilogue ep = epilogue_of(p);
  launch_pdl(q_repacked<kBits, kRows, kUnroll>, unsigned((p.n + rows_per_block - 1) / rows_per_block),
             unsigned(c.warps * 32), 0, s, static_cast<const uint8_t*>(p.w), static_cast<const uint8_t*>(p.w_up), p.x, p.y,
             p.n, p.k, p.batch, ep);
  return launch_status("q_repacked");
}

template <int kBits>
Status launch_repacked(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (c.rows == 1 && c.unroll == 4) return launch_repacked_impl<kBits, 1, 4>(p, c, s);
  if (c.rows == 2 && c.unroll == 2) return launch_repacked_impl<kBits, 2, 2>(p, c, s);
  if (c.rows == 2 && c.unroll == 4) return launch_repacked_impl<kBits, 2, 4>(p, c, s);
  if (c.rows == 4 && c.unroll == 2) return launch_repacked_impl<kBits, 4, 2>(p, c, s);
  return Status::error("q_repacked: no instance for config " + c.str());
}

Status run_repacked(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (p.k % 32) return Status::error("q_repacked: k must be a multiple of 32");
  if (p.wtype == GgmlType::Q4_0) return launch_repacked<4>(p, c, s);
  if (p.wtype == GgmlType::Q8_0) return launch_repacked<8>(p, c, s);
  return Status::error("q_repacked: only q4_0 and q8_0");
}

bool repacked_types(GgmlType t) { return t == GgmlType::Q4_0 || t == GgmlType::Q8_0; }

// ---- repack kernel: GGUF blocks -> quant plane + scale plane ---------------------------------
// kHeader: bytes of f16 fields before the quants (2: d; 4: d, m), copied to the scale plane.
template <int kBits, int kHeader>
__global__ void repack_kernel(const uint8_t* __restrict__ src, int64_t n, int64_t k, uint8_t* __restrict__ dst) {
  const int64_t blocks = n * (k / 32);
  constexpr int qb = kBits == 4 ? 16 : 32;  // quant bytes per block
  constexpr int bb = kHeader + qb;          // GGUF block bytes
  uint8_t* sc = dst + size_t(n) * size_t(k) * kBits / 8;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < blocks; i += int64_t(gridDim.x) * blockDim.x) {
    const uint8_t* b = src + size_t(i) * bb;
    for (int j = 0; j < kHeader; ++j) sc[size_t(i) * kHeader + j] = b[j];
    uint8_t* q = dst + size_t(i) * qb;
    for (int j = 0; j < qb; ++j) q[j] = b[kHeader + j];
  }
}

// The types with a scale per block of 32 whose planes gemv_block32_planes.cu makes.
bool block32_planes(GgmlType t) { return t == GgmlType::Q5_0 || t == GgmlType::Q5_1 || t == GgmlType::IQ4_NL; }

}  // namespace

size_t gemv_repacked_bytes(GgmlType t, int64_t n, int64_t k) {
  if (t == GgmlType::Q6_K) return gemv_q6k_repacked_bytes(n, k);
  if (t == GgmlType::Q2_K || t == GgmlType::Q3_K) return gemv_k23_planes_bytes(t, n, k);
  if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) return gemv_kquant_planes_bytes(t, n, k);
  if (t == GgmlType::IQ4_XS) return gemv_iq4xs_repacked_bytes(n, k);
  if (block32_planes(t)) return gemv_block32_planes_bytes(t, n, k);
  const size_t bits = t == GgmlType::Q8_0 ? 8 : 4;
  const size_t header = t == GgmlType::Q4_1 ? 4 : 2;
  return size_t(n) * size_t(k) * bits / 8 + size_t(n) * size_t(k / 32) * header;
}

Status gemv_repack(GgmlType t, const void* src, int64_t n, int64_t k, void* out, cudaStream_t s) {
  if (t == GgmlType::Q6_K) return gemv_q6k_repack(src, n, k, out, s);
  if (t == GgmlType::Q2_K || t == GgmlType::Q3_K) return gemv_k23_planes_repack(t, src, n, k, out, s);
  if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) return gemv_kquant_planes_repack(t, src, n, k, out, s);
  if (t == GgmlType::IQ4_XS) return gemv_iq4xs_repack(src, n, k, out, s);
  if (block32_planes(t)) return gemv_block32_planes_repack(t, src, n, k, out, s);
  if (t != GgmlType::Q4_0 && t != GgmlType::Q4_1 && t != GgmlType::Q8_0)
    return Status::error("gemv_repack: only q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl and iq4_xs have a repacked layout");
  if (k % 32 || n <= 0) return Status::error("gemv_repack: bad shape");
  const int64_t blocks = n * (k / 32);
  const unsigned grid = unsigned(std::min<int64_t>((blocks + 255) / 256, 4096));
  const auto* in = static_cast<const uint8_t*>(src);
  auto* o = static_cast<uint8_t*>(out);
  if (t == GgmlType::Q4_0) repack_kernel<4, 2><<<grid, 256, 0, s>>>(in, n, k, o);
  else if (t == GgmlType::Q4_1) repack_kernel<4, 4><<<grid, 256, 0, s>>>(in, n, k, o);
  else repack_kernel<8, 2><<<grid, 256, 0, s>>>(in, n, k, o);
  return launch_status("gemv_repack");
}

Status dequant_repacked(GgmlType t, const void* w, int64_t n, int64_t k, int64_t row0, int64_t rows, void* out,
                        cudaStream_t s) {
  if (t == GgmlType::Q6_K) return dequant_q6k_repacked(w, n, k, row0, rows, out, s);
  if (t == GgmlType::Q2_K || t == GgmlType::Q3_K) return dequant_k23_planes(t, w, n, k, row0, rows, out, s);
  if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) return dequant_kquant_planes(t, w, n, k, row0, rows, out, s);
  if (t == GgmlType::IQ4_XS) return dequant_iq4xs_repacked(w, n, k, row0, rows, out, s);
  if (block32_planes(t)) return dequant_block32_planes(t, w, n, k, row0, rows, out, s);
  return Status::error("dequant_repacked: only q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl and iq4_xs");
}

void register_quant_variants(std::vector<GemvVariant>& out) {
  out.push_back({"q_generic", "any GGUF block type, per-element decode, a warp per row", WeightLayout::Gguf,
                 quant_types, run_generic, {GemvConfig{1, 4, 1}, GemvConfig{1, 8, 1}}});
  out.push_back({"q_repacked", "q4_0/q8_0 quant+scale planes, 16-byte streaming loads, rows per warp",
                 WeightLayout::Repacked, repacked_types, run_repacked,
                 {GemvConfig{2, 4, 2}, GemvConfig{1, 4, 4}, GemvConfig{2, 4, 4}, GemvConfig{4, 4, 2},
                  GemvConfig{2, 8, 2}, GemvConfig{1, 8, 4}},
                 XRounding::None, /*writes_y8=*/true});
}

}  // namespace lamina::kernels

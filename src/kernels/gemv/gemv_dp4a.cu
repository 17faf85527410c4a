// q_dp4a: Q4_0 / Q4_1 / Q8_0 (repacked layout) with int8 activations and dp4a.
//   - x is quantised once per thread block into shared memory: int8 blocks of 32 with an f32
//     scale d = amax/127 and the block's integer sum (llama.cpp's q8_1 idea); the grid is
//     persistent (a few blocks per SM looping over rows), so each block converts x once for
//     many rows.
//   - each lane streams 16 bytes of weights per step (one Q4_0 block, half a Q8_0 block),
//     `unroll` steps in flight, `rows` rows per warp sharing the x loads from shared memory.
//   - sum_i (q_i - 8) * x_i = d_w * d_x * (dp4a(q, xq) - 8 * sum(xq))   (Q4_0)
//   - sum_i (d_w q_i + m_w) * x_i = d_x * (d_w * dp4a(q, xq) + m_w * sum(xq))   (Q4_1)
//   - sum_i q_i * x_i = d_w * d_x * dp4a(q, xq)   (Q8_0)
//   - the first step's weights are loaded before the PDL wait (weights never depend on an
//     earlier kernel), so they overlap the kernel before and the making of x: tg128 on the 7B
//     q4_0 preset 360 -> 378 t/s, q8_0 241 -> 247 (H100, 2026-11-22; f16's v5_stream: no change).
//   - with GemvProblem::y8 the epilogue also writes y as int8 blocks (publish_y8): the gate/up
//     pair makes the down projection's x, so that GEMV no longer quantises 11008 values in
//     every block (in-graph 23.0 -> 9.8 µs on 4096 x 11008 q4_0).
// Activations lose precision to 8 bits (as in llama.cpp): the GPU test checks this variant
// against an fp64 reference of the same quantised x.
#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_internal.h"
#include "kernels/gemv/gemv_x8.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

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

template <int kBits, bool kMin, int kRows, int kUnroll, bool kGateUp>
__global__ void __launch_bounds__(256) q_dp4a(const uint8_t* __restrict__ w, const uint8_t* __restrict__ w_up,
                                              XSource xin,
                                              float* __restrict__ y, int64_t n, int64_t k,
                                              int batch, Epilogue ep) {
  extern __shared__ __align__(16) uint8_t smem[];
  using Step = Dp4aStep<kBits, kMin, kRows, kUnroll>;
  const int64_t warps_total = int64_t(gridDim.x) * (blockDim.x / 32);
  const int64_t first = (int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * kRows;
  typename Step::Regs regs;
  // The weights never depend on an earlier kernel: the first step's loads go out before the
  // wait, so they overlap the kernel before (PDL) and the making of x.
  bool loaded = first < n;
  if (loaded) Step::load(w, first, n, 0, k, regs);
  pdl_wait();  // x comes from the kernel before (see kernels/common/pdl.cuh)
  RmsParts rms;  // x8 = blocks of x * w: the RMS scale from the producer's sums of squares
  if (xin.ss) rms.load(xin.ss, k);
  const uint8_t* xs = x8_source(xin, k, batch, smem);
  for (int64_t row0 = first; row0 < n; row0 += warps_total * kRows) {
    if (row0 + warps_total * kRows >= n) pdl_launch_dependents();  // this warp's last rows: the next kernel may launch
    float acc[kGateUp ? 2 : 1][kRows][kGemvMaxBatch] = {};
#pragma unroll
    for (int mat = 0; mat < (kGateUp ? 2 : 1); ++mat)
      for (int64_t l0 = 0; l0 < Step::loads(k); l0 += 32 * kUnroll) {
        if (!loaded) Step::load(mat ? w_up : w, row0, n, l0, k, regs);
        loaded = false;
        Step::dot(regs, xs, k, l0, batch, acc[mat]);
      }
    store_rows(acc, row0, n, batch, ep, y, xin.ss ? rms.scale(k, xin.norm_eps) : 1.f);
  }
}

template <int kBits, bool kMin, int kRows, int kUnroll, bool kGateUp>
Status launch_impl(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  return launch_x8_persistent(q_dp4a<kBits, kMin, kRows, kUnroll, kGateUp>, "q_dp4a", p, c, kRows, s);
}

template <int kBits, bool kMin, int kRows, int kUnroll>
Status launch_gate(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  return p.w_up ? launch_impl<kBits, kMin, kRows, kUnroll, true>(p, c, s)
                : launch_impl<kBits, kMin, kRows, kUnroll, false>(p, c, s);
}

template <int kBits, bool kMin>
Status launch_bits(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (c.rows == 1 && c.unroll == 4) return launch_gate<kBits, kMin, 1, 4>(p, c, s);
  if (c.rows == 2 && c.unroll == 2) return launch_gate<kBits, kMin, 2, 2>(p, c, s);
  if (c.rows == 2 && c.unroll == 4) return launch_gate<kBits, kMin, 2, 4>(p, c, s);
  if (c.rows == 4 && c.unroll == 2) return launch_gate<kBits, kMin, 4, 2>(p, c, s);
  return Status::error("q_dp4a: no instance for config " + c.str());
}

Status run_dp4a(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (p.k % 32) return Status::error("q_dp4a: k must be a multiple of 32");
  if (p.wtype == GgmlType::Q4_0) return launch_bits<4, false>(p, c, s);
  if (p.wtype == GgmlType::Q4_1) return launch_bits<4, true>(p, c, s);
  if (p.wtype == GgmlType::Q8_0) return launch_bits<8, false>(p, c, s);
  return Status::error("q_dp4a: only q4_0, q4_1 and q8_0");
}

bool dp4a_types(GgmlType t) { return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q8_0; }

}  // namespace

void register_dp4a_variants(std::vector<GemvVariant>& out) {
  out.push_back({"q_dp4a", "q4_0/q4_1/q8_0 repacked; x as int8 blocks in shared memory, dp4a, persistent grid",
                 WeightLayout::Repacked, dp4a_types, run_dp4a,
                 {GemvConfig{2, 8, 2}, GemvConfig{1, 8, 4}, GemvConfig{2, 8, 4}, GemvConfig{4, 8, 2},
                  GemvConfig{2, 4, 2}, GemvConfig{1, 4, 4}},
                 XRounding::Int8Blocks, /*writes_y8=*/true, /*fuses_norm=*/true, /*takes_x8_ss=*/true});
}

}  // namespace lamina::kernels

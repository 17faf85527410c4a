// GEMV with f32 / f16 / bf16 weights: the optimisation ladder, every rung kept and registered.
// Measured on the H100 (f16, 4096x4096, batch 1) in docs/benchmarks.md; rungs:
//   v0_naive        one thread per row, x staged through shared memory; uncoalesced W reads
//   v1_splitk_atomic 2-D block (rows x K-slices), coalesced reads, partial sums combined with
//                   shared-memory atomics
//   v2_vec128       + each thread loads 16 bytes (8 halves) of W per step
//   v3_warp_reduce  + K-slices are warp lanes, combined with shuffles instead of atomics
//   v4_tuned        v3's kernel with (rows, slices) chosen per shape by the autotuner
//   v5_stream       warp owns `rows` rows; `unroll` independent 16-byte streaming loads per lane
//                   in flight (L1 bypass, L2 evict-first); batch and epilogues fused; at unroll 16
//                   a warp holds a whole 2048-wide f32 row (a mixture of experts' router,
//                   n_expert x n_embd), loaded before the PDL wait: one load round instead of a
//                   chain of four for a matrix too short to fill the SMs otherwise
#include "kernels/gemv/gemv_common.cuh"
#include "kernels/gemv/gemv_internal.h"

#include <cuda_runtime.h>

namespace lamina::kernels {
namespace {

using namespace gemv_detail;

// ---- v0: one thread per row ---------------------------------------------------------------
template <class T>
__global__ void v0_naive(const T* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
                         int64_t n, int64_t k, int batch) {
  constexpr int kTile = 256;
  __shared__ float xs[kTile];
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int b = 0; b < batch; ++b) {
    float acc = 0.f;
    for (int64_t k0 = 0; k0 < k; k0 += kTile) {
      __syncthreads();
      for (int i = threadIdx.x; i < kTile && k0 + i < k; i += blockDim.x) xs[i] = x[b * k + k0 + i];
      __syncthreads();
      if (row < n)
        for (int i = 0; i < kTile && k0 + i < k; ++i) acc += to_float(w[row * k + k0 + i]) * xs[i];
    }
    if (row < n) y[b * n + row] = acc;
  }
}

// ---- v1/v2: rows x K-slices per block, shared-memory atomics --------------------------------
template <class T, int kVec>
__global__ void v12_splitk_atomic(const T* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
                                  int64_t n, int64_t k, int batch) {
  extern __shared__ float sums[];  // [rows][batch]
  const int slice = threadIdx.x, slices = blockDim.x, r = threadIdx.y;
  const int64_t row = int64_t(blockIdx.x) * blockDim.y + r;
  for (int i = threadIdx.y * slices + slice; i < int(blockDim.y) * batch; i += slices * blockDim.y) sums[i] = 0.f;
  __syncthreads();
  if (row < n) {
    for (int b = 0; b < batch; ++b) {
      float acc = 0.f;
      for (int64_t k0 = int64_t(slice) * kVec; k0 < k; k0 += int64_t(slices) * kVec) {
        if constexpr (kVec == 1) {
          acc += to_float(w[row * k + k0]) * x[b * k + k0];
        } else {  // 16 bytes of W at once
          const uint4 raw = *reinterpret_cast<const uint4*>(w + row * k + k0);
          const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
          for (int j = 0; j < kVec; ++j) acc += to_float(v[j]) * x[b * k + k0 + j];
        }
      }
      atomicAdd(&sums[r * batch + b], acc);
    }
  }
  __syncthreads();
  if (slice == 0 && row < n)
    for (int b = 0; b < batch; ++b) y[b * n + row] = sums[r * batch + b];
}

// ---- v3/v4: K-slices are the lanes of a warp, shuffle reduction -----------------------------
template <class T>
__global__ void v34_warp_reduce(const T* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
                                int64_t n, int64_t k, int batch) {
  constexpr int kVec = 16 / sizeof(T);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int64_t row = int64_t(blockIdx.x) * warps + warp;
  if (row >= n) return;
  for (int b = 0; b < batch; ++b) {
    float acc = 0.f;
    for (int64_t k0 = int64_t(lane) * kVec; k0 < k; k0 += 32 * kVec) {
      const uint4 raw = *reinterpret_cast<const uint4*>(w + row * k + k0);
      const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < kVec; ++j) acc += to_float(v[j]) * x[b * k + k0 + j];
    }
    acc = warp_sum(acc);
    if (lane == 0) y[b * n + row] = acc;
  }
}

// ---- v5: rows per warp, unrolled streaming loads, fused batch and epilogue -------------------
// Each lane keeps rows * unroll 16-byte loads in flight; x is read as float4 through L1 and
// shared by the warp's rows; acc[row][batch] stays in registers. The first step's weights are
// loaded before the PDL wait (they never depend on an earlier kernel; f16 decode: no change).
template <class T, int kRows, int kUnroll>
__device__ __forceinline__ void v5_load(const T* __restrict__ wm, int64_t row0, int64_t k0, int64_t n, int64_t k,
                                        uint4 (&raw)[kRows][kUnroll]) {
  constexpr int kVec = 16 / sizeof(T);
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kk = k0 + (int64_t(u) * 32 + lane) * kVec;
      const int64_t rr = row0 + r < n ? row0 + r : n - 1;  // clamp: keep loads in bounds
      raw[r][u] = kk < k ? load_stream(wm + rr * k + kk) : make_uint4(0, 0, 0, 0);
    }
}

// kMaxB: the batch rows the loops unroll for (1 for decode's problems: code size, as q_dp4a).
template <class T, int kRows, int kUnroll, int kMaxB = kGemvMaxBatch>
__global__ void __launch_bounds__(256) v5_stream(const T* __restrict__ w, const T* __restrict__ w_up,
                                                 const float* __restrict__ x, float* __restrict__ y, int64_t n,
                                                 int64_t k, int batch, Epilogue ep) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kStep = 32 * kVec * kUnroll;  // elements a warp covers per iteration
  const int lane = threadIdx.x % 32;
  const int64_t row0 = (int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * kRows;
  uint4 raw[kRows][kUnroll];
  bool loaded = row0 < n;
  if (loaded) v5_load<T>(w, row0, 0, n, k, raw);
  pdl_wait();  // x comes from the kernel before (see kernels/common/pdl.cuh)
  if (row0 >= n) return;
  const int nmat = w_up ? 2 : 1;
  float acc[2][kRows][kMaxB] = {};

  for (int mat = 0; mat < nmat; ++mat) {
    const T* wm = mat ? w_up : w;
    for (int64_t k0 = 0; k0 < k; k0 += kStep) {
      if (!loaded) v5_load<T>(wm, row0, k0, n, k, raw);
      loaded = false;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t kk = k0 + (int64_t(u) * 32 + lane) * kVec;
        if (kk >= k) break;
#pragma unroll
        for (int b = 0; b < kMaxB; ++b) {
          if (b >= batch) break;
          float xv[kVec];
#pragma unroll
          for (int j = 0; j < kVec; j += 4) {
            const float4 f = *reinterpret_cast<const float4*>(x + b * k + kk + j);
            xv[j] = f.x, xv[j + 1] = f.y, xv[j + 2] = f.z, xv[j + 3] = f.w;
          }
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            const T* v = reinterpret_cast<const T*>(&raw[r][u]);
            float s = 0.f;
#pragma unroll
            for (int j = 0; j < kVec; ++j) s += to_float(v[j]) * xv[j];
            if (mat) acc[1][r][b] += s;
            else acc[0][r][b] += s;
          }
        }
      }
    }
  }
  pdl_launch_dependents();  // all weights are in: the next kernel may launch
  store_rows(acc, row0, n, batch, ep, y);
}

// ---- launchers ------------------------------------------------------------------------------

template <class T> const T* wptr(const void* p) { return static_cast<const T*>(p); }

template <class T>
Status launch_v0(const GemvProblem& p, const GemvConfig&, cudaStream_t s) {
  const int threads = 128;
  v0_naive<T><<<unsigned((p.n + threads - 1) / threads), threads, 0, s>>>(wptr<T>(p.w), p.x, p.y, p.n, p.k, p.batch);
  return launch_status("v0_naive");
}

template <class T, int kVec>
Status launch_v12(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  const int slices = c.warps * 32 / c.rows;  // warps*32 threads as (slices x rows)
  const dim3 block(unsigned(slices), unsigned(c.rows));
  const size_t smem = size_t(c.rows) * size_t(p.batch) * sizeof(float);
  v12_splitk_atomic<T, kVec><<<unsigned((p.n + c.rows - 1) / c.rows), block, smem, s>>>(wptr<T>(p.w), p.x, p.y, p.n,
                                                                                       p.k, p.batch);
  return launch_status(kVec == 1 ? "v1_splitk_atomic" : "v2_vec128");
}

template <class T>
Status launch_v34(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  v34_warp_reduce<T><<<unsigned((p.n + c.warps - 1) / c.warps), unsigned(c.warps * 32), 0, s>>>(
      wptr<T>(p.w), p.x, p.y, p.n, p.k, p.batch);
  return launch_status("v34_warp_reduce");
}

template <class T, int kRows, int kUnroll>
Status launch_v5_impl(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  const int64_t rows_per_block = int64_t(c.warps) * kRows;
  const Epilogue ep = epilogue_of(p);
  const auto kernel = p.batch == 1 ? v5_stream<T, kRows, kUnroll, 1> : v5_stream<T, kRows, kUnroll>;
  launch_pdl(kernel, unsigned((p.n + rows_per_block - 1) / rows_per_block), unsigned(c.warps * 32), 0, s, wptr<T>(p.w),
             wptr<T>(p.w_up), p.x, p.y, p.n, p.k, p.batch, ep);
  return launch_status("v5_stream");
}

template <class T>
Status launch_v5(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  // (rows, unroll) pairs instantiated: the config space below uses only these.
  if (c.rows == 1 && c.unroll == 4) return launch_v5_impl<T, 1, 4>(p, c, s);
  if (c.rows == 2 && c.unroll == 2) return launch_v5_impl<T, 2, 2>(p, c, s);
  if (c.rows == 2 && c.unroll == 4) return launch_v5_impl<T, 2, 4>(p, c, s);
  if (c.rows == 4 && c.unroll == 2) return launch_v5_impl<T, 4, 2>(p, c, s);
  if (c.rows == 1 && c.unroll == 16) return launch_v5_impl<T, 1, 16>(p, c, s);
  return Status::error("v5_stream: no instance for config " + c.str());
}

Status dispatch_type(const GemvProblem& p, const GemvConfig& c, cudaStream_t s,
                     Status (*f32)(const GemvProblem&, const GemvConfig&, cudaStream_t),
                     Status (*f16)(const GemvProblem&, const GemvConfig&, cudaStream_t),
                     Status (*bf16)(const GemvProblem&, const GemvConfig&, cudaStream_t)) {
  switch (p.wtype) {
    case GgmlType::F32: if (f32) return f32(p, c, s); break;
    case GgmlType::F16: if (f16) return f16(p, c, s); break;
    case GgmlType::BF16: if (bf16) return bf16(p, c, s); break;
    default: break;
  }
  return Status::error("gemv: type not supported by this variant");
}

bool f16_only(GgmlType t) { return t == GgmlType::F16; }
bool float_types(GgmlType t) { return t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::F32; }

Status run_v0(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  return dispatch_type(p, c, s, nullptr, launch_v0<__half>, nullptr);
}
Status run_v1(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  return dispatch_type(p, c, s, nullptr, launch_v12<__half, 1>, nullptr);
}
Status run_v2(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (p.k % 8) return Status::error("v2_vec128: k must be a multiple of 8");
  return dispatch_type(p, c, s, nullptr, launch_v12<__half, 8>, nullptr);
}
Status run_v34(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  if (p.k % 8) return Status::error("v3/v4: k must be a multiple of 8");
  return dispatch_type(p, c, s, nullptr, launch_v34<__half>, nullptr);
}
Status run_v5(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) {
  const int64_t vec = p.wtype == GgmlType::F32 ? 4 : 8;
  if (p.k % vec) return Status::error("v5_stream: k must be a multiple of 16 bytes of weights");
  return dispatch_type(p, c, s, launch_v5<float>, launch_v5<__half>, launch_v5<__nv_bfloat16>);
}

}  // namespace

void register_float_variants(std::vector<GemvVariant>& out) {
  // Ladder rungs do plain y = W x (no epilogues); only v5 takes bias/residual/gate-up.
  out.push_back({"v0_naive", "one thread per row, x staged in shared memory", WeightLayout::Gguf, f16_only, run_v0,
                 {GemvConfig{1, 4, 1}}});
  out.push_back({"v1_splitk_atomic", "rows x K-slices per block, shared-memory atomics", WeightLayout::Gguf, f16_only,
                 run_v1, {GemvConfig{2, 2, 1}}});
  out.push_back({"v2_vec128", "v1 + 16-byte loads of W", WeightLayout::Gguf, f16_only, run_v2, {GemvConfig{2, 2, 1}}});
  out.push_back({"v3_warp_reduce", "v2 + warp-shuffle reduction instead of atomics", WeightLayout::Gguf, f16_only,
                 run_v34, {GemvConfig{1, 2, 1}}});
  out.push_back({"v4_tuned", "v3 with warps per block chosen by the autotuner", WeightLayout::Gguf, f16_only, run_v34,
                 {GemvConfig{1, 4, 1}, GemvConfig{1, 2, 1}, GemvConfig{1, 8, 1}, GemvConfig{1, 16, 1}}});
  out.push_back({"v5_stream", "rows per warp, unrolled streaming 16-byte loads, fused batch and epilogues",
                 WeightLayout::Gguf, float_types, run_v5,
                 {GemvConfig{2, 4, 4}, GemvConfig{1, 4, 4}, GemvConfig{2, 4, 2}, GemvConfig{4, 4, 2},
                  GemvConfig{2, 8, 4}, GemvConfig{1, 8, 4}, GemvConfig{2, 2, 4}, GemvConfig{1, 4, 16},
                  GemvConfig{1, 1, 16}},
                 XRounding::None, /*writes_y8=*/true});
}

}  // namespace lamina::kernels

// RMSNorm (one block of 1024 threads per row, or of 128 for many rows; f64 sum of squares as ggml), the residual add with the
// norms around it (add_norm), RoPE (one thread per rotated pair) and the element-wise ops
// (grid-stride loops over float4 where the size allows).
#include "kernels/common/launch_status.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/q8_blocks.cuh"
#include "kernels/ops/add_norm_row.cuh"
#include "kernels/ops/ops.h"
#include "kernels/ops/rope.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <type_traits>

namespace lamina::kernels {
namespace {

constexpr int kNormThreads = 1024;  // a decode step normalises one row: one block, all of it busy

constexpr int kNormPer = 8;  // values per thread kept in registers: rows of up to 8192 columns

// One normalised value: out (unless null: the 16-bit copy alone), and its 16-bit and int8-block
// copies. Every lane of a warp calls it for 32 consecutive columns when out8 is given.
template <class T16>
__device__ __forceinline__ void rmsnorm_store(float v, int64_t row, int64_t i, int64_t cols, float* __restrict__ out,
                                              T16* __restrict__ out16, uint8_t* __restrict__ out8) {
  if (out) out[row * cols + i] = v;
  if (out8) quantize_block32(v, cols, i / 32, out8 + size_t(row) * x8_bytes(cols));
  if constexpr (!std::is_same_v<T16, float>) {
    if (out16) {
      if constexpr (std::is_same_v<T16, __half>) out16[row * cols + i] = __float2half_rn(v);
      else out16[row * cols + i] = __float2bfloat16_rn(v);
    }
  }
}

// x, out: [rows][cols] (out optional with out16);  w: [cols];  out16: [rows][cols] in T16 (optional)
// out8: [rows][x8_bytes(cols)] int8 blocks (cols % 32 == 0), optional
// Rows of up to kNormPer * blockDim.x columns are read once into registers, all loads in flight
// together, and the weights are loaded before the PDL wait (they never depend on the kernel
// before); the decode step waits on this kernel twice per layer. Longer rows take a strided loop.
// The sum of squares adds the same terms in the same order either way.
template <class T16>
__global__ void __launch_bounds__(kNormThreads) rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                               int64_t cols, float eps, float* __restrict__ out,
                                                               T16* __restrict__ out16, uint8_t* __restrict__ out8) {
  pdl_launch_dependents();
  const int64_t row = blockIdx.x;
  const float* xr = x + row * cols;
  const bool held = cols <= int64_t(kNormPer) * blockDim.x;
  float wv[kNormPer], xv[kNormPer];
  if (held)
#pragma unroll
    for (int u = 0; u < kNormPer; ++u) {
      const int64_t i = threadIdx.x + int64_t(u) * blockDim.x;
      wv[u] = i < cols ? w[i] : 0.f;
    }
  pdl_wait();
  double ss = 0;
  if (held) {
#pragma unroll
    for (int u = 0; u < kNormPer; ++u) {
      const int64_t i = threadIdx.x + int64_t(u) * blockDim.x;
      xv[u] = i < cols ? xr[i] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < kNormPer; ++u) ss += double(xv[u]) * xv[u];
  } else {
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) ss += double(xr[i]) * xr[i];
  }
  __shared__ double part[kNormThreads / 32];
  for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(~0u, ss, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    double v = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0;
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
    if (threadIdx.x == 0) part[0] = v;
  }
  __syncthreads();
  const float scale = float(1.0 / sqrt(part[0] / double(cols) + double(eps)));
  // A warp's 32 lanes take 32 consecutive columns: one int8 block of out8 per warp and step.
  if (held) {
#pragma unroll
    for (int u = 0; u < kNormPer; ++u) {
      const int64_t i = threadIdx.x + int64_t(u) * blockDim.x;
      if (i < cols) rmsnorm_store(xv[u] * scale * wv[u], row, i, cols, out, out16, out8);
    }
  } else {
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) rmsnorm_store(xr[i] * scale * w[i], row, i, cols, out, out16, out8);
  }
}

// A prompt's rows: the same sums and values as rmsnorm_kernel, from blocks of 128
// threads (512 rows of 1024-thread blocks took 15 µs, 800 GB/s: two blocks an SM, each a few
// loads a thread between two barriers). rmsnorm_kernel's thread t sums the squares of columns
// t + 1024 u, u < kNormPer, in that order; its warps' butterflies and the butterfly of their 32
// totals follow. Here a warp takes the part of kMine of those 32 warps in turn (lane l standing
// for thread 32 W + l), and the last butterfly is the same: the sum, and so every value, is bit
// for bit rmsnorm_kernel's (BackendOps.RmsNorm* compares a row alone with the same row among 300).
// kPer: the columns 1024 apart a lane holds per virtual warp, ceil(cols / 1024) (u >= kPer adds
// only zeros to rmsnorm_kernel's sums). Up to 4 (rows of up to 4096 columns), a lane keeps its x in
// registers and stores its own columns: each (m, u) is 32 consecutive columns of a warp, one int8
// block. Up to 2 it keeps w too, loaded before the PDL wait; at 4 that took 151 registers, 3 blocks
// an SM (two waves for a 512-row prompt, slower than the staged form), so there w is loaded at the
// stores, a virtual warp's kPer values at a time (94 registers). Longer rows (kPer 8) stage the
// row in shared memory and store from there in a loop of a few columns a turn: unrolled over 64
// values a lane, rmsnorm_store's three outputs (and the int8 block's warp reduction) made ~300 KB
// of code, far past the instruction cache (the kernel ran at 337 GB/s, slower than
// rmsnorm_kernel's 1024-thread blocks).
constexpr int kRowsThreads = 128;
constexpr int64_t kRowsFrom = 256;  // rows from which rmsnorm() takes rmsnorm_rows_kernel (prompts)

template <class T16, int kPer>
__global__ void __launch_bounds__(kRowsThreads) rmsnorm_rows_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                                    int64_t cols, float eps, float* __restrict__ out,
                                                                    T16* __restrict__ out16, uint8_t* __restrict__ out8) {
  constexpr int kWarps = kNormThreads / 32, kMine = kWarps / (kRowsThreads / 32);
  constexpr bool kHeld = kPer <= 4, kHeldW = kPer <= 2;  // x in registers; w too
  static_assert(kPer == 1 || kPer == 2 || kPer == 4 || kPer == kNormPer, "kPer: 1, 2, 4 or kNormPer");
  pdl_launch_dependents();
  const int64_t row = blockIdx.x;
  const float* xr = x + row * cols;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __shared__ double part[kWarps];
  __shared__ float scale_s;
  __shared__ float vals[kHeld ? 1 : kNormPer * kNormThreads];  // (kPer 8) the row, for the stores
  // Element (m, u) of a lane: column 32 (warp kMine + m) + lane + 1024 u. All of a lane's loads
  // are issued before any is used (one trip to memory per block, not one per virtual warp).
  auto col = [&](int m, int u) { return int64_t(32 * (warp * kMine + m) + lane) + int64_t(u) * kNormThreads; };
  float wv[kHeldW ? kMine : 1][kHeldW ? kPer : 1];
  if constexpr (kHeldW)
#pragma unroll
    for (int m = 0; m < kMine; ++m)
#pragma unroll
      for (int u = 0; u < kPer; ++u) wv[m][u] = col(m, u) < cols ? w[col(m, u)] : 0.f;  // w never depends on the kernel before
  pdl_wait();
  float xv[kMine][kPer];
#pragma unroll
  for (int m = 0; m < kMine; ++m)
#pragma unroll
    for (int u = 0; u < kPer; ++u) xv[m][u] = col(m, u) < cols ? xr[col(m, u)] : 0.f;
#pragma unroll
  for (int m = 0; m < kMine; ++m) {
    double ss = 0;
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      ss += double(xv[m][u]) * xv[m][u];
      if constexpr (!kHeld)
        if (col(m, u) < cols) vals[col(m, u)] = xv[m][u];
    }
    for (int o = 16; o; o >>= 1) ss += __shfl_xor_sync(~0u, ss, o);
    if (lane == 0) part[warp * kMine + m] = ss;
  }
  __syncthreads();
  if (warp == 0) {
    double v = part[lane];
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
    if (lane == 0) scale_s = float(1.0 / sqrt(v / double(cols) + double(eps)));
  }
  __syncthreads();
  const float scale = scale_s;
  if constexpr (kHeld) {
#pragma unroll
    for (int m = 0; m < kMine; ++m) {
      float wm[kPer];
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        if constexpr (kHeldW) wm[u] = wv[m][u];
        else wm[u] = col(m, u) < cols ? w[col(m, u)] : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kPer; ++u)  // (cols % 32 == 0 with out8: the condition is the warp's)
        if (col(m, u) < cols) rmsnorm_store(xv[m][u] * scale * wm[u], row, col(m, u), cols, out, out16, out8);
    }
  } else {
    // A warp's 32 lanes take 32 consecutive columns: one int8 block of out8 per warp and step.
#pragma unroll 2
    for (int64_t i = threadIdx.x; i < cols; i += kRowsThreads) rmsnorm_store(vals[i] * scale * w[i], row, i, cols, out, out16, out8);
  }
}

// One thread per (row, head, pair).  x: [rows][n_heads * head_dim];  pos: [rows]
__global__ void rope_kernel(float* __restrict__ x, int64_t rows, const int32_t* __restrict__ pos, RopeArgs a,
                            float theta_scale) {
  pdl_enter();
  const int half = a.n_rot / 2;
  const int64_t total = rows * a.n_heads * half;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(idx % half);
    const int64_t th = idx / half;  // row * n_heads + head
    const int64_t t = th / a.n_heads;
    rope_detail::rotate_pair(x + th * a.head_dim, i, pos[t], theta_scale, a);
  }
}

enum class Ew { Add, Swiglu, Geglu };

template <Ew kOp>
__global__ void binary_kernel(float* __restrict__ x, const float* __restrict__ y, int64_t n) {
  pdl_enter();
  constexpr float kSqrt2OverPi = 0.79788456080286535588f, kCubic = 0.044715f;  // GELU's tanh form (ggml's)
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = x[i];
    if constexpr (kOp == Ew::Add) x[i] = g + y[i];
    else if constexpr (kOp == Ew::Swiglu) x[i] = g / (1.f + expf(-g)) * y[i];
    else x[i] = 0.5f * g * (1.f + tanhf(kSqrt2OverPi * g * (1.f + kCubic * g * g))) * y[i];
  }
}

__global__ void scale_kernel(float* __restrict__ x, float f, int64_t n) {
  pdl_enter();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] *= f;
}

// gate = silu(gate) * up on float4s, and the result rounded to T16 in out16: the down
// projection's GEMM input made in the same pass (n % 4 == 0).
template <class T16>
__global__ void swiglu16_kernel(float4* __restrict__ gate, const float4* __restrict__ up, int64_t n4,
                                T16* __restrict__ out16) {
  pdl_enter();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    float4 g = gate[i];
    const float4 u = up[i];
    g.x = g.x / (1.f + expf(-g.x)) * u.x;
    g.y = g.y / (1.f + expf(-g.y)) * u.y;
    g.z = g.z / (1.f + expf(-g.z)) * u.z;
    g.w = g.w / (1.f + expf(-g.w)) * u.w;
    gate[i] = g;
    if constexpr (std::is_same_v<T16, __half>) {
      reinterpret_cast<__half2*>(out16)[2 * i] = __floats2half2_rn(g.x, g.y);
      reinterpret_cast<__half2*>(out16)[2 * i + 1] = __floats2half2_rn(g.z, g.w);
    } else {
      reinterpret_cast<__nv_bfloat162*>(out16)[2 * i] = __floats2bfloat162_rn(g.x, g.y);
      reinterpret_cast<__nv_bfloat162*>(out16)[2 * i + 1] = __floats2bfloat162_rn(g.z, g.w);
    }
  }
}

__global__ void bias_kernel(float* __restrict__ x, const float* __restrict__ b, int64_t rows, int64_t cols) {
  pdl_enter();
  const int64_t n = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += b[i % cols];
}

// Columns col0 .. col0 + n_cols of src's rows into dst (a stacked Q/K/V GEMM's output split):
// a thread per column of T (float4 where every offset is a multiple of 4), blocks over rows in y
// (no index divisions).
template <class T>
__global__ void copy_columns_kernel(const T* __restrict__ src, int64_t rows, int64_t src_cols, int64_t col0,
                                    int64_t n_cols, T* __restrict__ dst) {
  pdl_enter();
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= n_cols) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) dst[r * n_cols + c] = src[r * src_cols + col0 + c];
}

__global__ void gather_rows_kernel(const float* __restrict__ src, int64_t cols, const int32_t* __restrict__ rows, int64_t n,
                                   float* __restrict__ dst) {
  pdl_enter();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n * cols; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[int64_t(rows[i / cols]) * cols + i % cols];
}

__global__ void add_rows_scaled_kernel(float* __restrict__ dst, const float* __restrict__ src, int64_t cols,
                                       const int32_t* __restrict__ rows, const float* __restrict__ scale, int64_t n) {
  pdl_enter();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n * cols; i += int64_t(gridDim.x) * blockDim.x) {
    float* d = dst + int64_t(rows[i / cols]) * cols + i % cols;
    *d = __fmaf_rn(scale[i / cols], src[i], *d);
  }
}

// add_rows_scaled_kernel for one row, its index and scale as arguments (the same fmaf: the same bits).
__global__ void add_row_scaled_kernel(float* __restrict__ dst, const float* __restrict__ src, int64_t cols, int32_t row,
                                      float scale) {
  pdl_enter();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < cols; i += int64_t(gridDim.x) * blockDim.x) {
    float* d = dst + int64_t(row) * cols + i;
    *d = __fmaf_rn(scale, src[i], *d);
  }
}

// The first kernel of a pass (no PDL wait: nothing before it in the pass; the lookup after it
// launches at once and waits for it). One block, so that the stamp goes out after every thread's
// reads.
__global__ void upload_inputs_kernel(const int32_t* __restrict__ src, int32_t* __restrict__ dst, int64_t n, int64_t half,
                                     const int32_t* __restrict__ sampled, int32_t* __restrict__ seen) {
  // No early pdl_launch_dependents: the decode attention kernels read the position before their
  // PDL wait (attention_head_rope.cuh), which is safe only once this kernel has completed; with
  // the trigger at the start, an attention kernel right behind this one read the previous
  // pass's position (BackendOps.AttentionBlockFused, whose first op reading the inputs is the
  // attention: q rotated by the wrong angle). The next kernel launches when this one completes.
  const int32_t stamp = threadIdx.x == 0 ? src[2 * half] : 0;  // in flight with the entries
  for (int64_t i = threadIdx.x; i < 2 * n; i += blockDim.x) {
    const int64_t at = i < n ? i : half + (i - n);
    const int32_t v = src[at];
    dst[at] = v < 0 && i < n ? sampled[-v - 1] : v;  // token -1 - r: the id sampled for row r
  }
  __syncthreads();  // every entry has been read (each thread stored what it loaded)
  if (threadIdx.x == 0) *reinterpret_cast<volatile int32_t*>(seen) = stamp;
}

template <class T>
__global__ void convert_kernel(const float* __restrict__ x, int64_t n, T* __restrict__ out) {
  pdl_enter();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same_v<T, __half>) out[i] = __float2half_rn(x[i]);
    else out[i] = __float2bfloat16_rn(x[i]);
  }
}

constexpr int kAddNormThreads = 256;

// One block per row. x, y, h: [rows][cols]; yw, w: [cols] (optional); h8: [rows][x8_bytes(cols)]
// (optional, cols % 32 == 0). x[t] += y[t], or += rmsnorm(y[t]) * yw; then h[t] = rmsnorm(x[t]) * w.
// Each thread reads back only the elements it wrote. Sums of squares in f64, as rmsnorm's.
__global__ void __launch_bounds__(kAddNormThreads)
    add_norm_kernel(float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ yw,
                    const float* __restrict__ w, int64_t cols, float eps, float* __restrict__ h, uint8_t* __restrict__ h8) {
  pdl_enter();
  __shared__ double part[kAddNormThreads / 32];
  float* xr = x + blockIdx.x * cols;
  const float* yr = y + blockIdx.x * cols;
  float ys = 1.f;
  if (yw) {
    double ss = 0;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) ss += double(yr[i]) * yr[i];
    ys = float(1.0 / sqrt(block_sum(ss, part) / double(cols) + double(eps)));
  }
  add_norm_row(xr, [&](int64_t i) { return yw ? yr[i] * ys * yw[i] : yr[i]; }, w, cols, eps,
               h ? h + blockIdx.x * cols : nullptr, h8 ? h8 + size_t(blockIdx.x) * x8_bytes(cols) : nullptr, part);
}

unsigned grid_for(int64_t n, int threads) {
  return unsigned(std::clamp<int64_t>((n + threads - 1) / threads, 1, 65535));
}

}  // namespace

Status rmsnorm(const float* x, const float* w, int64_t rows, int64_t cols, float eps, float* out, void* out16,
               GgmlType t16, cudaStream_t s, void* out8) {
  if (!x || !w || (!out && !out16)) return Status::error("rmsnorm: null pointer");
  if (rows < 0 || cols <= 0 || rows > 0x7fffffff) return Status::error("rmsnorm: bad shape");
  if (out16 && t16 != GgmlType::F16 && t16 != GgmlType::BF16) return Status::error("rmsnorm: out16 must be f16 or bf16");
  if (out8 && cols % 32) return Status::error("rmsnorm: out8 needs a multiple of 32 columns");
  if (rows == 0) return Status::success();
  uint8_t* o8 = static_cast<uint8_t*>(out8);
  const bool many = rows >= kRowsFrom && cols <= int64_t(kNormPer) * kNormThreads;
  const int64_t per = (cols + kNormThreads - 1) / kNormThreads;  // rmsnorm_rows_kernel's kPer, rounded up to 1, 2, 4, 8
  auto go = [&](auto* o16) {
    using T16 = std::remove_pointer_t<decltype(o16)>;
    auto kernel = !many ? rmsnorm_kernel<T16>
                  : per <= 1 ? rmsnorm_rows_kernel<T16, 1>
                  : per <= 2 ? rmsnorm_rows_kernel<T16, 2>
                  : per <= 4 ? rmsnorm_rows_kernel<T16, 4>
                             : rmsnorm_rows_kernel<T16, kNormPer>;
    launch_pdl(kernel, unsigned(rows), many ? kRowsThreads : kNormThreads, 0, s, x, w, cols, eps, out, o16, o8);
  };
  if (out16 && t16 == GgmlType::BF16) go(static_cast<__nv_bfloat16*>(out16));
  else if (out16) go(static_cast<__half*>(out16));
  else go(static_cast<float*>(nullptr));
  return launch_status("rmsnorm");
}

Status add(float* x, const float* y, int64_t n, cudaStream_t s) {
  if (!x || !y || n < 0) return Status::error("add: bad arguments");
  if (n) launch_pdl(binary_kernel<Ew::Add>, grid_for(n, 256), 256, 0, s, x, y, n);
  return launch_status("add");
}

Status add_norm(float* x, const float* y, const float* yw, const float* w, int64_t rows, int64_t cols, float eps,
                float* h, cudaStream_t s, void* h8) {
  if (!x || !y || (w && !h)) return Status::error("add_norm: null pointer");
  if (rows < 0 || cols <= 0 || rows > 0x7fffffff) return Status::error("add_norm: bad shape");
  if (h8 && (cols % 32 || !w)) return Status::error("add_norm: h8 needs w and a multiple of 32 columns");
  if (rows) launch_pdl(add_norm_kernel, unsigned(rows), kAddNormThreads, 0, s, x, y, yw, w, cols, eps, h,
                       static_cast<uint8_t*>(h8));
  return launch_status("add_norm");
}

Status geglu(float* gate, const float* up, int64_t n, cudaStream_t s) {
  if (!gate || !up || n < 0) return Status::error("geglu: bad arguments");
  if (n) launch_pdl(binary_kernel<Ew::Geglu>, grid_for(n, 256), 256, 0, s, gate, up, n);
  return launch_status("geglu");
}

Status scale(float* x, float f, int64_t n, cudaStream_t s) {
  if (!x || n < 0) return Status::error("scale: bad arguments");
  if (n) launch_pdl(scale_kernel, grid_for(n, 256), 256, 0, s, x, f, n);
  return launch_status("scale");
}

Status swiglu(float* gate, const float* up, int64_t n, cudaStream_t s, void* out16, GgmlType t16) {
  if (!gate || !up || n < 0) return Status::error("swiglu: bad arguments");
  if (out16 && (n % 4 || (t16 != GgmlType::F16 && t16 != GgmlType::BF16)))
    return Status::error("swiglu: out16 needs n % 4 == 0 and type f16 or bf16");
  if (n && out16) {
    auto* g4 = reinterpret_cast<float4*>(gate);
    const auto* u4 = reinterpret_cast<const float4*>(up);
    if (t16 == GgmlType::F16) launch_pdl(swiglu16_kernel<__half>, grid_for(n / 4, 256), 256, 0, s, g4, u4, n / 4, static_cast<__half*>(out16));
    else launch_pdl(swiglu16_kernel<__nv_bfloat16>, grid_for(n / 4, 256), 256, 0, s, g4, u4, n / 4, static_cast<__nv_bfloat16*>(out16));
  } else if (n) {
    launch_pdl(binary_kernel<Ew::Swiglu>, grid_for(n, 256), 256, 0, s, gate, up, n);
  }
  return launch_status("swiglu");
}

Status add_bias(float* x, const float* b, int64_t rows, int64_t cols, cudaStream_t s) {
  if (!x || !b || rows < 0 || cols <= 0) return Status::error("add_bias: bad arguments");
  if (rows) launch_pdl(bias_kernel, grid_for(rows * cols, 256), 256, 0, s, x, b, rows, cols);
  return launch_status("add_bias");
}

Status copy_columns(const float* src, int64_t rows, int64_t src_cols, int64_t col0, int64_t n_cols, float* dst,
                    cudaStream_t s) {
  if (!src || !dst || rows < 0 || n_cols <= 0 || col0 < 0 || col0 + n_cols > src_cols)
    return Status::error("copy_columns: bad arguments");
  if (!rows) return Status::success();
  const bool vec = (src_cols | col0 | n_cols) % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  const int64_t w = vec ? 4 : 1, cols = n_cols / w;
  const dim3 grid(unsigned((cols + 255) / 256), unsigned(std::min<int64_t>(rows, 65535)));
  if (vec)
    launch_pdl(copy_columns_kernel<float4>, grid, 256, 0, s, reinterpret_cast<const float4*>(src), rows, src_cols / 4,
               col0 / 4, cols, reinterpret_cast<float4*>(dst));
  else
    launch_pdl(copy_columns_kernel<float>, grid, 256, 0, s, src, rows, src_cols, col0, n_cols, dst);
  return launch_status("copy_columns");
}

Status gather_rows(const float* src, int64_t cols, const int32_t* rows, int64_t n, float* dst, cudaStream_t s) {
  if (!src || !rows || !dst || cols <= 0 || n < 0) return Status::error("gather_rows: bad arguments");
  if (n) launch_pdl(gather_rows_kernel, grid_for(n * cols, 256), 256, 0, s, src, cols, rows, n, dst);
  return launch_status("gather_rows");
}

Status add_rows_scaled(float* dst, const float* src, int64_t cols, const int32_t* rows, const float* scale, int64_t n,
                       cudaStream_t s) {
  if (!dst || !src || !rows || !scale || cols <= 0 || n < 0) return Status::error("add_rows_scaled: bad arguments");
  if (n) launch_pdl(add_rows_scaled_kernel, grid_for(n * cols, 256), 256, 0, s, dst, src, cols, rows, scale, n);
  return launch_status("add_rows_scaled");
}

Status add_row_scaled(float* dst, const float* src, int64_t cols, int32_t row, float scale, cudaStream_t s) {
  if (!dst || !src || cols <= 0 || row < 0) return Status::error("add_row_scaled: bad arguments");
  launch_pdl(add_row_scaled_kernel, grid_for(cols, 256), 256, 0, s, dst, src, cols, row, scale);
  return launch_status("add_row_scaled");
}

Status upload_inputs(const int32_t* src, int32_t* dst, int64_t n, int64_t half, const int32_t* sampled, int32_t* seen,
                     cudaStream_t s) {
  if (!src || !dst || !sampled || !seen || n < 0 || half < n) return Status::error("upload_inputs: bad arguments");
  upload_inputs_kernel<<<1, 1024, 0, s>>>(src, dst, n, half, sampled, seen);
  return launch_status("upload_inputs");
}

Status convert_f32(const float* x, int64_t n, GgmlType to, void* out, cudaStream_t s) {
  if (!x || !out || n < 0) return Status::error("convert_f32: bad arguments");
  if (n == 0) return Status::success();
  if (to == GgmlType::F16) launch_pdl(convert_kernel<__half>, grid_for(n, 256), 256, 0, s, x, n, static_cast<__half*>(out));
  else if (to == GgmlType::BF16) launch_pdl(convert_kernel<__nv_bfloat16>, grid_for(n, 256), 256, 0, s, x, n, static_cast<__nv_bfloat16*>(out));
  else return Status::error("convert_f32: target must be f16 or bf16");
  return launch_status("convert_f32");
}

Status rope(float* x, int64_t rows, const int32_t* pos, const RopeArgs& a, cudaStream_t s) {
  if (!x || !pos) return Status::error("rope: null pointer");
  if (a.n_heads <= 0 || a.head_dim <= 0 || a.n_rot <= 0 || a.n_rot % 2 || a.n_rot > a.head_dim)
    return Status::error("rope: bad head geometry");
  if (rows <= 0) return Status::success();
  const float theta_scale = powf(a.base, -2.0f / float(a.n_rot));
  launch_pdl(rope_kernel, grid_for(rows * a.n_heads * (a.n_rot / 2), 256), 256, 0, s, x, rows, pos, a, theta_scale);
  return launch_status("rope");
}

}  // namespace lamina::kernels

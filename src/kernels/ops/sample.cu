// Sampling on the GPU, one block of 1024 threads over a logits row (model/sampler.cpp's rules);
// sample() draws from one row, sample_rows() makes one draw a block over many rows, each with its
// own parameters (the engine's sampled rows):
//   1. with a repetition penalty, copy the row to scratch and penalise the given (distinct) ids
//      (without one, the steps below read the row in place);
//   2. greedy: block argmax (lowest id among equal maxima) — done; without a penalty straight
//      from the logits, coalesced (a fifth of the copy-first path's time in the decode graph:
//      docs/benchmarks.md), as float4s where the row allows;
//   3. otherwise the top n = min(top_k or V, kMaxCand) tokens in the order (logit desc, id asc):
//      a radix select over order-preserving 32-bit keys (4 passes of 8-bit histograms) finds the
//      n-th key; tokens above it, and the first tied ones in id order, are gathered to shared
//      memory and bitonic-sorted;
//   4. top-p, min-p, temperature and the draw run over the sorted candidates in double, exactly
//      as the CPU sampler does, with r = u * sum.
// top_k = 0 (off) keeps at most kMaxCand candidates on the GPU; what lies beyond the 2048th token
// is left out of top-p's nucleus, so callers draw those on the host (Backend::draws_on_device).
#include "kernels/common/launch_status.h"
#include "kernels/common/pdl.cuh"
#include "kernels/ops/ops.h"

#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <climits>

namespace lamina::kernels {
namespace {

constexpr int kThreads = 1024, kMaxCand = kSampleMaxCandidates;  // candidates: 32 KiB of shared memory

// Keys that order floats as numbers: -0 is 0 (the host's comparisons treat them as equal, so
// zeros of both signs at the top-k cut are ties, kept in id order).
__device__ __forceinline__ uint32_t order_key(float f) {
  uint32_t u = __float_as_uint(f);
  if (u == 0x80000000u) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Block-wide exclusive prefix sum of one int per thread (returns the exclusive sum; *total the sum).
__device__ int block_exclusive_scan(int v, int* sh, int* total) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(~0u, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) sh[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = sh[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(~0u, w, o);
      if (lane >= o) w += y;
    }
    sh[lane] = w;  // inclusive per warp
  }
  __syncthreads();
  const int before = (warp ? sh[warp - 1] : 0) + x - v;
  *total = sh[31];
  __syncthreads();
  return before;
}

// A thread's first maximum of row[0..V) over the indices tid, tid + nthreads, ... (as float4s
// when V is a multiple of 4 and the row 16-byte aligned: 32000 logits are then 8 loads a thread
// of 1024, all in flight together). A thread's indices ascend, so `>` keeps its first maximum;
// values not above -FLT_MAX (NaN among them) never win (bi stays INT_MAX).
__device__ __forceinline__ void thread_argmax(const float* __restrict__ row, int V, int tid, int nthreads, float& bv,
                                              int& bi) {
  if (V % 4 == 0 && reinterpret_cast<uintptr_t>(row) % 16 == 0) {
    const float4* l4 = reinterpret_cast<const float4*>(row);
#pragma unroll 8
    for (int j = tid; j < V / 4; j += nthreads) {
      const float4 l = l4[j];
      if (l.x > bv) bv = l.x, bi = 4 * j;
      if (l.y > bv) bv = l.y, bi = 4 * j + 1;
      if (l.z > bv) bv = l.z, bi = 4 * j + 2;
      if (l.w > bv) bv = l.w, bi = 4 * j + 3;
    }
  } else {
#pragma unroll 8
    for (int i = tid; i < V; i += nthreads) {
      const float l = row[i];
      if (l > bv) bv = l, bi = i;
    }
  }
}

// The block's (value, lowest index) maximum of each thread's (bv, bi), in red_v[0], red_i[0]
// (INT_MAX when no value won). red_v, red_i: shared, one entry per warp (at most 32).
__device__ __forceinline__ void block_argmax(float bv, int bi, float* red_v, int* red_i) {
  const int tid = threadIdx.x, warps = blockDim.x / 32;
  for (int o = 16; o; o >>= 1) {
    const float ov = __shfl_xor_sync(~0u, bv, o);
    const int oi = __shfl_xor_sync(~0u, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
  }
  if (tid % 32 == 0) red_v[tid / 32] = bv, red_i[tid / 32] = bi;
  __syncthreads();
  if (tid < 32) {
    bv = tid < warps ? red_v[tid] : -FLT_MAX, bi = tid < warps ? red_i[tid] : INT_MAX;
    for (int o = 16; o; o >>= 1) {
      const float ov = __shfl_xor_sync(~0u, bv, o);
      const int oi = __shfl_xor_sync(~0u, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
    }
    if (tid == 0) red_v[0] = bv, red_i[0] = bi;
  }
  __syncthreads();
}

// One draw's parameters (SampleArgs' or a SampleRowArgs' own).
struct Draw {
  float temperature;
  int top_k;
  float top_p, min_p, repeat_penalty;
  const int32_t* penalty_ids;
  int n_penalty;
  double u;
};

// The draw over logits[0..V) by the whole block (steps 1-4 above); the id in thread 0 (the greedy
// id in every thread). work: V floats, where a penalised row is copied (else unused: null).
// With best_v / best_i (global memory) the block stops after step 3: it writes the sorted
// candidates there (one, the argmax, for a greedy draw) and returns their count.
__device__ int draw_row(const float* __restrict__ logits, int V, const Draw& a, float* __restrict__ work,
                        float* __restrict__ best_v = nullptr, int32_t* __restrict__ best_i = nullptr) {
  __shared__ int hist[256];
  __shared__ int scan_sh[32];
  __shared__ float red_v[32];
  __shared__ int red_i[32];
  __shared__ float cand_v[kMaxCand];
  __shared__ int cand_i[kMaxCand];
  __shared__ double prob[kMaxCand];
  __shared__ int n_cand;
  const int tid = threadIdx.x;
  const int seg = (V + kThreads - 1) / kThreads, lo = min(V, tid * seg), hi = min(V, lo + seg);

  // Greedy without a penalty: the argmax straight from the logits (coalesced; no copy).
  const bool penalised = a.repeat_penalty != 1.f && a.n_penalty > 0;
  const bool direct = a.temperature <= 0.f && !penalised;
  if (penalised) {  // 1. penalised copy
    for (int i = tid; i < V; i += kThreads) work[i] = logits[i];
    __syncthreads();
    for (int i = tid; i < a.n_penalty; i += kThreads) {
      const int id = a.penalty_ids[i];
      if (id < 0 || id >= V) continue;
      const float l = work[id];
      work[id] = l > 0 ? l / a.repeat_penalty : l * a.repeat_penalty;
    }
    __syncthreads();
  }
  const float* src = penalised ? work : logits;  // (without a penalty the steps below read the row in place)

  // 2. argmax (first index of the maximum)
  float bv = -FLT_MAX;
  int bi = INT_MAX;
  if (direct) {
    thread_argmax(logits, V, tid, kThreads, bv, bi);
  } else {  // (each thread's indices ascend, so `>` keeps its first)
    for (int i = lo; i < hi; ++i)
      if (src[i] > bv) bv = src[i], bi = i;
  }
  block_argmax(bv, bi, red_v, red_i);
  if (a.temperature <= 0.f) {
    const int id = red_i[0] == INT_MAX ? 0 : red_i[0];
    if (!best_v) return id;
    if (tid == 0) best_v[0] = red_v[0], best_i[0] = id;
    return 1;
  }
  const float mx = red_v[0];

  // 3. radix select of the n-th largest key
  const int n = min(V, min(a.top_k > 0 ? a.top_k : V, kMaxCand));
  uint32_t prefix = 0, mask = 0;
  int want = n;  // how many still to take at or below the current prefix
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += kThreads) hist[i] = 0;
    __syncthreads();
    for (int i = lo; i < hi; ++i) {
      const uint32_t k = order_key(src[i]);
      if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255], 1);
    }
    __syncthreads();
    // digit d: the highest with count(digits > d) < want <= count(digits >= d)
    int above = 0, d = 255;
    for (; d > 0; --d) {
      if (above + hist[d] >= want) break;
      above += hist[d];
    }
    want -= above;
    prefix |= uint32_t(d) << shift;
    mask |= 255u << shift;
    __syncthreads();
  }
  const uint32_t tau = prefix;  // the n-th key; `want` tied tokens at tau are kept (lowest ids)

  // gather: keys above tau in any order, then ties in id order
  if (tid == 0) n_cand = 0;
  __syncthreads();
  int ties = 0;
  for (int i = lo; i < hi; ++i) {
    const uint32_t k = order_key(src[i]);
    if (k > tau) {
      const int slot = atomicAdd(&n_cand, 1);
      cand_v[slot] = src[i], cand_i[slot] = i;
    } else if (k == tau) {
      ++ties;
    }
  }
  int total = 0;
  int rank = block_exclusive_scan(ties, scan_sh, &total);
  const int n_above = n_cand;  // every thread passed the scan's barriers after the atomics
  for (int i = lo; i < hi && rank < want; ++i)
    if (order_key(src[i]) == tau) {
      cand_v[n_above + rank] = src[i], cand_i[n_above + rank] = i;
      ++rank;
    }
  __syncthreads();

  // bitonic sort of the n candidates (padded to a power of two) by (logit desc, id asc)
  int p2 = 1;
  while (p2 < n) p2 <<= 1;
  for (int i = n + tid; i < p2; i += kThreads) cand_v[i] = -FLT_MAX, cand_i[i] = INT_MAX;
  __syncthreads();
  for (int size = 2; size <= p2; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = tid; i < p2; i += kThreads) {
        const int j = i ^ stride;
        if (j <= i) continue;
        const bool up = (i & size) == 0;  // this pair sorts "first before second" when up
        const bool first_before = cand_v[i] > cand_v[j] || (cand_v[i] == cand_v[j] && cand_i[i] < cand_i[j]);
        if (first_before != up) {
          const float tv = cand_v[i];
          cand_v[i] = cand_v[j], cand_v[j] = tv;
          const int ti = cand_i[i];
          cand_i[i] = cand_i[j], cand_i[j] = ti;
        }
      }
      __syncthreads();
    }

  if (best_v) {
    for (int i = tid; i < n; i += kThreads) best_v[i] = cand_v[i], best_i[i] = cand_i[i];
    return n;
  }

  // 4. top-p, min-p, temperature, draw (model/sampler.cpp, in double)
  for (int i = tid; i < n; i += kThreads) prob[i] = exp(double(cand_v[i]) - double(mx));
  __syncthreads();
  if (tid == 0) {
    int m = n;
    double sum = 0;
    for (int i = 0; i < m; ++i) sum += prob[i];
    if (a.top_p < 1.f) {
      double cum = 0;
      for (int i = 0; i < m; ++i) {
        cum += prob[i] / sum;
        if (cum >= a.top_p) {
          m = i + 1;
          break;
        }
      }
    }
    if (a.min_p > 0.f) {
      int keep = 1;
      while (keep < m && prob[keep] >= a.min_p * prob[0]) ++keep;
      m = keep;
    }
    sum = 0;
    for (int i = 0; i < m; ++i) sum += prob[i] = exp((double(cand_v[i]) - double(mx)) / a.temperature);
    double r = double(a.u) * sum;
    int pick = cand_i[m - 1];
    for (int i = 0; i < m; ++i) {
      r -= prob[i];
      if (r <= 0) {
        pick = cand_i[i];
        break;
      }
    }
    return pick;
  }
  return -1;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* __restrict__ logits, int V, SampleArgs a,
                                                          float* __restrict__ work, int32_t* __restrict__ out) {
  pdl_enter();
  const Draw d{a.temperature, a.top_k, a.top_p, a.min_p, a.repeat_penalty, a.penalty_ids, a.n_penalty, a.u};
  const int id = draw_row(logits, V, d, work);
  if (threadIdx.x == 0) {
    out[a.parity ? *a.parity & 1 : 0] = id;
    if (a.also) *a.also = id;
  }
}

// grid: draws; block i makes draw i over its row with its own parameters (the engine's sampled
// rows, each request with its own). A penalised draw copies its row to its own scratch row.
__global__ void __launch_bounds__(kThreads) sample_rows_kernel(const float* __restrict__ logits, int V,
                                                               const SampleRowArgs* __restrict__ args,
                                                               const int32_t* __restrict__ penalty_ids,
                                                               float* __restrict__ scratch, int32_t* __restrict__ out) {
  pdl_enter();
  const SampleRowArgs r = args[blockIdx.x];
  const Draw d{r.temperature, r.top_k, r.top_p, r.min_p, r.repeat_penalty, penalty_ids + r.penalty_first, r.n_penalty, r.u};
  float* work = r.work >= 0 ? scratch + r.work * int64_t(V) : nullptr;
  const int id = draw_row(logits + r.row * int64_t(V), V, d, work);  // (the host gives every penalised draw a work row)
  if (threadIdx.x == 0) out[blockIdx.x] = id;
}

// grid: draws; block i writes draw i's best candidates (steps 1-3) to best_v / best_i [i][kMaxCand]
// and their count to count[i] (the ranks of a split vocabulary merge them on the host).
__global__ void __launch_bounds__(kThreads) top_candidates_kernel(const float* __restrict__ logits, int V,
                                                                  const SampleRowArgs* __restrict__ args,
                                                                  const int32_t* __restrict__ penalty_ids,
                                                                  float* __restrict__ scratch, float* __restrict__ best_v,
                                                                  int32_t* __restrict__ best_i, int32_t* __restrict__ count) {
  pdl_enter();
  const SampleRowArgs r = args[blockIdx.x];
  const Draw d{r.temperature, r.top_k, r.top_p, r.min_p, r.repeat_penalty, penalty_ids + r.penalty_first, r.n_penalty, r.u};
  float* work = r.work >= 0 ? scratch + r.work * int64_t(V) : nullptr;
  const size_t at = size_t(blockIdx.x) * kMaxCand;
  const int n = draw_row(logits + r.row * int64_t(V), V, d, work, best_v + at, best_i + at);
  if (threadIdx.x == 0) count[blockIdx.x] = n;
}

}  // namespace

namespace {

// grid: rows, kArgmaxThreads threads: block argmax of row blockIdx.x (lowest id among equal
// maxima), the row read as the greedy sampler reads it (thread_argmax: float4s where the row
// allows). With 256 threads of scalar loads a 32000-logit row took ~30 us, a tenth of an 8B
// model's decode step; the engine runs this after every step (docs/benchmarks.md).
constexpr int kArgmaxThreads = 1024;

__global__ void __launch_bounds__(kArgmaxThreads) argmax_rows_kernel(const float* __restrict__ logits, int64_t cols,
                                                                     int32_t* __restrict__ out, float* __restrict__ max) {
  pdl_enter();
  __shared__ float red_v[32];
  __shared__ int red_i[32];
  float bv = -FLT_MAX;
  int bi = INT_MAX;
  thread_argmax(logits + int64_t(blockIdx.x) * cols, int(cols), threadIdx.x, blockDim.x, bv, bi);
  block_argmax(bv, bi, red_v, red_i);
  if (threadIdx.x == 0) {
    out[blockIdx.x] = red_i[0] == INT_MAX ? 0 : red_i[0];
    if (max) max[blockIdx.x] = red_v[0];
  }
}

}  // namespace

Status argmax_rows(const float* logits, int64_t rows, int64_t cols, int32_t* out, cudaStream_t s, float* max) {
  if (!logits || !out || rows < 0 || cols <= 0 || cols > INT_MAX || rows > INT_MAX) return Status::error("argmax_rows: bad arguments");
  if (rows) launch_pdl(argmax_rows_kernel, dim3(unsigned(rows)), kArgmaxThreads, 0, s, logits, cols, out, max);
  return launch_status("argmax_rows");
}

size_t sample_scratch_floats(int n_vocab) { return size_t(n_vocab); }

Status top_candidates(const float* logits, int n_vocab, const SampleRowArgs* args, int draws, const int32_t* penalty_ids,
                      float* scratch, float* best_v, int32_t* best_i, int32_t* count, cudaStream_t s) {
  if (!logits || !args || !best_v || !best_i || !count || n_vocab <= 0 || draws < 0) return Status::error("top_candidates: bad arguments");
  if (draws)
    launch_pdl(top_candidates_kernel, dim3(unsigned(draws)), kThreads, 0, s, logits, n_vocab, args, penalty_ids, scratch, best_v,
               best_i, count);
  return launch_status("top_candidates");
}

Status sample_rows(const float* logits, int n_vocab, const SampleRowArgs* args, int draws, const int32_t* penalty_ids,
                   float* scratch, int32_t* out, cudaStream_t s) {
  if (!logits || !args || !out || n_vocab <= 0 || draws < 0) return Status::error("sample_rows: bad arguments");
  if (draws) launch_pdl(sample_rows_kernel, dim3(unsigned(draws)), kThreads, 0, s, logits, n_vocab, args, penalty_ids, scratch, out);
  return launch_status("sample_rows");
}

Status sample(const float* logits, int n_vocab, const SampleArgs& a, float* scratch, int32_t* out, cudaStream_t s) {
  // (scratch is not touched by greedy sampling without a penalty: it may be null there)
  const bool direct = a.temperature <= 0.f && a.repeat_penalty == 1.f;
  if (!logits || (!scratch && !direct) || !out) return Status::error("sample: null pointer");
  if (n_vocab <= 0) return Status::error("sample: empty vocabulary");
  if (a.n_penalty < 0 || (a.n_penalty > 0 && !a.penalty_ids)) return Status::error("sample: bad penalty ids");
  launch_pdl(sample_kernel, 1, kThreads, 0, s, logits, n_vocab, a, scratch, out);
  return launch_status("sample");
}

}  // namespace lamina::kernels

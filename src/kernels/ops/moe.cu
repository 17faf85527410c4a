// A mixture of experts' routing and the weighted sum of its experts' outputs, on the device, so
// that a decode step's experts need no host round trip (the expert matmuls read the ids:
// kernels/gemv/gemv_experts.cu) and the step can be recorded as a graph.
#include "kernels/common/launch_status.h"
#include "kernels/common/pdl.cuh"
#include "kernels/ops/ops.h"

#include <cuda_runtime.h>

#include <cfloat>

namespace lamina::kernels {
namespace {

constexpr int kRoutePer = kMoeRouteMaxExperts / 32;  // logits a lane

// (value, index) order of the top-k: the larger value first, the lower index among equal ones.
__device__ __forceinline__ bool before(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

// One warp per row of logits [rows][n_expert]; out [rows][2k]: the ids (int32 bits), ascending,
// then their weights. Expert e = lane + 32 i sits in register slot i of its lane.
__global__ void moe_route_kernel(const float* __restrict__ logits, int64_t rows, int n_expert, int k, bool renorm,
                                 float* __restrict__ out) {
  pdl_enter();
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const float* l = logits + row * n_expert;
  float v[kRoutePer];
  float mx = -FLT_MAX;
#pragma unroll
  for (int i = 0; i < kRoutePer; ++i) {
    const int e = lane + 32 * i;
    v[i] = e < n_expert ? l[e] : -FLT_MAX;
    mx = fmaxf(mx, v[i]);
  }
  for (int o = 16; o; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
  // Softmax as the host computes it: float exponentials, their sum in f64, each divided in f64.
  double sum = 0;
#pragma unroll
  for (int i = 0; i < kRoutePer; ++i) {
    v[i] = lane + 32 * i < n_expert ? expf(v[i] - mx) : -3.f;  // (-3: no such expert, below all)
    if (v[i] >= 0.f) sum += v[i];
  }
  for (int o = 16; o; o /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
  // Probabilities; a NaN one (NaN logits) becomes -1: below every probability but above a taken
  // expert (-2), so that the k picks are always k distinct experts of the row.
#pragma unroll
  for (int i = 0; i < kRoutePer; ++i) {
    if (v[i] >= 0.f) v[i] = float(double(v[i]) / sum);
    if (isnan(v[i])) v[i] = -1.f;
  }
  // k rounds of a warp argmax over the experts not yet taken; lane j keeps round j's pick.
  int my_id = n_expert;
  float my_p = 0.f, chosen = 0.f;
  for (int j = 0; j < k; ++j) {
    float best = -4.f;
    int bi = n_expert;
#pragma unroll
    for (int i = 0; i < kRoutePer; ++i)
      if (before(v[i], lane + 32 * i, best, bi)) best = v[i], bi = lane + 32 * i;
    for (int o = 16; o; o /= 2) {
      const float ob = __shfl_xor_sync(0xFFFFFFFFu, best, o);
      const int oi = __shfl_xor_sync(0xFFFFFFFFu, bi, o);
      if (before(ob, oi, best, bi)) best = ob, bi = oi;
    }
#pragma unroll
    for (int i = 0; i < kRoutePer; ++i)
      if (lane + 32 * i == bi) v[i] = -2.f;  // taken (a register slot by a run-time index would go to local memory)
    if (lane == j) my_id = bi, my_p = best;
    chosen += best;  // (in order of probability, as the host sums them)
  }
  if (!renorm) chosen = 1.f;
  // Lane j < k writes its pick at its rank among the picks' ids (ids are distinct).
  int rank = 0;
  for (int j = 0; j < k; ++j) rank += __shfl_sync(0xFFFFFFFFu, my_id, j) < my_id;
  if (lane < k) {
    float* o = out + row * 2 * k;
    reinterpret_cast<int32_t*>(o)[rank] = my_id;
    o[k + rank] = my_p / chosen;
  }
}

// y[t][c] += w_tj d[t k + j][c] for j = 0..k-1 in order, each an fmaf (add_rows_scaled's bits, one
// pick at a time); blockIdx.y the row t.
__global__ void add_routed_kernel(float* __restrict__ y, const float* __restrict__ d, int64_t cols,
                                  const float* __restrict__ route, int k) {
  pdl_enter();
  const int64_t t = blockIdx.y;
  const float* w = route + t * 2 * k + k;
  float* yt = y + t * cols;
  const float* dt = d + t * k * cols;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    float v = yt[c];
    for (int j = 0; j < k; ++j) v = __fmaf_rn(w[j], dt[int64_t(j) * cols + c], v);
    yt[c] = v;
  }
}

}  // namespace

Status moe_route(const float* logits, int64_t rows, int n_expert, int k, bool renorm, float* out, cudaStream_t s) {
  if (!logits || !out || rows < 0 || n_expert < 1 || n_expert > kMoeRouteMaxExperts || k < 1 || k > kMoeRouteMaxPicks || k > n_expert)
    return Status::error("moe_route: bad arguments (1 <= k <= 32, k <= n_expert <= 256)");
  constexpr int kWarps = 4;
  if (rows) launch_pdl(moe_route_kernel, unsigned((rows + kWarps - 1) / kWarps), kWarps * 32, 0, s, logits, rows, n_expert, k, renorm, out);
  return launch_status("moe_route");
}

Status add_routed(float* y, const float* d, int64_t rows, int64_t cols, const float* route, int k, cudaStream_t s) {
  if (!y || !d || !route || rows < 1 || rows > 65535 || cols <= 0 || k < 1) return Status::error("add_routed: bad arguments");
  constexpr int kThreads = 256;
  launch_pdl(add_routed_kernel, dim3(unsigned((cols + kThreads - 1) / kThreads), unsigned(rows)), dim3(kThreads), 0, s, y, d, cols,
             route, k);
  return launch_status("add_routed");
}

}  // namespace lamina::kernels

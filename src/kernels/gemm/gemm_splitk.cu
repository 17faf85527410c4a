// Split-K epilogue: C[m][n] = alpha * sum_s P[s][m][n] + beta * C, P the f32 partial sums the
// split-K mainloop left in the workspace. Memory-bound: splits * 4 + |C| bytes per element; the
// partials were written moments before and are mostly still in L2. Launched with PDL: it may be
// scheduled while the GEMM before it finishes (the GEMM lets it once its blocks leave their last
// mainloop) and waits for the GEMM's partials before it reads them.
#include "kernels/common/pdl.cuh"
#include "kernels/gemm/tc_gemm.cuh"

namespace lamina::kernels {
namespace {

// Four consecutive elements of one row per thread when n % 4 == 0 (float4 reads), else one.
template <int kVec>
__global__ void splitk_reduce_kernel(const float* __restrict__ partials, int splits, int64_t m, int64_t n,
                                     tc_gemm::Out out) {
  pdl_enter();
  const int64_t count = m * n / kVec, plane = m * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    float v[kVec] = {};
    for (int s = 0; s < splits; ++s) {
      if constexpr (kVec == 4) {
        const float4 p = reinterpret_cast<const float4*>(partials + s * plane)[i];
        v[0] += p.x, v[1] += p.y, v[2] += p.z, v[3] += p.w;
      } else {
        v[0] += partials[s * plane + i];
      }
    }
    const int64_t e = i * kVec, row = e / n, col = e % n;
    const tc_gemm::OutColumn c = tc_gemm::out_column(out, col);  // (kVec columns from a multiple of 4: one part)
#pragma unroll
    for (int j = 0; j < kVec; ++j) tc_gemm::out_store(out, tc_gemm::next_column(out, c, col, j), row, v[j]);
  }
}

}  // namespace

Status splitk_reduce(const GemmProblem& p, int splits, cudaStream_t s) {
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const bool vec = p.n % 4 == 0;
  const int64_t items = p.m * p.n / (vec ? 4 : 1), threads = 256;
  const unsigned blocks = unsigned(std::min<int64_t>((items + threads - 1) / threads, int64_t(sms) * 8));
  const auto* partials = static_cast<const float*>(p.workspace);
  if (vec) launch_pdl(splitk_reduce_kernel<4>, blocks, threads, 0, s, partials, splits, p.m, p.n, tc_gemm::make_out(p));
  else launch_pdl(splitk_reduce_kernel<1>, blocks, threads, 0, s, partials, splits, p.m, p.n, tc_gemm::make_out(p));
  return launch_status("splitk_reduce");
}

}  // namespace lamina::kernels

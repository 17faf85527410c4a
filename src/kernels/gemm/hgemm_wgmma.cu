// h2_wgmma: the Hopper f16/bf16 GEMM (sm_90a) — the wgmma_gemm.cuh mainloop with the weights
// W[n][k] brought in by TMA like A:
//   - TMA moves 128 x 64 tiles of A and BN x 64 tiles of W into shared memory with 128-byte
//     swizzle (out-of-range elements arrive as zeros: any M, N; K a multiple of 8)
//   - one producer thread issues both copies; the rest of its warpgroup exits and gives its
//     registers to the consumers (setmaxnreg 40 / 232)
//   - split-K configs for skinny shapes (few output tiles for 132 SMs)
//   - gated problems (f16): gate and up halves in each W stage, act(gate) * up in the epilogue
//     (one GEMM in place of two, the GLU kernel and its 16-bit conversion; bn then counts both
//     halves: a config's tile writes bn / 2 columns of C)
// Config: bn (128 or 256), stages (as many as the device's shared memory holds), splits.
// Figures: docs/benchmarks.md (lamina kbench gemm). Its instances: hgemm_wgmma.cuh.
#include "kernels/gemm/hgemm_wgmma.cuh"

namespace lamina::kernels {
namespace wgmma_gemm {

bool hopper() {
  static const bool yes = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    return major == 9 && minor == 0;
  }();
  return yes;
}

}  // namespace wgmma_gemm

namespace h2_wgmma {
LAMINA_H2_WGMMA_EXTERN(__half)
LAMINA_H2_WGMMA_EXTERN(__nv_bfloat16)
LAMINA_H2_WGMMA_GATED_EXTERN
}  // namespace h2_wgmma

namespace {

using h2_wgmma::launch;

template <class T>
Status run_type(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  if constexpr (std::is_same_v<T, __half>)
    if (p.b_up) {
      if (c.bn == 128 && c.stages == 6 && c.splits == 1) return launch<T, 128, 6, true>(p, c, s);
      if (c.bn == 256 && c.stages == 4 && c.splits == 1) return launch<T, 256, 4, true>(p, c, s);
      return Status::error("h2_wgmma: no gated instance for config " + c.str());
    }
  if (p.b_up) return Status::error("h2_wgmma: gated problems in f16 only");
  if (c.bn == 128 && c.stages == 6) return launch<T, 128, 6>(p, c, s);
  if (c.bn == 256 && c.stages == 4) return launch<T, 256, 4>(p, c, s);
  return Status::error("h2_wgmma: no instance for config " + c.str());
}

Status run_h2(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  return p.a_type == GgmlType::F16 ? run_type<__half>(p, c, s) : run_type<__nv_bfloat16>(p, c, s);
}

bool h2_supports(const GemmProblem& p) {
  const bool half = p.a_type == GgmlType::F16 || p.a_type == GgmlType::BF16;
  return wgmma_gemm::hopper() && half && p.b_type == p.a_type && !p.a_col_major && p.b_col_major &&
         (!p.b_up || p.a_type == GgmlType::F16);
}

bool h2_gated_config(const GemmConfig& c) { return c.splits == 1; }

}  // namespace

void register_wgmma_variants(std::vector<GemmVariant>& out) {
  GemmConfig split2{128, 128, 64, 6}, split4{128, 128, 64, 6};
  split2.splits = 2, split4.splits = 4;
  out.push_back({"h2_wgmma", "Hopper: TMA + wgmma, warp-specialised producer/consumers, mbarriers, persistent tiles, split-K",
                 h2_supports, run_h2, {GemmConfig{128, 256, 64, 4}, GemmConfig{128, 128, 64, 6}, split2, split4}, false});
  out.back().column_parts = true;
  out.back().gated_config = h2_gated_config;
}

}  // namespace lamina::kernels

// h1_mma: f16 / bf16 GEMM on tensor cores with the multi-stage cp.async + ldmatrix + mma.sync
// mainloop of tc_gemm.cuh (sm_80+). A [m][k] row-major, W [n][k] (column-major B), fp32
// accumulation, C in f32 / f16 / bf16. Config: block tile (bm x bn), 4 stages.
// Figures: docs/benchmarks.md (lamina kbench gemm).
#include "kernels/gemm/tc_gemm.cuh"

namespace lamina::kernels {
namespace {

using namespace tc_gemm;

template <class T, int kBm, int kBn>
Status run_tile(const GemmProblem& p, cudaStream_t s) {
  return launch<T, kBm, kBn, 4, PlainB<T>>(p, {static_cast<const T*>(p.b), p.ldb}, "h1_mma", s);
}

template <class T>
Status run_type(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  if (c.bm == 128 && c.bn == 128) return run_tile<T, 128, 128>(p, s);
  if (c.bm == 128 && c.bn == 64) return run_tile<T, 128, 64>(p, s);
  if (c.bm == 64 && c.bn == 128) return run_tile<T, 64, 128>(p, s);
  if (c.bm == 64 && c.bn == 64) return run_tile<T, 64, 64>(p, s);
  return Status::error("h1_mma: no instance for config " + c.str());
}

Status run_h1(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  return p.a_type == GgmlType::F16 ? run_type<__half>(p, c, s) : run_type<__nv_bfloat16>(p, c, s);
}

bool h1_supports(const GemmProblem& p) {
  const bool half = p.a_type == GgmlType::F16 || p.a_type == GgmlType::BF16;
  return half && p.b_type == p.a_type && !p.a_col_major && p.b_col_major;
}

}  // namespace

void register_hgemm_variants(std::vector<GemmVariant>& out) {
  out.push_back({"h1_mma", "f16/bf16 tensor cores: cp.async 4-stage pipeline, swizzled smem, ldmatrix, mma.sync",
                 h1_supports, run_h1,
                 {GemmConfig{128, 128, 32, 4}, GemmConfig{128, 64, 32, 4}, GemmConfig{64, 128, 32, 4},
                  GemmConfig{64, 64, 32, 4}},
                 false});
  out.back().column_parts = true;
}

}  // namespace lamina::kernels

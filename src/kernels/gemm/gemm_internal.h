// Internal to the GEMM family: variant registration, launch status, operand addressing.
#pragma once

#include "kernels/gemm/gemm.h"

#include "kernels/common/launch_status.h"

#include <cuda_runtime.h>

#include <string>

namespace lamina::kernels {

void register_sgemm_variants(std::vector<GemmVariant>& out);        // sgemm.cu
void register_sgemm_async_variants(std::vector<GemmVariant>& out);  // sgemm_async.cu
void register_hgemm_variants(std::vector<GemmVariant>& out);        // hgemm_mma.cu
void register_wgmma_variants(std::vector<GemmVariant>& out);        // hgemm_wgmma.cu
void register_qgemm_variants(std::vector<GemmVariant>& out);        // qgemm_mma.cu
void register_qgemm_wgmma_variants(std::vector<GemmVariant>& out);  // qgemm_wgmma.cu

// Split-K epilogue (gemm_splitk.cu): C = alpha * sum of the [splits][m][n] f32 partials in
// p.workspace + beta * C, written in C's type.
Status splitk_reduce(const GemmProblem& p, int splits, cudaStream_t s);

namespace gemm_detail {

// The SGEMM rungs take f32 A, B and C.
inline bool f32_only(const GemmProblem& p) {
  return p.a_type == GgmlType::F32 && p.b_type == GgmlType::F32 && p.c_type == GgmlType::F32;
}

// An f32 operand seen as X[outer][k]: A is (outer = m), B is (outer = n). k_contig says whether
// k is the contiguous index (row-major A, column-major B).
struct FOperand {
  const float* p;
  int64_t ld;
  bool k_contig;
  int64_t outer, k;
  bool vec_ok;  // 16-byte loads allowed along the contiguous index (aligned base and ld)
};

inline FOperand operand_a(const GemmProblem& g) {
  const auto* p = static_cast<const float*>(g.a);
  return {p, g.lda, !g.a_col_major, g.m, g.k, reinterpret_cast<uintptr_t>(p) % 16 == 0 && g.lda % 4 == 0};
}
inline FOperand operand_b(const GemmProblem& g) {
  const auto* p = static_cast<const float*>(g.b);
  return {p, g.ldb, g.b_col_major, g.n, g.k, reinterpret_cast<uintptr_t>(p) % 16 == 0 && g.ldb % 4 == 0};
}

// The f32 epilogue arguments.
struct FOut {
  float* c;
  int64_t ldc, m, n;
  float alpha, beta;
  bool vec_ok;
};
inline FOut out_c(const GemmProblem& g) {
  auto* c = static_cast<float*>(g.c);
  return {c, g.ldc, g.m, g.n, g.alpha, g.beta, reinterpret_cast<uintptr_t>(c) % 16 == 0 && g.ldc % 4 == 0};
}

}  // namespace gemm_detail
}  // namespace lamina::kernels

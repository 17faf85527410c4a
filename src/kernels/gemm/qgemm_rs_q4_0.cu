// q3_wgmma_rs instances for Q4_0 weights (see qgemm_rs.cuh).
#include "kernels/gemm/qgemm_rs.cuh"

namespace lamina::kernels::qgemm_rs {

Status run_q4_0(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) { return run_kind<kQ4_0>(p, c, s); }

}  // namespace lamina::kernels::qgemm_rs

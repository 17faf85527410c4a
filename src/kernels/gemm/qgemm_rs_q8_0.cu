// q3_wgmma_rs instances for Q8_0 weights (see qgemm_rs.cuh).
#include "kernels/gemm/qgemm_rs.cuh"

namespace lamina::kernels::qgemm_rs {

Status run_q8_0(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) { return run_kind<kQ8_0>(p, c, s); }

}  // namespace lamina::kernels::qgemm_rs

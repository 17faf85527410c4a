// q3_wgmma_rs dispatch for Q8_0 weights (see qgemm_rs.cuh; the instances are compiled apart).
#include "kernels/gemm/qgemm_rs.cuh"

namespace lamina::kernels::qgemm_rs {

LAMINA_QGEMM_RS_EXTERN(kQ8_0)

Status run_q8_0(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) { return run_kind<kQ8_0>(p, c, s); }

}  // namespace lamina::kernels::qgemm_rs

// q2_wgmma instances for Q8_0 weights (see qgemm_wgmma.cuh).
#include "kernels/gemm/qgemm_wgmma.cuh"

namespace lamina::kernels::qgemm_wgmma {

Status run_q8_0(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) { return run_kind<kQ8_0>(p, c, s); }

}  // namespace lamina::kernels::qgemm_wgmma

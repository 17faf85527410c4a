// q2_wgmma instances for Q5_K weights (see qgemm_wgmma.cuh).
#include "kernels/gemm/qgemm_wgmma.cuh"

namespace lamina::kernels::qgemm_wgmma {

Status run_q5_k(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) { return run_kind<kQ5_K>(p, c, s); }

}  // namespace lamina::kernels::qgemm_wgmma

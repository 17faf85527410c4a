// q_dp4a's instances for q2_K weights (gemv_dp4a_kernel.cuh).
#include "kernels/gemv/gemv_dp4a_kernel.cuh"

namespace lamina::kernels::gemv_detail {

Status dp4a_launch_q2_k(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) { return dp4a_launch_type<2, kScaleQ2>(p, c, s); }

}  // namespace lamina::kernels::gemv_detail

// q_dp4a's instances for q3_K weights (gemv_dp4a_kernel.cuh).
#include "kernels/gemv/gemv_dp4a_kernel.cuh"

namespace lamina::kernels::gemv_detail {

Status dp4a_launch_q3_k(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) { return dp4a_launch_type<3, kScaleQ6>(p, c, s); }

}  // namespace lamina::kernels::gemv_detail

// q_dp4a's instances for q5_0 weights (gemv_dp4a_kernel.cuh).
#include "kernels/gemv/gemv_dp4a_kernel.cuh"

namespace lamina::kernels::gemv_detail {

Status dp4a_launch_q5_0(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) { return dp4a_launch_type<5, kScaleD>(p, c, s); }

}  // namespace lamina::kernels::gemv_detail

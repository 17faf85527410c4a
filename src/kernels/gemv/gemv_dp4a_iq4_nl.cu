// q_dp4a's instances for iq4_nl weights (gemv_dp4a_kernel.cuh).
#include "kernels/gemv/gemv_dp4a_kernel.cuh"

namespace lamina::kernels::gemv_detail {

Status dp4a_launch_iq4_nl(const GemvProblem& p, const GemvConfig& c, cudaStream_t s) { return dp4a_launch_type<4, kScaleNL>(p, c, s); }

}  // namespace lamina::kernels::gemv_detail

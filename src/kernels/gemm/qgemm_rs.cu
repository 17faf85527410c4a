// q3_wgmma_rs: the dispatch of each weight type to its instances (see qgemm_rs.cuh; the instances
// are compiled apart, in the units src/CMakeLists.txt writes).
#include "kernels/gemm/qgemm_rs.cuh"

namespace lamina::kernels::qgemm_rs {

LAMINA_QGEMM_RS_EXTERN(kQ8_0)
LAMINA_QGEMM_RS_EXTERN(kQ4_0)
LAMINA_QGEMM_RS_EXTERN(kQ4_K)
LAMINA_QGEMM_RS_EXTERN(kQ5_K)
LAMINA_QGEMM_RS_EXTERN(kQ5_0)
LAMINA_QGEMM_RS_EXTERN(kIQ4_NL)
LAMINA_QGEMM_RS_EXTERN(kQ5_1)
LAMINA_QGEMM_RS_EXTERN(kQ6_K)
LAMINA_QGEMM_RS_EXTERN(kIQ4_XS)
LAMINA_QGEMM_RS_EXTERN(kQ3_K)
LAMINA_QGEMM_RS_EXTERN(kQ2_K)
LAMINA_QGEMM_RS_EXTERN(kQ4_1)

Status run_q8_0(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) { return run_kind<kQ8_0>(p, c, s); }
Status run_q4_0(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) { return run_kind<kQ4_0>(p, c, s); }
Status run_q4_k(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) { return run_kind<kQ4_K>(p, c, s); }
Status run_q5_k(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) { return run_kind<kQ5_K>(p, c, s); }
Status run_q5_0(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) { return run_kind<kQ5_0>(p, c, s); }
Status run_iq4_nl(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) { return run_kind<kIQ4_NL>(p, c, s); }
Status run_q5_1(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) { return run_kind<kQ5_1>(p, c, s); }
Status run_q6_k(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) { return run_kind<kQ6_K>(p, c, s); }
Status run_iq4_xs(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) { return run_kind<kIQ4_XS>(p, c, s); }
Status run_q3_k(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) { return run_kind<kQ3_K>(p, c, s); }
Status run_q2_k(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) { return run_kind<kQ2_K>(p, c, s); }
Status run_q4_1(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) { return run_kind<kQ4_1>(p, c, s); }

}  // namespace lamina::kernels::qgemm_rs

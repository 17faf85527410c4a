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

Status run(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  switch (p.b_type) {
    case GgmlType::Q8_0: return run_kind<kQ8_0>(p, c, s);
    case GgmlType::Q4_0: return run_kind<kQ4_0>(p, c, s);
    case GgmlType::Q4_1: return run_kind<kQ4_1>(p, c, s);
    case GgmlType::Q4_K: return run_kind<kQ4_K>(p, c, s);
    case GgmlType::Q5_K: return run_kind<kQ5_K>(p, c, s);
    case GgmlType::Q5_0: return run_kind<kQ5_0>(p, c, s);
    case GgmlType::Q5_1: return run_kind<kQ5_1>(p, c, s);
    case GgmlType::Q6_K: return run_kind<kQ6_K>(p, c, s);
    case GgmlType::Q3_K: return run_kind<kQ3_K>(p, c, s);
    case GgmlType::Q2_K: return run_kind<kQ2_K>(p, c, s);
    case GgmlType::IQ4_NL: return run_kind<kIQ4_NL>(p, c, s);
    case GgmlType::IQ4_XS: return run_kind<kIQ4_XS>(p, c, s);
    default: return Status::error("q3_wgmma_rs: no instances for weight type " + std::string(type_name(p.b_type)));
  }
}

}  // namespace lamina::kernels::qgemm_rs

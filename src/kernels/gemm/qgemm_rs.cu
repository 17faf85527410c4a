// q3_wgmma_rs: the dispatch of each weight type to its instances (see qgemm_rs.cuh; the instances
// are compiled apart, in the units src/CMakeLists.txt writes), and the grouped launch's tables of
// the experts' tensor maps (gemm_experts_args) through the same dispatch.
#include "kernels/gemm/qgemm_rs.cuh"
#include "kernels/gemm/gemm_experts.h"

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

namespace {

// f(integral_constant<QKind, kind>) for the kind of weight type t; false for a type without one.
template <class F>
bool by_kind(GgmlType t, F&& f) {
  auto go = [&](auto kind) { return f(kind), true; };
  switch (t) {
    case GgmlType::Q8_0: return go(std::integral_constant<QKind, kQ8_0>{});
    case GgmlType::Q4_0: return go(std::integral_constant<QKind, kQ4_0>{});
    case GgmlType::Q4_1: return go(std::integral_constant<QKind, kQ4_1>{});
    case GgmlType::Q4_K: return go(std::integral_constant<QKind, kQ4_K>{});
    case GgmlType::Q5_K: return go(std::integral_constant<QKind, kQ5_K>{});
    case GgmlType::Q5_0: return go(std::integral_constant<QKind, kQ5_0>{});
    case GgmlType::Q5_1: return go(std::integral_constant<QKind, kQ5_1>{});
    case GgmlType::Q6_K: return go(std::integral_constant<QKind, kQ6_K>{});
    case GgmlType::Q3_K: return go(std::integral_constant<QKind, kQ3_K>{});
    case GgmlType::Q2_K: return go(std::integral_constant<QKind, kQ2_K>{});
    case GgmlType::IQ4_NL: return go(std::integral_constant<QKind, kIQ4_NL>{});
    case GgmlType::IQ4_XS: return go(std::integral_constant<QKind, kIQ4_XS>{});
    default: return false;
  }
}

}  // namespace

Status run(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  Status st;
  if (!by_kind(p.b_type, [&](auto kind) { st = run_kind<decltype(kind)::value>(p, c, s); }))
    return Status::error("q3_wgmma_rs: no instances for weight type " + std::string(type_name(p.b_type)));
  return st;
}

// The grouped launch's instances: 64-row tiles (kGemmExpertsTileRows), no split-K; gated, 128
// gate and 128 up rows a block.
Status run_experts(const GemmProblem& p, ExpertsLaunch l, cudaStream_t s) {
  static_assert(kGemmExpertsTileRows == 64, "the grouped instances are compiled for 64-row tiles");
  constexpr int kRows = kGemmExpertsTileRows;
  Status st;
  const bool typed = by_kind(p.b_type, [&](auto kind) {
    constexpr QKind K = decltype(kind)::value;
    if (p.b_up) {
      st = launch<K, kRows, 256, 4, true>(p, GemmConfig{kRows, 128, 64, 4}, s);
      return;
    }
    switch (l) {
      case ExpertsLaunch::Rows128: st = launch<K, kRows, 128, 4>(p, GemmConfig{kRows, 128, 64, 4}, s); break;
      case ExpertsLaunch::Rows256: st = launch<K, kRows, 256, 4>(p, GemmConfig{kRows, 256, 64, 4}, s); break;
      case ExpertsLaunch::TwoBlocks: st = launch<K, kRows, 128, 4, false, 2>(p, GemmConfig{kRows, 128, 64, 4}, s); break;
    }
  });
  return typed ? st : Status::error("gemm_experts: no instances for weight type " + std::string(type_name(p.b_type)));
}

}  // namespace lamina::kernels::qgemm_rs

namespace lamina::kernels {

std::vector<uint8_t> gemm_experts_args(GgmlType t, const std::vector<const void*>& mats, int64_t n, int64_t k) {
  std::vector<uint8_t> bytes;
  qgemm_rs::by_kind(t, [&](auto kind) { bytes = qgemm_rs::experts_args<decltype(kind)::value>(mats, n, k); });
  return bytes;
}

}  // namespace lamina::kernels

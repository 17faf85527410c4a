// h2_wgmma's instances (hgemm_wgmma.cu says what the variant does): the W operand brought in by
// TMA, and launch<T, kBn, kStages>. Each instance is compiled in a translation unit of its own,
// which src/CMakeLists.txt writes (hgemm_wgmma_<type>_<bn>x<stages>.cu in the build tree): the
// four of them in one file took minutes of nvcc. hgemm_wgmma.cu declares them extern.
#pragma once

#include "kernels/gemm/wgmma_gemm.cuh"

namespace lamina::kernels::h2_wgmma {

using wgmma_gemm::kBk;

template <class T, int kBn>
struct TmaB {
  struct Args {
    CUtensorMap map;  // W [n][k], box [kBn][64], 128-byte swizzle
  };
  static constexpr uint32_t kTmaBytes = kBn * kBk * sizeof(T);
  static constexpr int kProducerWgs = 1, kArrivals = 0, kProducerRegs = 40, kSlots = 0, kStepsPerSlot = 1;
  static constexpr bool kAllThreads = false;
  template <int>
  static constexpr size_t kSlotBytes = 0;
  template <int>
  __device__ static void issue_raw(const Args&, int64_t, int, uint8_t*, uint64_t*) {}
  template <int>
  __device__ static void store(const Args& b, int, int64_t n0, int kt, uint8_t*, T* stage, uint64_t* full) {
    tma::load_2d(stage, &b.map, kt * kBk, int(n0), full);
  }
};

template <class T, int kBn, int kStages>
Status launch(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  typename TmaB<T, kBn>::Args b{};
  if (!tma::encode_2d_sw128(&b.map, std::is_same_v<T, __nv_bfloat16>, p.b, uint64_t(p.n), uint64_t(p.k), uint64_t(p.ldb),
                            kBn, kBk))
    return Status::error("h2_wgmma: the driver refused the TMA descriptor of W (alignment or size)");
  return wgmma_gemm::launch<T, kBn, kStages, TmaB<T, kBn>>(p, c, b, "h2_wgmma", s);
}

#define LAMINA_H2_WGMMA_EXTERN(T)                                                                  \
  extern template Status launch<T, 128, 6>(const GemmProblem&, const GemmConfig&, cudaStream_t); \
  extern template Status launch<T, 256, 4>(const GemmProblem&, const GemmConfig&, cudaStream_t);

}  // namespace lamina::kernels::h2_wgmma

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

// Gated (GemmProblem::b_up): a stage's W is kBn/2 rows of the gate matrix over the same kBn/2
// rows of the up matrix, two TMA boxes one under the other (the 128-byte swizzle repeats every 8
// rows, so two boxes of whole 8-row groups stack into the layout of one); the mainloop's epilogue
// (wgmma_gemm.cuh) then holds gate and up of the same C elements in a thread. n0 counts W stage
// rows over 2n: C's column is n0 / 2.
template <class T, int kBn>
struct GatedTmaB : TmaB<T, kBn> {
  struct Args {
    CUtensorMap gate, up;  // W_gate, W_up [n][k], boxes [kBn/2][64], 128-byte swizzle
    bool gelu;
  };
  static constexpr bool kGated = true;
  template <int>
  __device__ static void store(const Args& b, int, int64_t n0, int kt, uint8_t*, T* stage, uint64_t* full) {
    tma::load_2d(stage, &b.gate, kt * kBk, int(n0 / 2), full);
    tma::load_2d(stage + (kBn / 2) * kBk, &b.up, kt * kBk, int(n0 / 2), full);
  }
};

template <class T, int kBn, int kStages, bool kGated = false>
Status launch(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  auto encode = [&](CUtensorMap* map, const void* w, int box_rows) {
    return tma::encode_2d_sw128(map, bf16, w, uint64_t(p.n), uint64_t(p.k), uint64_t(p.ldb), box_rows, kBk);
  };
  const char* refused = "h2_wgmma: the driver refused the TMA descriptor of W (alignment or size)";
  if (kGated != (p.b_up != nullptr) || (kGated && c.splits != 1)) return Status::error("h2_wgmma: gated problem and instance differ");
  if constexpr (kGated) {
    typename GatedTmaB<T, kBn>::Args b{};
    if (!encode(&b.gate, p.b, kBn / 2) || !encode(&b.up, p.b_up, kBn / 2)) return Status::error(refused);
    b.gelu = p.gelu;
    return wgmma_gemm::launch<T, kBn, kStages, GatedTmaB<T, kBn>>(p, c, b, "h2_wgmma", s);
  } else {
    typename TmaB<T, kBn>::Args b{};
    if (!encode(&b.map, p.b, kBn)) return Status::error(refused);
    return wgmma_gemm::launch<T, kBn, kStages, TmaB<T, kBn>>(p, c, b, "h2_wgmma", s);
  }
}

#define LAMINA_H2_WGMMA_EXTERN(T)                                                                  \
  extern template Status launch<T, 128, 6>(const GemmProblem&, const GemmConfig&, cudaStream_t); \
  extern template Status launch<T, 256, 4>(const GemmProblem&, const GemmConfig&, cudaStream_t);
// The gated instances (f16 only: the activations' 16-bit type the gated steps run in).
#define LAMINA_H2_WGMMA_GATED_EXTERN                                                                        \
  extern template Status launch<__half, 128, 6, true>(const GemmProblem&, const GemmConfig&, cudaStream_t); \
  extern template Status launch<__half, 256, 4, true>(const GemmProblem&, const GemmConfig&, cudaStream_t);

}  // namespace lamina::kernels::h2_wgmma

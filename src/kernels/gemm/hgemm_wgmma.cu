// h2_wgmma: the Hopper f16/bf16 GEMM (sm_90a) — the wgmma_gemm.cuh mainloop with the weights
// W[n][k] brought in by TMA like A:
//   - TMA moves 128 x 64 tiles of A and BN x 64 tiles of W into shared memory with 128-byte
//     swizzle (out-of-range elements arrive as zeros: any M, N; K a multiple of 8)
//   - one producer thread issues both copies; the rest of its warpgroup exits and gives its
//     registers to the consumers (setmaxnreg 40 / 232)
//   - split-K configs for skinny shapes (few output tiles for 132 SMs)
// Config: bn (128 or 256), stages (as many as the device's shared memory holds), splits.
// Figures: docs/benchmarks.md (lamina kbench gemm).
#include "kernels/gemm/wgmma_gemm.cuh"

namespace lamina::kernels {
namespace wgmma_gemm {

bool hopper() {
  static const bool yes = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    return major == 9 && minor == 0;
  }();
  return yes;
}

}  // namespace wgmma_gemm

namespace {

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

template <class T>
Status run_type(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  if (c.bn == 128 && c.stages == 6) return launch<T, 128, 6>(p, c, s);
  if (c.bn == 256 && c.stages == 4) return launch<T, 256, 4>(p, c, s);
  return Status::error("h2_wgmma: no instance for config " + c.str());
}

Status run_h2(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  return p.a_type == GgmlType::F16 ? run_type<__half>(p, c, s) : run_type<__nv_bfloat16>(p, c, s);
}

bool h2_supports(const GemmProblem& p) {
  const bool half = p.a_type == GgmlType::F16 || p.a_type == GgmlType::BF16;
  return wgmma_gemm::hopper() && half && p.b_type == p.a_type && !p.a_col_major && p.b_col_major;
}

}  // namespace

void register_wgmma_variants(std::vector<GemmVariant>& out) {
  GemmConfig split2{128, 128, 64, 6}, split4{128, 128, 64, 6};
  split2.splits = 2, split4.splits = 4;
  out.push_back({"h2_wgmma", "Hopper: TMA + wgmma, warp-specialised producer/consumers, mbarriers, persistent tiles, split-K",
                 h2_supports, run_h2, {GemmConfig{128, 256, 64, 4}, GemmConfig{128, 128, 64, 6}, split2, split4}, false});
}

}  // namespace lamina::kernels

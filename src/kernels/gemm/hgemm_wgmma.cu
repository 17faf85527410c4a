// h2_wgmma: the Hopper f16/bf16 GEMM (sm_90a). C[m][n] = alpha * A[m][k] W[n][k]^T + beta * C.
//   - TMA moves 128 x 64 tiles of A and BN x 64 tiles of W into shared memory with 128-byte
//     swizzle (out-of-range elements arrive as zeros: any M, N; K a multiple of 8)
//   - warp specialisation: warpgroup 0 is the producer (one thread issues TMA, registers given
//     back with setmaxnreg), warpgroups 1 and 2 consume: each owns 64 rows of the 128 x BN tile
//     and issues wgmma m64nBNk16 straight from shared memory (descriptors, no ldmatrix)
//   - full/empty mbarriers per stage: the producer waits "empty", arms "full" with the byte
//     count; consumers wait "full" and release a stage once the wgmma reading it has retired
//     (one wgmma batch kept in flight)
//   - persistent grid (one block per SM) walking the tiles in groups of 8 block-rows
//   - epilogue straight from the accumulator registers: alpha, beta, f32/f16/bf16, edges masked
// Config: bn (128 or 256) and stages (as many as the device's shared memory holds).
// Figures: docs/benchmarks.md (lamina kbench gemm).
#include "kernels/common/tma.cuh"
#include "kernels/common/wgmma_ops.cuh"
#include "kernels/gemm/tc_gemm.cuh"

namespace lamina::kernels {
namespace {

constexpr int kBm = 128, kBkW = 64, kWgThreads = 128, kThreadsW = 3 * kWgThreads;

template <class T, int kBn, int kStages>
constexpr size_t smem_bytes() {
  return size_t(kStages) * (kBm + kBn) * kBkW * sizeof(T) + 2 * kStages * sizeof(uint64_t) + 1024;  // + alignment slack
}

template <class T, int kBn, int kStages>
__global__ void __launch_bounds__(kThreadsW, 1) h2_wgmma_kernel(const __grid_constant__ CUtensorMap map_a,
                                                                const __grid_constant__ CUtensorMap map_w,
                                                                tc_gemm::Out out, int64_t m, int64_t n, int64_t k) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  T* sa = reinterpret_cast<T*>(smem);                  // [kStages][kBm][64], swizzled rows of 128 bytes
  T* sw = sa + size_t(kStages) * kBm * kBkW;           // [kStages][kBn][64]
  uint64_t* full = reinterpret_cast<uint64_t*>(sw + size_t(kStages) * kBn * kBkW);
  uint64_t* empty = full + kStages;
  constexpr int kConsumerWarps = 8;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) tma::mbar_init(&full[s], 1), tma::mbar_init(&empty[s], kConsumerWarps);
    tma::mbar_fence_init();
  }
  __syncthreads();
  const int64_t grid_m = (m + kBm - 1) / kBm, grid_n = (n + kBn - 1) / kBn, tiles = grid_m * grid_n;
  const int ktiles = int((k + kBkW - 1) / kBkW);
  auto tile_coords = [&](int64_t t, int64_t& m0, int64_t& n0) {  // groups of 8 block-rows
    const int64_t per_group = 8 * grid_n, first_m = (t / per_group) * 8;
    const int64_t group_m = grid_m - first_m < 8 ? grid_m - first_m : 8;
    m0 = (first_m + (t % per_group) % group_m) * kBm;
    n0 = ((t % per_group) / group_m) * kBn;
  };
  const int wg = int(threadIdx.x) / kWgThreads;
  if (wg == 0) {  // producer
    tma::setmaxnreg_dec40();
    if (threadIdx.x == 0) {
      int s = 0;
      uint32_t phase = 0;
      for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        int64_t m0, n0;
        tile_coords(t, m0, n0);
        for (int kt = 0; kt < ktiles; ++kt) {
          tma::mbar_wait(&empty[s], phase ^ 1);
          tma::mbar_arrive_expect_tx(&full[s], uint32_t((kBm + kBn) * kBkW * sizeof(T)));
          tma::load_2d(sa + size_t(s) * kBm * kBkW, &map_a, kt * kBkW, int(m0), &full[s]);
          tma::load_2d(sw + size_t(s) * kBn * kBkW, &map_w, kt * kBkW, int(n0), &full[s]);
          if (++s == kStages) s = 0, phase ^= 1;
        }
      }
    }
    return;
  }
  tma::setmaxnreg_inc232();
  const int c = wg - 1, warp = (int(threadIdx.x) / 32) % 4, lane = int(threadIdx.x) % 32;
  int s = 0;
  uint32_t phase = 0;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    int64_t m0, n0;
    tile_coords(t, m0, n0);
    float acc[kBn / 2];
#pragma unroll
    for (int i = 0; i < kBn / 2; ++i) acc[i] = 0.f;
    int prev = -1;
    for (int kt = 0; kt < ktiles; ++kt) {
      tma::mbar_wait(&full[s], phase);
      const uint64_t da = tma::desc_k_major_sw128(sa + size_t(s) * kBm * kBkW + size_t(c) * 64 * kBkW);
      const uint64_t dw = tma::desc_k_major_sw128(sw + size_t(s) * kBn * kBkW);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kBkW / 16; ++kk)  // +32 bytes per 16 elements of K: +2 in the descriptor
        wgmma::wgmma_m64k16<kBn, T>(acc, da + 2 * kk, dw + 2 * kk, 1);
      wgmma::commit();
      wgmma::wait<1>();  // the previous k-step's wgmma has retired: release its stage
      if (prev >= 0 && lane == 0) tma::mbar_arrive(&empty[prev]);
      prev = s;
      if (++s == kStages) s = 0, phase ^= 1;
    }
    wgmma::wait<0>();
    if (prev >= 0 && lane == 0) tma::mbar_arrive(&empty[prev]);
    // Accumulator layout (m64nN): register 4j + r of thread (warp, lane) holds row 16 warp +
    // lane/4 + 8 (r/2), column 8 j + 2 (lane%4) + r%2.
    const int64_t row = m0 + 64 * c + 16 * warp + lane / 4;
#pragma unroll
    for (int j = 0; j < kBn / 8; ++j) {
      const int64_t col = n0 + 8 * j + 2 * (lane % 4);
      tc_gemm::out_store(out, row, col, acc[4 * j]);
      tc_gemm::out_store(out, row, col + 1, acc[4 * j + 1]);
      tc_gemm::out_store(out, row + 8, col, acc[4 * j + 2]);
      tc_gemm::out_store(out, row + 8, col + 1, acc[4 * j + 3]);
    }
  }
#else
  __trap();  // built for another architecture; h2_supports() keeps launches away
#endif
}

template <class T, int kBn, int kStages>
Status launch(const GemmProblem& p, cudaStream_t s) {
  const bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  CUtensorMap ma{}, mw{};
  if (!tma::encode_2d_sw128(&ma, bf16, p.a, uint64_t(p.m), uint64_t(p.k), uint64_t(p.lda), kBm, kBkW) ||
      !tma::encode_2d_sw128(&mw, bf16, p.b, uint64_t(p.n), uint64_t(p.k), uint64_t(p.ldb), kBn, kBkW))
    return Status::error("h2_wgmma: the driver refused the TMA descriptors (alignment or size)");
  int dev = 0, sms = 0, smem_optin = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  constexpr size_t smem = smem_bytes<T, kBn, kStages>();
  auto kernel = h2_wgmma_kernel<T, kBn, kStages>;
  if (smem > size_t(smem_optin) ||
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)
    return Status::error("h2_wgmma: " + std::to_string(smem) + " bytes of shared memory not available");
  const int64_t tiles = ((p.m + kBm - 1) / kBm) * ((p.n + kBn - 1) / kBn);
  const unsigned grid = unsigned(std::min<int64_t>(tiles, sms));
  kernel<<<grid, kThreadsW, smem, s>>>(ma, mw, tc_gemm::make_out(p), p.m, p.n, p.k);
  return gemm_launch_status("h2_wgmma");
}

template <class T>
Status run_type(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  if (c.bn == 128 && c.stages == 6) return launch<T, 128, 6>(p, s);
  if (c.bn == 256 && c.stages == 4) return launch<T, 256, 4>(p, s);
  return Status::error("h2_wgmma: no instance for config " + c.str());
}

Status run_h2(const GemmProblem& p, const GemmConfig& c, cudaStream_t s) {
  return p.a_type == GgmlType::F16 ? run_type<__half>(p, c, s) : run_type<__nv_bfloat16>(p, c, s);
}

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

bool h2_supports(const GemmProblem& p) {
  const bool half = p.a_type == GgmlType::F16 || p.a_type == GgmlType::BF16;
  return hopper() && half && p.b_type == p.a_type && !p.a_col_major && p.b_col_major;
}

}  // namespace

void register_wgmma_variants(std::vector<GemmVariant>& out) {
  out.push_back({"h2_wgmma", "Hopper: TMA + wgmma, warp-specialised producer/consumers, mbarriers, persistent tiles",
                 h2_supports, run_h2, {GemmConfig{128, 256, 64, 4}, GemmConfig{128, 128, 64, 6}}, false});
}

}  // namespace lamina::kernels

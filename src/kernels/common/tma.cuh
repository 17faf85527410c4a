// Hopper (sm_90) asynchronous-transaction building blocks: mbarriers, TMA 2-D tile loads, and
// the shared-memory matrix descriptors of wgmma. Host side: encoding a 2-D tensor map through
// the driver entry point (no link against libcuda).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace lamina::kernels::tma {

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// The first 1024-byte-aligned byte of a dynamic shared-memory array (the period of the 128-byte
// swizzle), reached by adding an offset to the array: a pointer made by casting the aligned
// integer back is generic, and every load through it became a generic LD with 64-bit address
// arithmetic instead of an LDS (q3_wgmma_rs's fragment loads, q2_wgmma's dequantising producers).
__device__ __forceinline__ uint8_t* align_1024(uint8_t* smem_raw) {
  return smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);  // (the shared address's low bits)
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
// Blocks until the phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}

// Tile (c0 = inner coordinate, c1 = outer) of a 2-D tensor map into shared memory; completion is
// counted in bytes on `bar`. Out-of-range elements arrive as zeros.
__device__ __forceinline__ void load_2d(void* smem, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_u32(smem)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar))
      : "memory");
}

// An L2 cache-hint policy that marks every line evict-first (createpolicy), for data read once
// (weights streamed by a GEMV, with ld's cache_hint or load_1d's policy).
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory into shared
// memory by the TMA engine, counted on `bar`; `policy` is an L2 cache-hint policy
// (createpolicy).
__device__ __forceinline__ void load_1d(void* smem, const void* src, uint32_t bytes, uint64_t* bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          smem_u32(smem)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
}

// wgmma descriptor of a K-major tile written by TMA with 128-byte swizzle: rows of 128 bytes,
// 8-row groups 1024 bytes apart (stride byte offset), tile base 1024-byte aligned. Advancing K
// by 16 elements inside the 128-byte row adds 32 bytes to the start address.
__device__ __forceinline__ uint64_t desc_k_major_sw128(const void* tile) {
  const uint64_t addr = smem_u32(tile);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// Warpgroup register reallocation: a producer gives registers back, consumers take them.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs)); }
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs)); }

// Orders this thread's generic-proxy shared-memory writes before later async-proxy reads
// (wgmma, TMA store) of the same bytes.
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// Host: a 2-D tensor map over a row-major [rows][cols] matrix of 16-bit elements with row stride
// ld (elements), box [box_rows][box_cols] and 128-byte swizzle. Returns false when the driver
// refuses (alignment, sizes) or the entry point is missing.
bool encode_2d_sw128(CUtensorMap* map, bool bf16, const void* base, uint64_t rows, uint64_t cols, uint64_t ld,
                     uint32_t box_rows, uint32_t box_cols);

// Host: a 2-D tensor map over a byte matrix [rows][cols] with row stride ld bytes (a multiple of
// 16), box [box_rows][box_cols] and the given swizzle (box_cols at most the swizzle span).
bool encode_2d_bytes(CUtensorMap* map, const void* base, uint64_t rows, uint64_t cols, uint64_t ld, uint32_t box_rows,
                     uint32_t box_cols, CUtensorMapSwizzle swizzle);

// Named barrier over a subset of the block's warps (id 1..15; 0 is __syncthreads).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
// Arrives at it without waiting (producer side of a producer / consumer pair).
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace lamina::kernels::tma

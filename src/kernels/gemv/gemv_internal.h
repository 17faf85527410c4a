// Internal to the GEMV family: variant registration and launch-status helpers.
#pragma once

#include "kernels/gemv/gemv.h"

#include "kernels/common/launch_status.h"

#include <cuda_runtime.h>

#include <string>

namespace lamina::kernels {

void register_float_variants(std::vector<GemvVariant>& out);   // gemv_float.cu
void register_quant_variants(std::vector<GemvVariant>& out);   // gemv_quant.cu
void register_dp4a_variants(std::vector<GemvVariant>& out);    // gemv_dp4a.cu
// q_dp4a's launch (gemv_dp4a.cu), for variants that hand it the problems they do not cover.
Status gemv_dp4a_launch(const GemvProblem& p, const GemvConfig& c, cudaStream_t s);
// q_dp4a's decode instances of one matrix (gemv_dp4a_slots.cu), for q_dp4a's dispatch, which has
// checked the problem: batch 1, no w_up, config rows=2, warps=16, unroll=2 or rows=4, warps=8,
// unroll=1 (kRows, kUnroll); (kBits, kScales: gemv_dp4a.cuh's Dp4aScales) (4, 0) for q4_0, (8, 0)
// for q8_0, (4, 2) for q4_K, (5, 2) for q5_K, (6, 3) for q6_K, (4, 4) for iq4_xs, (2, 5) for q2_K,
// (3, 3) for q3_K, (5, 0) for q5_0, (4, 6) for iq4_nl, the ten instantiated (q4_1 and q5_1 run
// q_dp4a's plain instances).
template <int kBits, int kScales, int kRows, int kUnroll>
Status gemv_dp4a_slots_launch(const GemvProblem& p, const GemvConfig& c, cudaStream_t s);
void register_mma_variants(std::vector<GemvVariant>& out);     // gemv_mma.cu
void register_qmma_variants(std::vector<GemvVariant>& out);    // gemv_qmma.cu
void register_q4k_variants(std::vector<GemvVariant>& out);     // gemv_q4k.cu
void register_q6k_variants(std::vector<GemvVariant>& out);     // gemv_q6k.cu
size_t gemv_q6k_repacked_bytes(int64_t n, int64_t k);                                   // gemv_q6k.cu
Status gemv_q6k_repack(const void* src, int64_t n, int64_t k, void* out, cudaStream_t s);  // gemv_q6k.cu
void register_q2k_variants(std::vector<GemvVariant>& out);     // gemv_q2k.cu
void register_q3k_variants(std::vector<GemvVariant>& out);     // gemv_q3k.cu
// Q2_K and Q3_K planes (gemv_k23_planes.cu): bytes, repack, and rows back to f16.
size_t gemv_k23_planes_bytes(GgmlType t, int64_t n, int64_t k);
Status gemv_k23_planes_repack(GgmlType t, const void* src, int64_t n, int64_t k, void* out, cudaStream_t s);
Status dequant_k23_planes(GgmlType t, const void* w, int64_t n, int64_t k, int64_t row0, int64_t rows, void* out,
                          cudaStream_t s);
// Q4_K and Q5_K planes (gemv_kquant_planes.cu): bytes, repack, and rows back to f16.
size_t gemv_kquant_planes_bytes(GgmlType t, int64_t n, int64_t k);
Status gemv_kquant_planes_repack(GgmlType t, const void* src, int64_t n, int64_t k, void* out, cudaStream_t s);
Status dequant_kquant_planes(GgmlType t, const void* w, int64_t n, int64_t k, int64_t row0, int64_t rows, void* out,
                             cudaStream_t s);
Status dequant_q6k_repacked(const void* w, int64_t n, int64_t k, int64_t row0, int64_t rows, void* out, cudaStream_t s);
void register_iq4xs_variants(std::vector<GemvVariant>& out);   // gemv_iq4xs.cu
size_t gemv_iq4xs_repacked_bytes(int64_t n, int64_t k);                                   // gemv_iq4xs.cu
Status gemv_iq4xs_repack(const void* src, int64_t n, int64_t k, void* out, cudaStream_t s);  // gemv_iq4xs.cu
Status dequant_iq4xs_repacked(const void* w, int64_t n, int64_t k, int64_t row0, int64_t rows, void* out, cudaStream_t s);
void register_q51_variants(std::vector<GemvVariant>& out);     // gemv_q51.cu
// Q5_0, Q5_1 and IQ4_NL planes (gemv_block32_planes.cu): bytes, repack, and rows back to f16.
size_t gemv_block32_planes_bytes(GgmlType t, int64_t n, int64_t k);
Status gemv_block32_planes_repack(GgmlType t, const void* src, int64_t n, int64_t k, void* out, cudaStream_t s);
Status dequant_block32_planes(GgmlType t, const void* w, int64_t n, int64_t k, int64_t row0, int64_t rows, void* out,
                              cudaStream_t s);

}  // namespace lamina::kernels

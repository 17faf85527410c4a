// One token's attention over its cached positions for the query heads that share a KV head
// (grouped-query attention), in SIMD registers: each K and V row is loaded and converted once
// for all of them. Before, each query head took a row dot call per key and an axpy call per
// value; prompts spent ~13 % of their time there (docs/benchmarks.md).
#pragma once

#include "backend/cpu/vec_dot.h"

#include <cstddef>
#include <cstdint>

namespace lamina {

// The most query heads one call takes (the accumulators stay in registers); more take several.
constexpr int kAttendMaxQueries = 8;

// For query heads i < nq (nq <= kAttendMaxQueries) of hd values at q + i * q_stride floats, and
// n positions whose K and V head rows (f16 or f32, the KV cache's type) start at k + offs[j] and
// v + offs[j] bytes: out + i * out_stride = softmax_j(scale * q_i . k_j) weighted sum of v_j.
// scores: nq * n floats of scratch. Each score is one fixed-order dot product and each output
// element one fixed-order sum over j, so a query's result does not depend on nq; and the AVX2 and
// AVX-512 kernels keep the same orders, so their results are the same bits.
using AttendFn = void (*)(int hd, int nq, const float* q, size_t q_stride, const uint8_t* k, const uint8_t* v,
                          const size_t* offs, int64_t n, float scale, float* scores, float* out, size_t out_stride);

// The kernel for this KV type (F16 or F32; nullptr for others), tier and head size: the tier's
// SIMD kernel where its vector width divides hd, else a portable one in the same orders (any hd;
// the SIMD kernels' bits where hd is a multiple of 8).
AttendFn attend_for(GgmlType kv_type, CpuIsa isa, int hd);
AttendFn attend_avx2(GgmlType kv_type);    // attention_avx2.cpp (hd a multiple of 8)
AttendFn attend_avx512(GgmlType kv_type);  // attention_avx512.cpp (hd a multiple of 16)

}  // namespace lamina

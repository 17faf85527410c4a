// Byte offsets of the token tiles and weight stripes that gemm_amx.h describes, shared by every
// tile kind: AMX (gemm_amx.cpp), AVX-512 VNNI (gemm_vnni.cpp), AVX2 and AVX-VNNI (gemm_ymm.cpp).
// All are multiples of 64 (asserted below): the tiles load them with aligned vector loads from
// 64-byte aligned buffers.
#pragma once

#include <cstddef>

namespace lamina::tile_layout {

// int8 types, per 32-element block (kAmxBlockBytes): quants at 0, then the scales, then q4_1's
// mins (rows) or d * sum(q) (tokens).
constexpr size_t kScale = 512, kMin = 576;
// q4_K, per super-block: the packed tokens' d and sub-block pair sums; the unpacked rows' scales,
// mins, d and dmin.
constexpr size_t kKTokD = 4096, kKTokPairs = 4160, kKTokBytes = 4416;
constexpr size_t kKRowSc = 4096, kKRowMin = 4608, kKRowD = 4864, kKRowDmin = 4928, kKRowBytes = 4992;
// q6_K: 16 groups of 16 elements, each a B operand of 4 rows x 64 bytes / an A operand of 16
// rows x 16 bytes (q - 32); d; the group scales as int32 [group][row]; the rows' d.
constexpr size_t kK6TokD = 4096, kK6TokBytes = 4096 + 64, kK6RowSc = 4096, kK6RowD = 5120, kK6RowBytes = 5184;

static_assert(kScale % 64 == 0 && kMin % 64 == 0);
static_assert(kKTokD % 64 == 0 && kKTokPairs % 64 == 0 && kKTokBytes % 64 == 0);
static_assert(kKRowSc % 64 == 0 && kKRowMin % 64 == 0 && kKRowD % 64 == 0 && kKRowDmin % 64 == 0 && kKRowBytes % 64 == 0);
static_assert(kK6TokD % 64 == 0 && kK6TokBytes % 64 == 0 && kK6RowSc % 64 == 0 && kK6RowD % 64 == 0 && kK6RowBytes % 64 == 0);

}  // namespace lamina::tile_layout

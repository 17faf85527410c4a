// CPU (de)quantisation of ggml rows. A "row" is n consecutive elements, n a multiple of the
// type's block size (see ggml_type.h). Bit-exact with llama.cpp's scalar reference where
// llama.cpp defines one (dequantisation of every type; Q8_0/Q8_1/Q4_0/Q4_1/Q5_0/Q5_1 quantisers).
// The K-quant quantisers (Q4_K, Q6_K) follow the same search idea as llama.cpp's but are our own.
#pragma once

#include "format/ggml_type.h"

#include <cstdint>

namespace lamina {

// dst[0..n) = value of element i of the row at src.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

// Element i of a row (any supported type), decoded alone.
float dequantize_element(GgmlType t, const void* row, int64_t i);
// The same, as a function for one type (no dispatch per call).
using ElementFn = float (*)(const void* row, int64_t i);
ElementFn element_decoder(GgmlType t);

// Whether quantize_row supports the type (F32, F16, BF16, Q8_0, Q8_1, Q4_0, Q4_1, Q5_0, Q5_1,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS).
bool can_quantize(GgmlType t);
// Encodes n floats as row_bytes(t, n) bytes at dst. Throws lamina::Error for other types.
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

// n Q5_0 blocks at src as n Q8_0 blocks at dst, holding the same values: d * (q - 16) with
// q - 16 in [-16, 15] (backends load Q5_0 matrices so, to multiply them with their Q8_0 kernels).
void q5_0_to_q8_0(const void* src, void* dst, int64_t n_blocks);
// n IQ4_NL blocks as n Q8_0 blocks holding the same values: d * value[nibble], value in int8.
void iq4_nl_to_q8_0(const void* src, void* dst, int64_t n_blocks);

// The types backends may hold as Q8_0 (the same values, multiplied by the Q8_0 kernels: the CPU
// always, CUDA in exact mode and where its GEMM cannot read their own layout), and the conversion
// of n_blocks blocks of one of them.
inline bool held_as_q8_0(GgmlType t) { return t == GgmlType::Q5_0 || t == GgmlType::IQ4_NL; }
void to_q8_0(GgmlType t, const void* src, void* dst, int64_t n_blocks);

}  // namespace lamina

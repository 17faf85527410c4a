// Scalar dequantisation of every supported ggml type (the CPU reference path), built on the
// per-element decoders that the CUDA kernels share (quant_decode.h).
#include "core/error.h"
#include "format/quant.h"
#include "format/quant_decode.h"

#include <cstring>

namespace lamina {
namespace {

template <class Block, float (*Decode)(const Block&, int), int N>
void blocks(const void* src, float* dst, int64_t n) {
  const Block* b = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n / N; ++i)
    for (int e = 0; e < N; ++e) dst[i * N + e] = Decode(b[i], e);
}

template <class Block, float (*Decode)(const Block&, int), int N>
float element(const void* row, int64_t i) {  // element i of a row
  return Decode(static_cast<const Block*>(row)[i / N], int(i % N));
}

}  // namespace

float element_f32(const void* row, int64_t i) { return static_cast<const float*>(row)[i]; }
float element_f16(const void* row, int64_t i) { return f16_to_f32(static_cast<const uint16_t*>(row)[i]); }
float element_bf16(const void* row, int64_t i) { return bf16_to_f32(static_cast<const uint16_t*>(row)[i]); }

ElementFn element_decoder(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return element_f32;
    case GgmlType::F16: return element_f16;
    case GgmlType::BF16: return element_bf16;
    case GgmlType::Q4_0: return element<block_q4_0, decode_q4_0, QK>;
    case GgmlType::Q4_1: return element<block_q4_1, decode_q4_1, QK>;
    case GgmlType::Q5_0: return element<block_q5_0, decode_q5_0, QK>;
    case GgmlType::Q5_1: return element<block_q5_1, decode_q5_1, QK>;
    case GgmlType::Q8_0: return element<block_q8_0, decode_q8_0, QK>;
    case GgmlType::Q8_1: return element<block_q8_1, decode_q8_1, QK>;
    case GgmlType::Q2_K: return element<block_q2_K, decode_q2_K, QK_K>;
    case GgmlType::Q3_K: return element<block_q3_K, decode_q3_K, QK_K>;
    case GgmlType::Q4_K: return element<block_q4_K, decode_q4_K, QK_K>;
    case GgmlType::Q5_K: return element<block_q5_K, decode_q5_K, QK_K>;
    case GgmlType::Q6_K: return element<block_q6_K, decode_q6_K, QK_K>;
    case GgmlType::Q8_K: return element<block_q8_K, decode_q8_K, QK_K>;
    case GgmlType::IQ4_NL: return element<block_iq4_nl, decode_iq4_nl, QK>;
    case GgmlType::IQ4_XS: return element<block_iq4_xs, decode_iq4_xs, QK_K>;
  }
  fail("element_decoder: unsupported type id {}", uint32_t(t));
}

float dequantize_element(GgmlType t, const void* row, int64_t i) { return element_decoder(t)(row, i); }

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case GgmlType::F16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    }
    case GgmlType::BF16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    }
    case GgmlType::Q4_0: return blocks<block_q4_0, decode_q4_0, QK>(src, dst, n);
    case GgmlType::Q4_1: return blocks<block_q4_1, decode_q4_1, QK>(src, dst, n);
    case GgmlType::Q5_0: return blocks<block_q5_0, decode_q5_0, QK>(src, dst, n);
    case GgmlType::Q5_1: return blocks<block_q5_1, decode_q5_1, QK>(src, dst, n);
    case GgmlType::Q8_0: return blocks<block_q8_0, decode_q8_0, QK>(src, dst, n);
    case GgmlType::Q8_1: return blocks<block_q8_1, decode_q8_1, QK>(src, dst, n);
    case GgmlType::Q2_K: return blocks<block_q2_K, decode_q2_K, QK_K>(src, dst, n);
    case GgmlType::Q3_K: return blocks<block_q3_K, decode_q3_K, QK_K>(src, dst, n);
    case GgmlType::Q4_K: return blocks<block_q4_K, decode_q4_K, QK_K>(src, dst, n);
    case GgmlType::Q5_K: return blocks<block_q5_K, decode_q5_K, QK_K>(src, dst, n);
    case GgmlType::Q6_K: return blocks<block_q6_K, decode_q6_K, QK_K>(src, dst, n);
    case GgmlType::Q8_K: return blocks<block_q8_K, decode_q8_K, QK_K>(src, dst, n);
    case GgmlType::IQ4_NL: return blocks<block_iq4_nl, decode_iq4_nl, QK>(src, dst, n);
    case GgmlType::IQ4_XS: return blocks<block_iq4_xs, decode_iq4_xs, QK_K>(src, dst, n);
  }
  fail("dequantize_row: unsupported type id {}", uint32_t(t));
}

}  // namespace lamina
